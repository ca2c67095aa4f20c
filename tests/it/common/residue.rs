//! What the service leaves behind (issue 39): the residue invariants of the
//! store's keys, and of a service process's descriptors and counts.
//!
//! **Keys.** [`KINDS`] is the storage layout as a table (docs/storage.md,
//! docs/decisions/storage-v2.md "Keys", the headers of `lua/*.lua`): every kind of key
//! the service writes, with the TTL it may carry at most, the size its
//! structure may reach at most, and whether it is *long-lived* (it may
//! outlive a quiet period of the test's length: the fencing sequence,
//! which lives the history's age, at least a minute and the longest TTL and
//! lock-delay; and the roster of instances, beaten into while any instance
//! runs and gone its TTL after the last beat).
//! The bounds depend on what the test's callers asked for ([`Layout`]:
//! their longest TTL, largest limit, the history settings, how many waits
//! can be in flight).
//!
//! [`check_nodes`] reads every key of a namespace on each Redis node in one
//! read-only script run per resource (all of a resource's keys share its
//! hash tag, so one slot: the run is atomic, and an ask is compared with
//! its queue at one instant), and returns a [`Violation`] per key that
//! breaks its kind's bounds: no TTL, a TTL above the bound, a size above
//! the bound, a tombstone kept more than a TTL past its permit's end, an
//! ask without its queue entry, or a key of no known kind. [`Sampler`] does
//! that throughout a run (a frozen or restarting node is skipped, counted);
//! [`until_quiet`] polls, with a bound, until only long-lived keys remain
//! once the longest TTL, the queue horizon and the history age have passed.
//!
//! Key names in reports are cut at the owner token (grant marks and claims
//! carry one in their name).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least a fencing sequence outlives its last write (`SEQ_KEY_FLOOR_MS`
/// in src/store/redis/keys.rs); else the history's age, or the lease's TTL
/// and lock-delay when longer.
pub const SEQ_FLOOR_MS: u64 = 60_000;
/// A queue lives 1 s past the latest heartbeat deadline, which a beat sets
/// 2 s ahead (`QUEUE_HORIZON_MS`); the ask hash lives as the queue.
pub const QUEUE_TTL_MS: u64 = 2_000 + 1_000;
/// A grant mark lives the granted permit's TTL, at most 60 s.
pub const GRANT_TTL_MS: u64 = 60_000;
/// A purpose stays marked watched 30 s after an instance's last mark
/// (`WATCH_MARK_MS`).
pub const WATCH_MARK_MS: u64 = 30_000;
/// The roster of instances expires 15 s after its latest beat
/// (`STALE_AFTER` in src/store/instances.rs) and lists at most 256
/// (`ROSTER_CAP`).
pub const ROSTER_TTL_MS: u64 = 15_000;
/// See [`ROSTER_TTL_MS`].
pub const ROSTER_CAP: u64 = 256;

/// What the test's callers asked for: the bounds of [`KINDS`] follow.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `LEASEHOLD_NAMESPACE` of the instances.
    pub namespace: String,
    /// The longest TTL any caller asked (acquire or renew).
    pub max_ttl_ms: u64,
    /// The longest lock-delay any caller asked.
    pub max_lock_delay_ms: u64,
    /// The largest limit any caller asked (1 for plain leases only), for
    /// a resource not in `limits`.
    pub max_limit: u64,
    /// The limit of each resource the test knows (by hash tag,
    /// `{<purpose>:<digest>}`; shared holders: their cap).
    pub limits: Vec<(String, u64)>,
    /// `LEASEHOLD_HISTORY_ENTRIES`.
    pub history_entries: u64,
    /// `LEASEHOLD_HISTORY_MAX_AGE_MS`.
    pub history_age_ms: u64,
    /// Most waits of one resource in flight at once, across instances,
    /// counting those whose caller left and that still run.
    pub waiters: u64,
    /// Instances sharing the namespace (each has one heartbeat member in a
    /// queue it waits on).
    pub instances: u64,
}

