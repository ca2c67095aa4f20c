//! The instances sharing the store (`GET /instances`, the console's health
//! area): on Redis a roster every instance beats into (`lua/instances.lua`,
//! docs/storage.md "Keys"); the embedded store answers just this
//! instance.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Store, StoreError};
use crate::domain::{InstanceSeen, Roster, StoreTime};

/// The id the embedded store's instance has (as in its fair queues).
const LOCAL: &str = "local";

/// When this process started serving: the first call, from
/// [`Store::start_roster`] at startup.
fn started() -> StoreTime {
    static STARTED: OnceLock<StoreTime> = OnceLock::new();
    *STARTED.get_or_init(wall_ms)
}

fn wall_ms() -> StoreTime {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    StoreTime(ms)
}

/// The beat task: awaited at shutdown so that a cleanly stopped instance
/// leaves the roster before the process exits.
pub struct RosterTask(Option<JoinHandle<()>>);

impl RosterTask {
    /// Waits, at most `within`, for the task to leave the roster (it does
    /// once the shutdown token it was given is cancelled).
    pub async fn stopped(self, within: Duration) {
        if let Some(task) = self.0 {
            if tokio::time::timeout(within, task).await.is_err() {
                tracing::warn!(
                    ?within,
                    "leaving the roster of instances took too long; it drops this instance when its heartbeat goes stale"
                );
            }
        }
    }
}

impl Store {
    /// Starts beating into the roster (Redis) until `shutdown`, then
    /// leaving it; nothing to do for the embedded store.
    pub fn start_roster(&self, shutdown: CancellationToken) -> RosterTask {
        let started = started();
        match self {
            Store::Memory(_) => RosterTask(None),
            Store::Redis(s) => RosterTask(Some(tokio::spawn(
                std::sync::Arc::clone(s).beat_roster(started, shutdown),
            ))),
        }
    }

    /// The instances sharing the store, this one marked (the embedded
    /// store: just this one).
    pub async fn instances(&self) -> Result<Roster, StoreError> {
        match self {
            Store::Memory(_) => Ok(Roster {
                now: wall_ms(),
                instances: vec![InstanceSeen {
                    id: LOCAL.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    started: started(),
                    beat_age_ms: 0,
                    this: true,
                }],
            }),
            Store::Redis(s) => s.instances().await,
        }
    }
}
