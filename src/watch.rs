//! Watches: who on this instance follows which resource, and how a change
//! reaches them (DESIGN.md §9).
//!
//! Fed by the same events as waits ([`crate::wait::WaitRegistry::changed`]):
//! the Redis scripts publish acquires (while watched), releases and holder
//! changes on the wake-up channel; the embedded store reports them directly.

use crate::wait::Change;

/// The watchers of this instance.
#[derive(Default)]
pub struct WatchHub {}

impl WatchHub {
    /// `change` (when known) happened to `tag` on some instance.
    pub fn changed(&self, tag: &str, change: Option<Change>) {
        let _ = (tag, change);
    }

    /// Events may have been missed (the subscription reconnected): every
    /// watched resource is read again.
    pub fn changed_all(&self) {}
}
