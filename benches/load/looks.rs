//! "Only the head looks" (issue 41, design §12), measured in `fair`: the
//! script runs per contended acquisition split by kind, and the looks that
//! found nothing.
//!
//! * Script runs by kind: each instance's
//!   `leasehold_store_command_duration_seconds_count{script=...}` (one
//!   sample per script run), scraped from `/metrics` before and after the
//!   phase, summed over the two instances.
//! * A *look* is an acquire run beyond a request's own first one (a waiter
//!   woken, or a last look at its deadline): acquire runs − acquire
//!   requests sent.
//! * Acquisitions a look won: the acquisitions that waited (their answer
//!   carries `waitedMs`) − those a release granted in its own run (the
//!   `granted` messages on the wake-up channel, counted by a subscriber of
//!   the bench's own; the waiter's instance answers those without a run).
//! * Looks that found nothing = looks − acquisitions a look won (goal: 0).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::Method;
use redis::aio::MultiplexedConnection;

use crate::consts::NAMESPACE;
use crate::http_client::Http;
use crate::raw::redis_cmd;

/// What the contenders count as they go.
#[derive(Default)]
pub(crate) struct Requests {
    /// Acquire requests sent.
    pub(crate) puts: AtomicU64,
    /// `acquired` answers that carry `waitedMs`.
    pub(crate) waited: AtomicU64,
}

impl Requests {
    pub(crate) fn sent(&self) {
        self.puts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an `acquired` answer `body` that waited.
    pub(crate) fn acquired(&self, body: &[u8]) {
        if body.windows(10).any(|w| w == b"\"waitedMs\"") {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Script runs by script name, summed over `addrs`' `/metrics`.
pub(crate) async fn script_runs(addrs: &[SocketAddr]) -> Result<BTreeMap<String, u64>, String> {
    const NAME: &str = "leasehold_store_command_duration_seconds_count{";
    let mut runs = BTreeMap::new();
    for addr in addrs {
        let mut http = Http::connect(*addr).await?;
        let (status, body) = http.call(Method::GET, "/metrics", &[], None).await?;
        if status != 200 {
            return Err(format!("GET /metrics on {addr}: {status}"));
        }
        for line in String::from_utf8_lossy(&body).lines() {
            let Some(rest) = line.strip_prefix(NAME) else {
                continue;
            };
            let Some((labels, n)) = rest.split_once("} ") else {
                continue;
            };
            let script = labels
                .split(',')
                .find_map(|l| l.strip_prefix("script=\""))
                .map(|s| s.trim_end_matches('"'));
            if let (Some(script), Ok(n)) = (script, n.trim().parse::<f64>()) {
                *runs.entry(script.to_owned()).or_insert(0) += n as u64;
            }
        }
    }
    Ok(runs)
}

/// Counts the `granted` messages on the wake-up channel until
/// [`Grants::finish`].
pub(crate) struct Grants {
    task: tokio::task::JoinHandle<Result<u64, String>>,
    end: String,
}

const CHANNEL: &str = "wake:v2";

impl Grants {
    /// Subscribes (returns once the subscription is in place).
    pub(crate) async fn start(redis_url: &str) -> Result<Grants, String> {
        use futures_util::StreamExt as _;
        let channel = format!("{NAMESPACE}:{CHANNEL}");
        let mut pubsub = redis::Client::open(redis_url)
            .map_err(|e| e.to_string())?
            .get_async_pubsub()
            .await
            .map_err(|e| format!("subscribe: {e}"))?;
        pubsub
            .subscribe(&channel)
            .await
            .map_err(|e| format!("subscribe: {e}"))?;
        // A message no script sends: the end of the count.
        let end = format!("bench-end\t{}", std::process::id());
        let until = end.clone();
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            let mut messages = pubsub.on_message();
            while let Some(m) = messages.next().await {
                let payload: String = m.get_payload().unwrap_or_default();
                if payload == until {
                    return Ok(n);
                }
                n += u64::from(payload.split('\t').nth(2) == Some("granted"));
            }
            Err("the wake-up subscription ended".to_owned())
        });
        Ok(Grants { task, end })
    }

    /// Publishes the end mark (after every script's own message, on one
    /// channel of one server) and returns the grants counted before it.
    pub(crate) async fn finish(self, admin: &mut MultiplexedConnection) -> Result<u64, String> {
        let channel = format!("{NAMESPACE}:{CHANNEL}");
        redis_cmd(admin, &["PUBLISH", &channel, &self.end]).await?;
        match tokio::time::timeout(std::time::Duration::from_secs(10), self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("grant counter: {e}")),
            Err(_) => Err("grant counter: no end mark within 10 s".into()),
        }
    }
}

/// One phase's figures.
#[derive(Clone, Default)]
pub(crate) struct Looks {
    /// Script runs per acquisition, by script.
    pub(crate) per_take: BTreeMap<String, f64>,
    /// Looks per acquisition.
    pub(crate) looks_per_take: f64,
    /// Looks that found nothing, in all, and per acquisition.
    pub(crate) empty: i64,
    pub(crate) empty_per_take: f64,
    /// Acquisitions a release granted in its own run, share of all.
    pub(crate) granted_share: f64,
}

impl Looks {
    pub(crate) fn new(
        before: &BTreeMap<String, u64>,
        after: &BTreeMap<String, u64>,
        requests: &Requests,
        grants: u64,
        takes: usize,
    ) -> Looks {
        let takes_f = takes.max(1) as f64;
        let runs = |s: &str| {
            after
                .get(s)
                .copied()
                .unwrap_or(0)
                .saturating_sub(before.get(s).copied().unwrap_or(0))
        };
        let per_take = after
            .keys()
            .map(|k| (k.clone(), runs(k) as f64 / takes_f))
            .filter(|(_, n)| *n > 0.0)
            .collect();
        let puts = requests.puts.load(Ordering::Relaxed);
        let waited = requests.waited.load(Ordering::Relaxed);
        let looks = runs("acquire") as i64 - puts as i64;
        let won = waited as i64 - grants as i64;
        Looks {
            per_take,
            looks_per_take: looks as f64 / takes_f,
            empty: looks - won,
            empty_per_take: (looks - won) as f64 / takes_f,
            granted_share: grants as f64 / takes_f,
        }
    }

    /// "acquire 1.00, queue 0.50, release 1.00; looks 0.50/acq, of which
    /// found nothing 3 (0.001/acq); granted by the release 45 %".
    pub(crate) fn text(&self) -> String {
        let kinds: Vec<String> = self
            .per_take
            .iter()
            .map(|(k, n)| format!("{k} {n:.2}"))
            .collect();
        format!(
            "{}; looks {:.2}, found nothing {} ({:.3}); granted in the release's run {:.0} %",
            kinds.join(", "),
            self.looks_per_take,
            self.empty,
            self.empty_per_take,
            100.0 * self.granted_share
        )
    }
}

/// Shared by the contenders of one phase.
pub(crate) type SharedRequests = Arc<Requests>;
