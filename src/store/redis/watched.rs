//! The purposes this instance last read as watched from the registry
//! (`script/purposes.rs`, docs/watching.md "Watching a purpose").

use std::collections::HashSet;
use std::sync::RwLock;

use crate::domain::Purpose;

/// The purposes this instance last read as watched (empty until the first
/// read): shared by the poller and every acquire and renew.
#[derive(Default)]
pub struct WatchedPurposes(RwLock<HashSet<String>>);

impl WatchedPurposes {
    /// Whether `purpose` was marked watched at the last read.
    pub fn contains(&self, purpose: &Purpose) -> bool {
        let set = self.0.read().unwrap_or_else(|p| p.into_inner());
        !set.is_empty() && set.contains(purpose.as_str())
    }

    pub(super) fn replace(&self, purposes: HashSet<String>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = purposes;
    }
}
