//! What one phase is: the scenario it runs (`Kind`), the side it measures
//! (`Side`), and what it measured (`Phase`), named as the report prints them.

use crate::procs::Cpu;
use crate::stats::Stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Acquire,
    Cycle,
    Contended,
    Paced,
    /// Service only: C contenders on one resource, each acquiring with
    /// `limit` and `waitMs` (waiting server-side) and releasing at once.
    Permits(u32),
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Acquire => "acquire",
            Kind::Cycle => "cycle",
            Kind::Contended => "contended",
            Kind::Paced => "paced",
            Kind::Permits(_) => "permits",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Side {
    Raw,
    Service,
    /// `LOAD_BASELINE_BIN`: another leasehold build, e.g. the previous release.
    Baseline,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Raw => "raw redis",
            Side::Service => "leasehold",
            Side::Baseline => "baseline",
        }
    }
}

pub(crate) struct Phase {
    pub(crate) kind: Kind,
    pub(crate) side: Side,
    pub(crate) secs: f64,
    pub(crate) stats: Stats,
    pub(crate) cpu: Cpu,
    pub(crate) rate: Option<f64>,
    /// Per request sent: (EVALSHA calls, extra top-level commands) seen by Redis.
    pub(crate) commands: (f64, f64),
    /// EVALSHAs Redis executed per socket read (`INFO stats`
    /// `total_reads_processed`): how well its clients batch. Fewer reads per
    /// command cost Redis less CPU per command.
    pub(crate) per_read: f64,
    /// Redis' µs per EVALSHA (`usec_per_call`).
    pub(crate) redis_us: f64,
}

impl Phase {
    pub(crate) fn ops_per_s(&self) -> f64 {
        self.stats.ops as f64 / self.secs
    }
}
