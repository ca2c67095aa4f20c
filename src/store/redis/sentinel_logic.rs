//! Sentinel's pure decisions, apart from its I/O: which master the
//! sentinels' reports name (epochs and quorum), and how a reply's fields
//! are read. Unit-tested without a process.

use std::collections::HashMap;

use redis::Value;

/// What one sentinel says about the master.
#[derive(Clone)]
pub(super) struct Report {
    pub(super) addr: String,
    pub(super) epoch: u64,
    pub(super) failover: bool,
}

#[derive(Default)]
pub(super) struct Epochs {
    /// Highest config epoch followed.
    pub(super) seen: u64,
    /// The master named at `seen`.
    pub(super) seen_addr: String,
    /// Reports below this epoch are ignored (raised by `+switch-master`).
    pub(super) floor: u64,
    /// Bumped by every event that changes the belief: a re-check that was
    /// already asking when one arrived has stale answers and is discarded.
    pub(super) generation: u64,
}

/// What the sentinels' reports call for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Nothing usable: keep the current belief.
    Keep,
    /// The newest configuration is being failed over: pause writes.
    Pause,
    /// Write to this master.
    Follow(String),
}

impl Epochs {
    /// A sentinel announced `+switch-master` to `addr`: a newer config epoch
    /// than any seen, unless a re-check already saw it (every sentinel
    /// announces the same switch; only the first may raise the floor, or
    /// the floor passes the real epoch and every later report is ignored).
    pub(super) fn switched(&mut self, addr: &str) {
        if self.seen_addr != addr {
            self.floor = self.floor.max(self.seen + 1);
            self.seen += 1;
            addr.clone_into(&mut self.seen_addr);
        }
        self.generation += 1;
    }

    /// Follows the report with the highest config epoch at or above the
    /// floor. When every sentinel answered and all agree on something below
    /// the floor, the floor overshot (it is a guess made from an event):
    /// following them beats refusing writes until a restart.
    pub(super) fn decide(&mut self, answered: Vec<Report>, sentinels: usize) -> Decision {
        let unanimous = answered.len() == sentinels
            && answered
                .windows(2)
                .all(|w| w[0].epoch == w[1].epoch && w[0].addr == w[1].addr);
        if let Some(first) = answered.first() {
            if unanimous && first.epoch < self.floor {
                tracing::warn!(
                    epoch = first.epoch,
                    floor = self.floor,
                    "every sentinel reports an older config epoch than expected; following them"
                );
                self.floor = first.epoch;
            }
        }
        let floor = self.floor;
        let reports: Vec<Report> = answered.into_iter().filter(|r| r.epoch >= floor).collect();
        let Some(top) = reports.iter().map(|r| r.epoch).max() else {
            return Decision::Keep;
        };
        let newest: Vec<&Report> = reports.iter().filter(|r| r.epoch == top).collect();
        if top >= self.seen {
            self.seen = top;
            if let Some(r) = newest.first() {
                self.seen_addr.clone_from(&r.addr);
            }
        }
        if newest.iter().any(|r| r.failover) {
            Decision::Pause
        } else {
            newest
                .first()
                .map_or(Decision::Keep, |r| Decision::Follow(r.addr.clone()))
        }
    }
}

/// A RESP2 flat `[k, v, k, v, ...]` array or a RESP3 map, as strings.
pub(super) fn field_map(reply: &Value) -> Option<HashMap<String, String>> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        _ => None,
    }
}
