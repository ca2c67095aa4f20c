//! Notification on this instance: who waits for a resource (server-side
//! waits, [`WaitRegistry`]) and who watches one (long-polls and event
//! streams, [`WatchHub`]), and how a [`Change`](crate::domain::Change) a
//! store reports reaches both. One owner: the registry holds the hub, and
//! every store feeds the registry.

mod keepalive;
mod purpose;
mod purpose_event;
mod purpose_group;
mod purpose_run;
mod snapshot;
mod waits;
mod watch;

pub use self::purpose::{Next, PurposeHub, PurposeIo, PurposeWatcher, Start, RING, WATCHER_BUFFER};
pub use self::purpose_event::{event_id, with_digest, PurposeChange, PurposeEvent};
pub use self::waits::{Grant, ResourceWaiters, Seat, WaitGuard, WaitRegistry};
pub use self::watch::{
    newer, Admitted, Encode, Flush, Read, Sink, Snapshot, Socket, WatchHub, Watcher, REFRESH,
};
