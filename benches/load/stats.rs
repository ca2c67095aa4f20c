//! Measurement: the window an operation must fall in to count, what each
//! worker saw (latencies, outcomes, errors), and the figures drawn from it
//! (percentiles, medians, spreads, CPU per 10 000 operations).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// Lease requests (HTTP) or script calls (raw) sent in the current phase,
/// warm-up included: the denominator of "Redis commands per request".
pub(crate) static SENT: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

impl Window {
    pub(crate) fn contains(&self, t0: Instant, t1: Instant) -> bool {
        t0 >= self.start && t1 <= self.end
    }
}

/// What one worker (or a whole phase) saw.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) lat_ns: Vec<u64>,
    pub(crate) ops: u64,
    pub(crate) acquired: u64,
    pub(crate) contended: u64,
    /// Documented 5xx outcomes (`unavailable`, `overloaded`, `indeterminate`) by name.
    pub(crate) typed_5xx: BTreeMap<String, u64>,
    /// Everything else that should never happen: socket errors, undocumented
    /// 5xx, unexpected statuses, Redis errors.
    pub(crate) untyped: BTreeMap<String, u64>,
    pub(crate) late_sends: u64,
}

impl Stats {
    pub(crate) fn merge(&mut self, other: Stats) {
        self.lat_ns.extend(other.lat_ns);
        self.ops += other.ops;
        self.acquired += other.acquired;
        self.contended += other.contended;
        self.late_sends += other.late_sends;
        for (k, v) in other.typed_5xx {
            *self.typed_5xx.entry(k).or_default() += v;
        }
        for (k, v) in other.untyped {
            *self.untyped.entry(k).or_default() += v;
        }
    }

    pub(crate) fn op(&mut self, win: &Window, t0: Instant) {
        let t1 = Instant::now();
        if win.contains(t0, t1) {
            self.ops += 1;
            self.lat_ns
                .push(u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX));
        }
    }

    pub(crate) fn untyped(&mut self, what: impl Into<String>) {
        *self.untyped.entry(what.into()).or_default() += 1;
    }

    pub(crate) fn errors(&self) -> u64 {
        self.untyped.values().sum()
    }

    pub(crate) fn typed(&self) -> u64 {
        self.typed_5xx.values().sum()
    }

    /// Classifies a non-success HTTP answer.
    pub(crate) fn bad_status(&mut self, status: u16, body: &[u8]) {
        if status >= 500 {
            let text = String::from_utf8_lossy(body);
            let outcome = ["unavailable", "overloaded", "indeterminate"]
                .into_iter()
                .find(|o| text.contains(&format!("\"outcome\":\"{o}\"")));
            match outcome {
                Some(o) => *self.typed_5xx.entry(format!("{status} {o}")).or_default() += 1,
                None => self.untyped(format!("HTTP {status} without a documented outcome")),
            }
        } else {
            self.untyped(format!(
                "unexpected HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(120)])
            ));
        }
    }
}

pub(crate) fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1e6
}

pub(crate) fn ms(ns_sorted: &[u64], p: f64) -> String {
    format!("{:.3}", percentile(ns_sorted, p))
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let med = median(v.to_vec());
    format!(
        "{min:.0}..{max:.0} (±{:.1} %)",
        (max - min) / 2.0 / med * 100.0
    )
}

pub(crate) fn mb(kb: Option<u64>) -> String {
    kb.map_or("?".into(), |k| format!("{:.1} MB", k as f64 / 1024.0))
}

pub(crate) fn per_10k(cpu_s: f64, ops: u64) -> f64 {
    if ops == 0 {
        f64::NAN
    } else {
        cpu_s / ops as f64 * 10_000.0
    }
}