impl Layout {
    /// The limit of the resource whose key is `key`.
    pub fn limit_of(&self, key: &str) -> u64 {
        let tag = slot_part(key);
        self.limits
            .iter()
            .find(|(t, _)| t == tag)
            .map_or(self.max_limit, |(_, l)| *l)
    }

    /// How long after the last request every key but the long-lived ones
    /// must be gone: the longest of the permits' end (TTL + lock-delay),
    /// the queue's horizon, a grant mark and the history's age.
    pub fn quiet_after(&self) -> Duration {
        let lease = self.max_ttl_ms + self.max_lock_delay_ms;
        let ms = lease
            .max(QUEUE_TTL_MS)
            .max(self.history_age_ms)
            .max(GRANT_TTL_MS.min(self.max_ttl_ms));
        Duration::from_millis(ms)
    }
}

/// One kind of key the service writes.
#[derive(Debug)]
pub struct Kind {
    /// The kind's name in the layout (`<ns>:<name>:v2:...`).
    pub name: &'static str,
    /// The most PTTL a key of this kind may have (ms); a key without a
    /// TTL is always a violation.
    pub ttl_ms: fn(&Layout) -> u64,
    /// The most members/fields/entries its structure may hold (a string
    /// counts 1), given the resource's limit.
    pub size: fn(&Layout, u64) -> u64,
    /// What the size counts, for reports.
    pub counts: &'static str,
    /// May outlive the quiet period a test waits (only the sequence: the
    /// history's age, at least a minute).
    pub long_lived: bool,
}

fn lease_ttl(l: &Layout) -> u64 {
    l.max_ttl_ms + l.max_lock_delay_ms
}
fn permits(l: &Layout, limit: u64) -> u64 {
    // One field per live permit (at most the limit), plus `l` and `m`;
    // with lock-delays, expired permits still in theirs (at most as many
    // again: each was live within the delay).
    delayed(l, limit) + 2
}
fn delayed(l: &Layout, limit: u64) -> u64 {
    if l.max_lock_delay_ms > 0 {
        2 * limit
    } else {
        limit
    }
}
fn one(_: &Layout, _: u64) -> u64 {
    1
}
fn seq_ttl(l: &Layout) -> u64 {
    lease_ttl(l).max(l.history_age_ms).max(SEQ_FLOOR_MS)
}
fn hist_ttl(l: &Layout) -> u64 {
    l.history_age_ms
}
fn hist_size(l: &Layout, _: u64) -> u64 {
    l.history_entries
}
fn ttl(l: &Layout) -> u64 {
    l.max_ttl_ms
}
fn queue_ttl(_: &Layout) -> u64 {
    QUEUE_TTL_MS
}
fn queue_size(l: &Layout, _: u64) -> u64 {
    l.waiters + l.instances
}
fn asks(l: &Layout, _: u64) -> u64 {
    l.waiters
}
fn grant_ttl(l: &Layout) -> u64 {
    GRANT_TTL_MS.min(l.max_ttl_ms)
}
fn mark_ttl(_: &Layout) -> u64 {
    WATCH_MARK_MS
}
fn roster_ttl(_: &Layout) -> u64 {
    ROSTER_TTL_MS
}
fn roster_size(_: &Layout, _: u64) -> u64 {
    ROSTER_CAP
}
fn no_bound(_: &Layout, _: u64) -> u64 {
    u64::MAX
}
fn session_ttl(l: &Layout) -> u64 {
    // Its expiry (at most the largest TTL ahead) plus the time it is kept
    // to say why it is gone (its TTL, at least a minute, at most an hour).
    l.max_ttl_ms + l.max_ttl_ms.clamp(60_000, 3_600_000)
}
fn session_fields(_: &Layout, _: u64) -> u64 {
    7
}
fn session_leases(_: &Layout, _: u64) -> u64 {
    SESSION_MAX_LEASES
}

