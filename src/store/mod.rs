//! Where leases live: the [`Store`] the service talks to, with two
//! implementations that keep the same contract.
//!
//! - [`memory::MemoryStore`]: in-process, the default when no Redis is
//!   configured; one instance only.
//! - [`redis::RedisStore`]: Redis (standalone, Cluster or Sentinel) through
//!   pooled connections, one Lua script per verb, so every check and
//!   mutation happens in one script run.
//!
//! Nothing Redis-specific leaks out of this module: a store answers with the
//! plain results below or a [`StoreError`] that says whether the command
//! definitely did not apply (`Unavailable`) or may have (`Indeterminate`).

mod backend;
pub mod instances;
pub mod memory;
mod queueing;
pub mod redis;
mod sessions;
mod types;
mod waiters;

pub use backend::Store;
pub use queueing::{Ask, InQueue, Moved, QueueOp, Queued};
pub use sessions::{keep_ms, MemorySessions, SessionCall, SessionFound};
pub use types::{
    AcquireSpec, Contention, EndedEarly, EndedHold, HoldEnd, Probe, Readiness, Replicated,
    Replication, StoreAcquire, StoreBreak, StoreError, StoreInspect, StoreLease, StoreListed,
    StorePage, StoreRelease, StoreRenew, PERMITS_SHOWN,
};
