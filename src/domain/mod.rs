//! The vocabulary of leasehold: names, bounds and outcomes. No I/O here.

mod bounds;
mod change;
mod history;
mod instances;
mod list;
mod names;
mod outcome;
mod queue;
mod session;
mod setting;
mod time;

pub use bounds::{Bounds, LeaseShape, Mode, Ttl, WaitMs};
pub use change::{BreakReason, Change, Revocation};
pub use history::{
    History, HistoryBound, HistoryEntry, HistoryEvent, HistoryItem, HistoryLimit, HistoryRecord,
};
pub use instances::{InstanceSeen, Roster, BEAT_EVERY, ROSTER_CAP, STALE_AFTER};
pub use list::{ListCursor, ListLimit, ListedLease, Listing, ScanPosition, NODE_ID_LEN};
pub use names::{
    Attempt, HolderLabel, NameError, OperationId, OwnerToken, Purpose, ResourceDigest, ResourceId,
};
pub use outcome::{
    AcquireOutcome, BreakOutcome, ContendedReason, EndedReason, Failure, FieldError, Guarantee,
    HeldBy, Inspection, Lease, LostReason, OutcomeName, PermitView, ReleaseOutcome, RenewOutcome,
    Replication,
};
pub use queue::{
    QueueEntry, QueueInstance, QueueRead, Waiter, Waiters, WaitersLimit, QUEUE_SCAN,
    WAITERS_DEFAULT, WAITERS_MAX,
};
pub use session::{
    member, member_parts, AttachedRenew, LostLease, SessionGone, SessionId, SessionLease,
    SessionOutcome, SessionRecord, SessionView,
};
pub use setting::ConfigError;
pub use time::StoreTime;