/// `LEASEHOLD_SESSION_MAX_LEASES`' default.
const SESSION_MAX_LEASES: u64 = 10_000;

/// Every kind of key the service writes (docs/storage.md "Keys").
pub const KINDS: &[Kind] = &[
    Kind {
        name: "session",
        ttl_ms: session_ttl,
        size: session_fields,
        counts: "fields",
        // Kept a minute at least past its end, to say why it is gone.
        long_lived: true,
    },
    Kind {
        name: "sessleases",
        ttl_ms: session_ttl,
        size: session_leases,
        counts: "members",
        // Kept a minute at least past its end, to say why it is gone.
        long_lived: true,
    },
    Kind {
        name: "lease",
        ttl_ms: lease_ttl,
        size: permits,
        counts: "fields",
        long_lived: false,
    },
    Kind {
        name: "exp",
        ttl_ms: lease_ttl,
        size: delayed,
        counts: "members",
        long_lived: false,
    },
    Kind {
        name: "seq",
        ttl_ms: seq_ttl,
        size: one,
        counts: "value",
        long_lived: true,
    },
    Kind {
        name: "hist",
        ttl_ms: hist_ttl,
        size: hist_size,
        counts: "entries",
        long_lived: false,
    },
    Kind {
        name: "tomb",
        ttl_ms: ttl,
        // Bounded by age instead (below): a tombstone is kept at most one
        // TTL past its permit's end.
        size: no_bound,
        counts: "fields",
        long_lived: false,
    },
    Kind {
        name: "queue",
        ttl_ms: queue_ttl,
        size: queue_size,
        counts: "members",
        long_lived: false,
    },
    Kind {
        name: "ask",
        ttl_ms: queue_ttl,
        size: asks,
        counts: "fields",
        long_lived: false,
    },
    Kind {
        name: "granted",
        ttl_ms: grant_ttl,
        // A string per grant, or (since issue 39) one hash of the
        // resource's grants: bounded by age, as tombstones.
        size: no_bound,
        counts: "marks",
        long_lived: false,
    },
    Kind {
        name: "claim",
        ttl_ms: ttl,
        size: one,
        counts: "value",
        long_lived: false,
    },
    Kind {
        name: "purposes",
        ttl_ms: mark_ttl,
        size: no_bound,
        counts: "fields",
        long_lived: false,
    },
    Kind {
        name: "instances",
        ttl_ms: roster_ttl,
        size: roster_size,
        counts: "members",
        // Beaten into while any instance runs: it outlives a quiet period
        // until the test's instances stop (then at most its TTL).
        long_lived: true,
    },
];

/// The kind of `key` in `namespace`, if it is one of [`KINDS`].
pub fn kind_of(namespace: &str, key: &str) -> Option<&'static Kind> {
    let rest = key.strip_prefix(namespace)?.strip_prefix(':')?;
    let (name, after) = rest.split_once(':')?;
    if !after.starts_with("v2:{") {
        return None;
    }
    KINDS.iter().find(|k| k.name == name)
}

/// `key` with anything after its hash tag's `}:p:` cut (an owner token).
pub fn shown(key: &str) -> String {
    match key.find("}:p:") {
        Some(i) => format!("{}}}:p:<token>:…", &key[..i]),
        None => key.to_owned(),
    }
}

/// A key that breaks its kind's bounds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The key (owner tokens cut).
    pub key: String,
    /// Its kind, or `unknown`.
    pub kind: &'static str,
    /// What was exceeded.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]: {}", self.key, self.kind, self.what)
    }
}

/// One key as the read script saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub key: String,
    pub kind: Option<&'static Kind>,
    pub pttl: i64,
    pub size: u64,
    /// Tombstones and grant marks (a hash of them): the oldest field's
    /// end, its permit's `expiresAt` (ms, server clock).
    pub oldest_end: Option<u64>,
    /// Asks: fields whose member is not in the queue.
    pub orphans: u64,
    /// The server clock at the read.
    pub now: u64,
}

