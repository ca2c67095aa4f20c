//! Notification on this instance: who waits for a resource (server-side
//! waits, [`WaitRegistry`]) and who watches one (long-polls and event
//! streams, [`WatchHub`]), and how a [`Change`](crate::domain::Change) a
//! store reports reaches both. One owner: the registry holds the hub, and
//! every store feeds the registry.

mod waits;
mod watch;

pub use self::waits::{ResourceWaiters, WaitGuard, WaitRegistry};
pub use self::watch::{newer, Read, Snapshot, WatchHub, Watcher, REFRESH};
