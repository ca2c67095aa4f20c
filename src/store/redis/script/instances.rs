//! `lua/instances.lua` from the Rust side: the roster of the instances
//! sharing the store (docs/storage.md, "Keys"). Each instance beats
//! into it every [`BEAT_EVERY`] until it stops, then leaves it; `GET
//! /instances` reads it.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{int, store_time, text, STATUS};
use crate::domain::{InstanceSeen, Roster, StoreTime, BEAT_EVERY, ROSTER_CAP, STALE_AFTER};
use crate::store::StoreError;

/// The script, hashed once.
static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new("instances", lua::INSTANCES.assembled));

/// The roster's hash tag (one Cluster slot for the whole roster).
const TAG: &str = "instances";

/// How often a failed beat is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    op: &'a str,
    member: &'a str,
    stale_ms: &'a str,
    cap: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 4> {
        [
            ("op", self.op),
            ("member", self.member),
            ("stale ms", self.stale_ms),
            ("cap", self.cap),
        ]
    }
}

/// Status 1: the roster as read; 2: the same, after a beat that found it
/// full and did not add this instance.
const FULL: i64 = 2;

/// `{status, now, member, beat ms, ...}` → the roster, this instance
/// (`me`) marked, and whether the status was [`FULL`].
fn decode(items: &[Value], me: &str) -> Result<(Roster, bool), StoreError> {
    let status = int(items, STATUS)?;
    if !(status == 1 || status == FULL) || items.len() < 2 || !items.len().is_multiple_of(2) {
        return Err(bad_reply());
    }
    let now = store_time(int(items, 1)?)?;
    let mut instances = Vec::with_capacity((items.len() - 2) / 2);
    for i in (2..items.len()).step_by(2) {
        let mut parts = text(items, i)?.splitn(3, '|');
        let (Some(id), Some(started), Some(version)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad_reply());
        };
        let started: u64 = started.parse().map_err(|_| bad_reply())?;
        // The score: whole ms of the server's clock, below 2^53.
        let beat: f64 = text(items, i + 1)?.parse().map_err(|_| bad_reply())?;
        instances.push(InstanceSeen {
            id: id.to_owned(),
            version: version.to_owned(),
            started: StoreTime(started),
            beat_age_ms: now.0.saturating_sub(beat as u64),
            this: id == me,
        });
    }
    Ok((Roster::sorted(now, instances), status == FULL))
}

impl RedisStore {
    /// Runs the roster script with `op` for this instance's `member`.
    async fn roster_call(&self, op: &str, member: &str) -> Result<(Roster, bool), StoreError> {
        let key = format!("{}:instances:v2:{{{TAG}}}", self.namespace);
        let (stale, cap) = (STALE_AFTER.as_millis().to_string(), ROSTER_CAP.to_string());
        let args = Args {
            op,
            member,
            stale_ms: &stale,
            cap: &cap,
        };
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: TAG,
                keys: &[key.as_str()],
                args: &values(&args.named()),
                acks: None,
            })
            .await?;
        decode(&done.value, &self.instance)
    }

    /// The instances that beat within the staleness bound, this one marked.
    pub(in crate::store) async fn instances(&self) -> Result<Roster, StoreError> {
        Ok(self.roster_call("read", "").await?.0)
    }

    /// Beats into the roster every [`BEAT_EVERY`] until `shutdown`, then
    /// removes this instance from it (one call, bounded by the command
    /// timeout). A failed beat is logged at most once a minute and changes
    /// nothing else: serving never waits for the roster.
    pub(in crate::store) async fn beat_roster(
        self: Arc<Self>,
        started: StoreTime,
        shutdown: CancellationToken,
    ) {
        let member = format!(
            "{}|{}|{}",
            self.instance,
            started.0,
            env!("CARGO_PKG_VERSION")
        );
        let mut logged: Option<Instant> = None;
        loop {
            let problem = match self.roster_call("beat", &member).await {
                Ok((_, false)) => None,
                Ok((_, true)) => Some(format!(
                    "the roster of instances is full ({ROSTER_CAP}); this instance is not listed"
                )),
                Err(err) => Some(err.to_string()),
            };
            if let Some(problem) = problem {
                if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                    logged = Some(Instant::now());
                    tracing::warn!(%problem, "instance heartbeat failed; serving goes on (logged at most once a minute)");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(BEAT_EVERY) => {}
            }
        }
        if let Err(err) = self.roster_call("leave", &member).await {
            tracing::warn!(%err, "leaving the roster of instances failed; it drops this instance when its heartbeat goes stale");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::INSTANCES.entry,
            vec!["roster".to_owned()],
            names(&Args::default().named()),
        );
    }

    #[test]
    fn the_roster_decodes_with_this_instance_marked() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let items = vec![
            Value::Int(1),
            Value::Int(20_000),
            bulk("bb|100|1.2.0"),
            bulk("19000"),
            bulk("aa|50|1.1.0"),
            bulk("16000"),
        ];
        let (roster, full) = decode(&items, "bb").expect("decoded");
        assert!(!full);
        assert_eq!(roster.now, StoreTime(20_000));
        let ids: Vec<_> = roster.instances.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["aa", "bb"]);
        let (a, b) = (&roster.instances[0], &roster.instances[1]);
        assert_eq!(
            (a.beat_age_ms, a.this, a.version.as_str()),
            (4_000, false, "1.1.0")
        );
        assert_eq!(
            (b.beat_age_ms, b.this, b.started),
            (1_000, true, StoreTime(100))
        );
        let mut full = items.clone();
        full[0] = Value::Int(2);
        assert!(decode(&full, "bb").expect("decoded").1);
        assert!(decode(&items[..5], "bb").is_err());
        assert!(decode(&[Value::Int(1), Value::Int(5), bulk("x|y"), bulk("1")], "x").is_err());
        assert!(decode(&[Value::Int(-9), Value::Int(5)], "x").is_err());
    }
}