/// Reads, in one run, the type, PTTL and size of every key given (all of
/// one resource: one slot), the oldest tombstone's end and the asks
/// without a queue entry. Read-only.
const READ: &str = r"#!lua flags=no-writes
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {tostring(now)}
for _, k in ipairs(KEYS) do
  local ty = redis.call('TYPE', k)['ok']
  local pttl = redis.call('PTTL', k)
  local size, extra = 0, -1
  if ty == 'hash' then
    size = redis.call('HLEN', k)
    if string.find(k, ':tomb:v2:{', 1, true) or string.find(k, ':granted:v2:{', 1, true) then
      -- <end>|... per permit field; 'c' is a prune cursor.
      local all = redis.call('HGETALL', k)
      for i = 1, #all, 2 do
        local e = all[i] ~= 'c' and tonumber(string.match(all[i + 1], '^(%d+)|'))
        if e and (extra < 0 or e < extra) then extra = e end
      end
    elseif string.find(k, ':ask:v2:{', 1, true) then
      local q = string.gsub(k, ':ask:v2:{', ':queue:v2:{', 1)
      extra = 0
      for _, f in ipairs(redis.call('HKEYS', k)) do
        if not redis.call('ZSCORE', q, f) then extra = extra + 1 end
      end
    end
  elseif ty == 'zset' then size = redis.call('ZCARD', k)
  elseif ty == 'list' then size = redis.call('LLEN', k)
  elseif ty == 'string' then size = 1
  end
  out[#out + 1] = k
  out[#out + 1] = ty
  out[#out + 1] = tostring(pttl)
  out[#out + 1] = tostring(size)
  out[#out + 1] = tostring(extra)
end
return out
";

/// The hash tag of `key` (`{...}`), or the key itself.
fn slot_part(key: &str) -> &str {
    match (key.find('{'), key.find('}')) {
        (Some(a), Some(b)) if b > a => &key[a..=b],
        _ => key,
    }
}

/// Every key of `namespace` on the node at `url`, read resource by
/// resource. `Err`: the node did not answer within `within` (frozen,
/// restarting).
pub async fn read_node(url: &str, namespace: &str, within: Duration) -> Result<Vec<Seen>, String> {
    tokio::time::timeout(within, read_node_inner(url, namespace))
        .await
        .map_err(|_| format!("{url}: no answer within {within:?}"))?
}

async fn read_node_inner(url: &str, namespace: &str) -> Result<Vec<Seen>, String> {
    let client = ::redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    let mut by_slot: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for k in &keys {
        by_slot.entry(slot_part(k)).or_default().push(k);
    }
    let mut seen = Vec::with_capacity(keys.len());
    for group in by_slot.values() {
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(READ).arg(group.len());
        for k in group {
            cmd.arg(k.as_str());
        }
        let out: Vec<String> = cmd
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let now: u64 = out.first().and_then(|n| n.parse().ok()).unwrap_or(0);
        for row in out[1..].chunks(5) {
            let [key, ty, pttl, size, extra] = row else {
                return Err(format!("unexpected reply {row:?}"));
            };
            if ty == "none" {
                continue; // expired between the scan and the read
            }
            let extra: i64 = extra.parse().unwrap_or(-1);
            // Hashes of "<end>|..." fields: tombstones, grant marks.
            let tomb = key.contains(":tomb:v2:{") || key.contains(":granted:v2:{");
            seen.push(Seen {
                kind: kind_of(namespace, key),
                key: key.clone(),
                pttl: pttl.parse().unwrap_or(-3),
                size: size.parse().unwrap_or(0),
                oldest_end: (tomb && extra >= 0).then_some(extra as u64),
                orphans: if tomb { 0 } else { extra.max(0) as u64 },
                now,
            });
        }
    }
    Ok(seen)
}

/// The bounds `key` breaks, given `layout`.
pub fn judge(seen: &Seen, layout: &Layout) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut v = |kind: &'static str, what: String| {
        out.push(Violation {
            key: shown(&seen.key),
            kind,
            what,
        })
    };
    let Some(kind) = seen.kind else {
        v(
            "unknown",
            "a key of no kind in the storage layout".to_owned(),
        );
        return out;
    };
    let ttl_bound = (kind.ttl_ms)(layout);
    match seen.pttl {
        -1 => v(kind.name, format!("no TTL (bound {ttl_bound} ms)")),
        p if p > 0 && p as u64 > ttl_bound => v(
            kind.name,
            format!("PTTL {p} ms above its bound {ttl_bound} ms"),
        ),
        _ => {}
    }
    let size_bound = (kind.size)(layout, layout.limit_of(&seen.key));
    if seen.size > size_bound {
        v(
            kind.name,
            format!("{} {} above its bound {size_bound}", seen.size, kind.counts),
        );
    }
    if let Some(end) = seen.oldest_end {
        // A tombstone (or grant mark) is read only while its permit could
        // still be renewed or released, that is until its end; whoever
        // adds one drops ended ones, so none outlives its end by more than
        // a TTL (docs/storage.md, "Keys"). This bounds the hash by the
        // permits that ended within a TTL.
        let limit = seen.now.saturating_sub(layout.max_ttl_ms);
        if end < limit {
            v(
                kind.name,
                format!(
                    "a field {} ms past its permit's end (bound: one TTL, {} ms); {} fields",
                    seen.now - end,
                    layout.max_ttl_ms,
                    seen.size
                ),
            );
        }
    }
    if seen.orphans > 0 {
        v(
            kind.name,
            format!("{} asks whose member is not in the queue", seen.orphans),
        );
    }
    out
}

/// What a sampler or a final read saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Node reads that answered.
    pub reads: usize,
    /// Node reads skipped (frozen, restarting, refused).
    pub skipped: usize,
    /// The largest size seen per kind, and the key.
    pub largest: BTreeMap<&'static str, (u64, String)>,
    /// Every violation, once per (key, kind, first line of what).
    pub violations: Vec<Violation>,
}

impl Report {
    fn add(&mut self, seen: &[Seen], layout: &Layout) {
        self.reads += 1;
        for s in seen {
            if let Some(kind) = s.kind {
                let e = self.largest.entry(kind.name).or_insert((0, String::new()));
                if s.size > e.0 {
                    *e = (s.size, shown(&s.key));
                }
            }
            for v in judge(s, layout) {
                let dup = self
                    .violations
                    .iter()
                    .any(|o| o.key == v.key && o.kind == v.kind);
                if !dup && self.violations.len() < 200 {
                    self.violations.push(v);
                }
            }
        }
    }

    /// The largest size per kind, for a run's printout.
    pub fn summary(&self) -> String {
        let sizes: Vec<String> = self
            .largest
            .iter()
            .map(|(k, (n, _))| format!("{k} {n}"))
            .collect();
        format!(
            "{} reads ({} skipped), largest: {}",
            self.reads,
            self.skipped,
            sizes.join(", ")
        )
    }

    /// Panics naming every violation.
    pub fn assert_clean(&self, what: &str) {
        if self.violations.is_empty() {
            return;
        }
        let lines: Vec<String> = self.violations.iter().map(|v| format!("  {v}")).collect();
        panic!(
            "residue [{what}]: {} keys break the storage layout's bounds:\n{}",
            self.violations.len(),
            lines.join("\n")
        );
    }
}

/// Reads every node once; a node that does not answer is skipped.
pub async fn check_nodes(nodes: &[String], layout: &Layout, report: &mut Report) {
    for url in nodes {
        match read_node(url, &layout.namespace, Duration::from_secs(1)).await {
            Ok(seen) => report.add(&seen, layout),
            Err(_) => report.skipped += 1,
        }
    }
}

/// Samples the namespace's keys on `nodes` every `every` until
/// [`Sampler::finish`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Report>,
}

impl Sampler {
    pub fn start(nodes: Vec<String>, layout: Layout, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut report = Report::default();
                while !stop.load(Ordering::Relaxed) {
                    check_nodes(&nodes, &layout, &mut report).await;
                    tokio::time::sleep(every).await;
                }
                report
            })
        };
        Sampler { stop, task }
    }

    pub async fn finish(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("residue sampler")
    }
}

