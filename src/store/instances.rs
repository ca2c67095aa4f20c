//! The instances sharing the store (`GET /instances`, the console's health
//! area): on Redis a roster every instance beats into (`lua/instances.lua`,
//! docs/storage.md "Instances"); the embedded store answers just this
//! instance.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Store, StoreError};
use crate::domain::StoreTime;

/// How often an instance beats into the roster.
pub const BEAT_EVERY: Duration = Duration::from_secs(5);

/// An instance whose latest beat is older than this (3 beats) is gone
/// from the roster; the roster key itself expires this long after the
/// latest beat of any instance.
pub const STALE_AFTER: Duration = Duration::from_secs(15);

/// The most instances the roster lists: a beat that finds it full of live
/// instances is not added (and logs that, at most once a minute).
pub const ROSTER_CAP: usize = 256;

/// The id the embedded store's instance has (as in its fair queues).
const LOCAL: &str = "local";

/// One instance as the roster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSeen {
    /// Random per process (the id its fair-queue members carry).
    pub id: String,
    /// Its service version.
    pub version: String,
    /// When it started serving (its own clock).
    pub started: StoreTime,
    /// How long ago its latest beat was, by the store's clock.
    pub beat_age_ms: u64,
    /// Whether it is the instance answering.
    pub this: bool,
}

/// The instances that beat within [`STALE_AFTER`], by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    /// The store's clock when it read.
    pub now: StoreTime,
    /// At most [`ROSTER_CAP`], sorted by id.
    pub instances: Vec<InstanceSeen>,
}

impl Roster {
    /// The roster of `instances`, sorted by id.
    pub fn sorted(now: StoreTime, mut instances: Vec<InstanceSeen>) -> Self {
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        Self { now, instances }
    }
}

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
