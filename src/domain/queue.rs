//! A resource's fair queue as people read it (docs/design.md §12): who
//! waits, in which order, on which instance, since when. Never an owner
//! token or operation id: a waiter is named by its instance and its
//! attempt's public holder label.

use serde::Serialize;
use utoipa::ToSchema;

use super::{HolderLabel, Mode, StoreTime};

/// Most waiters one answer returns (`limit`).
pub const WAITERS_MAX: u16 = 100;
/// Waiters returned when `limit` is left out.
pub const WAITERS_DEFAULT: u16 = 20;
/// Most queue entries one read looks at: the work of a call is bounded
/// however long the queue; `waiting` counts the live ones among them.
pub const QUEUE_SCAN: usize = 1_000;

/// `limit` of a waiters read: 1 ..= [`WAITERS_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitersLimit(u16);

impl WaitersLimit {
    /// From the query's text; `None` when it is not a whole number in range.
    pub fn parse(text: &str) -> Option<Self> {
        let n: u16 = text.parse().ok()?;
        (1..=WAITERS_MAX).contains(&n).then_some(Self(n))
    }

    /// The limit.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl Default for WaitersLimit {
    fn default() -> Self {
        Self(WAITERS_DEFAULT)
    }
}

/// One live entry of a fair queue as a store reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The instance whose waiter it is.
    pub instance: String,
    /// The mode it asks for.
    pub mode: Mode,
    /// When it took its place (the store's clock).
    pub since: StoreTime,
    /// Its attempt's holder label, when its entry carries one.
    pub holder: Option<HolderLabel>,
}

/// An instance with live waiters in a queue, and its heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueInstance {
    /// The instance's id (random per process; `local` on the embedded store).
    #[schema(example = "9f2c41d07a3b8e65")]
    pub instance: String,
    /// How long its last heartbeat keeps its waiters in the queue: an
    /// instance that stops beating (killed) stops holding the queue up
    /// when this reaches 0 (at most 2 s after its last beat).
    #[schema(minimum = 0, example = 1500)]
    pub alive_for_ms: u64,
    /// How long ago it sent that heartbeat (an instance beats for its
    /// waiters well within the 2 s it keeps them queued).
    #[schema(minimum = 0, example = 500)]
    pub heartbeat_age_ms: u64,
}

/// A resource's queue as a store read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRead {
    /// The store's clock when it read.
    pub now: StoreTime,
    /// Live entries among the first [`QUEUE_SCAN`].
    pub waiting: u32,
    /// Whether the read saw the whole queue.
    pub complete: bool,
    /// The first live entries, in queue order (at most the limit).
    pub entries: Vec<QueueEntry>,
    /// The instances with live entries, and their heartbeats (Redis; the
    /// first 64 in queue order).
    pub instances: Vec<QueueInstance>,
}

/// One waiter as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"position": 1, "instance": "9f2c41d07a3b8e65", "mode": "exclusive",
    "since": "2026-12-05T20:14:03.120Z", "waitedMs": 12004, "holder": "worker-9"}))]
pub struct Waiter {
    /// Its place: 1 goes next.
    #[schema(minimum = 1, maximum = 1000)]
    pub position: u32,
    /// The instance the waiter's request waits on.
    #[schema(min_length = 1, max_length = 64, example = "9f2c41d07a3b8e65")]
    pub instance: String,
    /// The mode it asks for.
    pub mode: Mode,
    /// When it took its place (RFC 3339, UTC, ms; the store's clock).
    #[schema(value_type = String, format = DateTime, example = "2026-12-05T20:14:03.120Z")]
    pub since: StoreTime,
    /// How long it has waited (by the store's clock).
    #[schema(minimum = 0, example = 12004)]
    pub waited_ms: u64,
    /// Its attempt's public holder label, when known (a plain lease's
    /// waiter leaves it with its place).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, max_length = 256, example = "worker-9")]
    pub holder: Option<HolderLabel>,
}

/// `waiters` (200): who waits for a resource, first in line first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename = "waiters", rename_all = "camelCase")]
pub struct Waiters {
    /// How many wait (live entries among the first 1 000 of the queue).
    pub waiting: u32,
    /// False when the queue is longer than the 1 000 entries read.
    pub complete: bool,
    /// The first `limit` waiters, in the order they will acquire.
    pub waiters: Vec<Waiter>,
    /// The instances with waiters here, with their heartbeats (empty on
    /// the embedded store: one instance, no heartbeats).
    pub instances: Vec<QueueInstance>,
}

impl super::OutcomeName for Waiters {
    fn outcome_name(&self) -> &'static str {
        "waiters"
    }
}

impl From<QueueRead> for Waiters {
    fn from(read: QueueRead) -> Self {
        let now = read.now.0;
        Self {
            waiting: read.waiting,
            complete: read.complete,
            waiters: (1..)
                .zip(read.entries)
                .map(|(position, e)| Waiter {
                    position,
                    instance: e.instance,
                    mode: e.mode,
                    waited_ms: now.saturating_sub(e.since.0),
                    since: e.since,
                    holder: e.holder,
                })
                .collect(),
            instances: read.instances,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_positions() {
        assert_eq!(WaitersLimit::parse("1").map(WaitersLimit::get), Some(1));
        assert_eq!(WaitersLimit::parse("100").map(WaitersLimit::get), Some(100));
        for bad in ["0", "101", "", "x", "-1"] {
            assert_eq!(WaitersLimit::parse(bad), None, "{bad}");
        }
        let entry = |since| QueueEntry {
            instance: "a".into(),
            mode: Mode::Exclusive,
            since: StoreTime(since),
            holder: None,
        };
        let answer = Waiters::from(QueueRead {
            now: StoreTime(5_000),
            waiting: 2,
            complete: true,
            entries: vec![entry(1_000), entry(4_000)],
            instances: Vec::new(),
        });
        let json = serde_json::to_value(&answer).expect("json");
        assert_eq!(json["outcome"], "waiters");
        assert_eq!(json["waiters"][0]["position"], 1);
        assert_eq!(json["waiters"][0]["waitedMs"], 4_000);
        assert_eq!(json["waiters"][1]["position"], 2);
        assert_eq!(json["waiters"][1]["since"], "1970-01-01T00:00:04.000Z");
        assert!(json["waiters"][0].get("holder").is_none());
    }
}