/// Polls `nodes` (every 200 ms, for at most `layout.quiet_after()` plus
/// `slack`) until only long-lived keys remain, judging every read. On time
/// out, the report names each key still there, with its kind and PTTL.
pub async fn until_quiet(nodes: &[String], layout: &Layout, slack: Duration) -> Report {
    let deadline = Instant::now() + layout.quiet_after() + slack;
    let mut report = Report::default();
    loop {
        let mut left = Vec::new();
        let mut answered = true;
        for url in nodes {
            match read_node(url, &layout.namespace, Duration::from_secs(2)).await {
                Ok(seen) => {
                    report.add(&seen, layout);
                    left.extend(
                        seen.into_iter()
                            .filter(|s| !s.kind.is_some_and(|k| k.long_lived)),
                    );
                }
                Err(_) => {
                    report.skipped += 1;
                    answered = false;
                }
            }
        }
        if answered && left.is_empty() {
            return report;
        }
        if Instant::now() >= deadline {
            for s in left {
                report.violations.push(Violation {
                    key: shown(&s.key),
                    kind: s.kind.map_or("unknown", |k| k.name),
                    what: format!(
                        "still there {:?} after the last request (PTTL {} ms, {} {})",
                        layout.quiet_after() + slack,
                        s.pttl,
                        s.size,
                        s.kind.map_or("", |k| k.counts)
                    ),
                });
            }
            if !answered {
                report.violations.push(Violation {
                    key: String::new(),
                    kind: "node",
                    what: "a node never answered the final read".to_owned(),
                });
            }
            return report;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------
// The process: a real `leasehold serve` and what it holds
// ---------------------------------------------------------------------------

/// A `leasehold serve` child process (the real binary), SIGKILLed on drop:
/// its descriptors, memory and threads are read from `/proc/<pid>`, its
/// waits and watchers from `/readyz`.
pub struct ServiceProcess {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    log: std::path::PathBuf,
}

impl ServiceProcess {
    /// Starts `leasehold serve` with only `env` (plus a free loopback
    /// port and the log line that names it); blocks until it listens.
    pub fn start(env: &[(&str, &str)]) -> ServiceProcess {
        use std::process::{Command, Stdio};
        let log =
            std::env::temp_dir().join(format!("{}.log", super::app::unique("leasehold-process-")));
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.arg("serve")
            .env_clear()
            .env("LEASEHOLD_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn,leasehold::startup=info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn leasehold serve");
        let mut process = ServiceProcess {
            child,
            base: String::new(),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&process.log).unwrap_or_default();
            let addr = text
                .lines()
                .find(|l| l.contains("leasehold listening"))
                .and_then(|l| {
                    let start = l.find("addr=")? + 5;
                    let rest = &l[start..];
                    let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    Some(rest[..len].trim_matches('"').to_owned())
                });
            if let Some(addr) = addr {
                process.base = format!("http://{addr}");
                return process;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("leasehold serve exited ({status}) before listening:\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "leasehold serve not listening within 20 s:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (at most 20 s) for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(sent.success(), "kill -TERM {}", self.pid());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within 20 s of SIGTERM:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// `host:port` of the API.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.base
            .trim_start_matches("http://")
            .parse()
            .expect("listen address")
    }

    /// Open file descriptors (sockets, files, the runtime's own).
    pub fn fds(&self) -> u64 {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count() as u64)
    }

    /// Open sockets among them.
    pub fn sockets(&self) -> u64 {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) else {
            return 0;
        };
        dir.filter_map(Result::ok)
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
            })
            .count() as u64
    }

    fn status_field(&self, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Resident memory, KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_field("VmRSS:")
    }

    /// OS threads.
    pub fn threads(&self) -> u64 {
        self.status_field("Threads:")
    }

    /// `/readyz`'s `(waiters, watchers)`.
    pub async fn counts(&self, http: &reqwest::Client) -> (u64, u64) {
        let body: serde_json::Value = http
            .get(format!("{}/readyz", self.base))
            .send()
            .await
            .expect("readyz")
            .json()
            .await
            .expect("readyz json");
        (
            body["waiters"].as_u64().unwrap_or(u64::MAX),
            body["watchers"].as_u64().unwrap_or(u64::MAX),
        )
    }

    /// The log so far (for a failure message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            namespace: "ns".into(),
            max_ttl_ms: 1_000,
            max_lock_delay_ms: 0,
            max_limit: 3,
            limits: vec![("{p:one}".into(), 1)],
            history_entries: 100,
            history_age_ms: 3_000,
            waiters: 4,
            instances: 2,
        }
    }

    fn seen(key: &str, pttl: i64, size: u64) -> Seen {
        Seen {
            kind: kind_of("ns", key),
            key: key.into(),
            pttl,
            size,
            oldest_end: None,
            orphans: 0,
            now: 100_000,
        }
    }

    #[test]
    fn each_bound_is_judged_and_named() {
        let l = layout();
        assert!(judge(&seen("ns:lease:v2:{p:d}", 900, 5), &l).is_empty());
        let v = judge(&seen("ns:hist:v2:{p:d}", -1, 3), &l);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind, "hist");
        assert!(v[0].what.contains("no TTL"), "{}", v[0]);
        let v = judge(&seen("ns:queue:v2:{p:d}", 2_000, 7), &l);
        assert!(
            v[0].what.contains("7 members above its bound 6"),
            "{}",
            v[0]
        );
        let v = judge(&seen("ns:lease:v2:{p:d}", 1_500, 1), &l);
        assert!(v[0].what.contains("PTTL 1500"), "{}", v[0]);
        let mut tomb = seen("ns:tomb:v2:{p:d}", 500, 9);
        tomb.oldest_end = Some(100_000 - 5_000);
        assert!(judge(&tomb, &l)[0].what.contains("past its permit's end"));
        let mut marks = seen("ns:granted:v2:{p:d}", 500, 9);
        marks.oldest_end = Some(100_000 - 500);
        assert!(judge(&marks, &l).is_empty());
        let v = judge(&seen("ns:lease:v2:{p:one}", 500, 4), &l);
        assert!(v[0].what.contains("4 fields above its bound 3"), "{}", v[0]);
        let v = judge(&seen("ns:odd:v2:{p:d}", 5, 1), &l);
        assert_eq!(v[0].kind, "unknown");
        assert!(judge(&seen("ns:seq:v2:{p:d}", 60_000, 1), &l).is_empty());
        // No longer than the history's age and a minute: not 7 days (§20).
        let v = judge(&seen("ns:seq:v2:{p:d}", 86_400_000, 1), &l);
        assert!(v[0].what.contains("above its bound 60000"), "{}", v[0]);
    }

    #[test]
    fn owner_tokens_are_cut_from_key_names() {
        let key = "ns:granted:v2:{p:d}:p:secret-token:op";
        assert_eq!(kind_of("ns", key).map(|k| k.name), Some("granted"));
        assert!(!shown(key).contains("secret"));
    }
}
