//! `watch` (issue 14): server-sent events of one resource, and the same
//! fan-out against etcd (issue 25).
//!
//! * fan-out (`fanout.rs`): `--watchers` streams (`GET
//!   /leases/{p}/{d}/events`) of one resource on one instance, read by a
//!   separate process (`watch_reader.rs`, issue 25); the holder, on the same
//!   instance, acquires (and the bench waits until every watcher saw
//!   `acquired`), then releases: time from the release reply to the first
//!   and to the last watcher's `released` event, over `--watch-changes`
//!   releases;
//! * memory: the instance's RSS before the streams are opened and once every
//!   one has its first `state` event, divided by the number of streams;
//! * the same fan-out against etcd 3.4 (`etcd.rs`, started for it): as many
//!   v3 watches of one key over its HTTP gateway, read by a reader process
//!   too, a put then a delete of the key per change; etcd's RSS per idle
//!   watch and delete → last watcher's event, side by side;
//! * the floor (`raw_sse.rs`): a server that only writes, one pre-encoded
//!   chunk per socket in one loop, read by the same reader process: what
//!   any server pays here for the fan-out, printed beside leasehold;
//! * event latency: one watcher on instance A, a second instance B making
//!   the change: acquire reply → `acquired` event, release reply →
//!   `released` event, and for expiry the lease's end (acquire reply + TTL)
//!   → `expired` event (nothing publishes an expiry: instance A's timer).
//!
//! The SSE client is `sse.rs`'s raw TCP reader. The goals of issue 25 (RSS
//! per idle watcher ≤ 6 KiB, release → last watcher's event p99 ≤ 30 ms
//! with 10 000 watchers) are judged in `goals25.rs` from [`WatchFigures`].

use std::fmt::Write as _;
use std::time::Duration;

use crate::env::Env;
use crate::etcd::EtcdProc;
use crate::fanout::{measure, Changer, FanOut, Holder, Lat};
use crate::http_client::{digest, lease_path};
use crate::opts::Opts;
use crate::procs::Service;
use crate::raw::redis_cmd;
use crate::raw_sse::RawSse;
use crate::sse::{open_watchers, shared, wait_ready, Target, KINDS};
use crate::stats::{mb, percentile};

/// TTL of the lease whose expiry is timed.
const EXPIRY_TTL_MS: u64 = 200;

/// What the goals of issue 25 read from `watch`: each side's fan-out.
pub(crate) struct WatchFigures {
    pub(crate) leasehold: WatchSide,
    /// The floor (`raw_sse.rs`); `None` when it could not run.
    pub(crate) raw: Option<WatchSide>,
    /// `None` when etcd's half could not run (the section says why).
    pub(crate) etcd: Option<WatchSide>,
}

/// One server's fan-out figures.
#[derive(Clone, Copy)]
pub(crate) struct WatchSide {
    pub(crate) ready: usize,
    pub(crate) per_kib: Option<f64>,
    /// Release → last watcher's event, p99 ms, from the change's reply
    /// and from its send.
    pub(crate) last_p99: Option<f64>,
    pub(crate) last_p99_send: Option<f64>,
}

/// Runs the watch scenario and returns its section of the summary.
pub(crate) async fn run(opts: &Opts, env: &Env) -> Result<(String, WatchFigures), String> {
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    let mut out = String::from("\n## Watch: server-sent events of one resource\n\n");
    let pid = env.pids.leasehold.clone();

    // ---- event latency: one watcher on A, the changes made on B ----
    let mut b = Service::start(opts, &env.redis_url, &Service::new_build(), "watch-b").await?;
    let path = lease_path(&digest(0x3a7c, 1, 0));
    let one = shared();
    let tasks = open_watchers(env.addr, &Target::Leasehold(path.clone()), 1, &one);
    wait_ready(&one, 1).await?;
    let mut holder = Holder::new(b.addr, &path).await?;
    let mut lat: [Lat; 3] = Default::default();
    let reps = opts.watch_changes;
    for i in 0..reps {
        one.arm(0);
        let change = holder.acquire(30_000).await?;
        let (first, _) = one.wait_all(1).await?;
        lat[0].push(change, Duration::ZERO, first);
        one.arm(1);
        let change = holder.release().await?;
        let (first, _) = one.wait_all(1).await?;
        lat[1].push(change, Duration::ZERO, first);
        // Expiry costs its TTL each time: at most 20 of them.
        if i < 20 {
            one.arm(2);
            let change = holder.acquire(EXPIRY_TTL_MS).await?;
            let (first, _) = one.wait_all(1).await?;
            lat[2].push(change, Duration::from_millis(EXPIRY_TTL_MS), first);
        }
    }
    for t in tasks {
        t.abort();
    }
    b.stop();
    let _ = writeln!(out, "Event latency, one watcher on instance A, the change made through instance B ({reps} acquires and releases, {} expiries of a {EXPIRY_TTL_MS} ms lease). The change happens inside Redis between its request's send and its reply, so the latency lies between the two columns (expiry: the lease ends TTL after the acquire, so both are offset by the TTL); \"read first\": the event was read before the change's own reply (0 from the reply).\n\n| event | n | from the reply: p50 / p99 / max ms | from the send: p50 / p99 / max ms | read first |\n|---|---|---|---|---|", lat[2].from_reply.len());
    for (kind, l) in KINDS.iter().zip(lat.iter_mut()) {
        let _ = writeln!(out, "{}", l.row(kind));
    }

    // ---- fan-out and memory: N watchers on A, read by another process ----
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    let path = lease_path(&digest(0x3a7c, 2, 0));
    let holder = Changer::Lease(Holder::new(env.addr, &path).await?);
    let target = Target::Leasehold(path);
    let mut lh = measure(&pid, env.addr, &target, opts.watchers, reps, holder).await?;

    // ---- the floor: a server that only writes, read the same way ----
    let raw = raw_fan_out(opts).await;
    // ---- the same against etcd, started for it ----
    let etcd = etcd_fan_out(opts).await;
    let leasehold = side(&mut lh);
    let _ = writeln!(
        out,
        "\nFan-out: {} streams of one resource on one instance asked for, opened and read by a separate process (the bench binary again, one thread); the change made on the same instance: {reps} times, a change every watcher sees (leasehold: acquire; etcd: put), then the timed one (leasehold: release; etcd: delete). raw: the floor, the bench binary again as a server that only writes (`raw_sse.rs`: one pre-encoded chunk, one `write` per socket in one loop on one thread; its \"reply\" is its `ok` just before the loop). etcd: a fresh etcd, one v3 watch of one key per stream over its HTTP gateway (`POST /v3/watch`).\n",
        opts.watchers
    );
    let mut sides = vec![Column {
        who: "leasehold",
        head: "leasehold (SSE)".into(),
        f: &mut lh,
    }];
    let mut notes = Vec::new();
    let (mut raw_f, mut etcd_f);
    let mut raw_side = None;
    match raw {
        Ok(f) => {
            raw_f = f;
            raw_side = Some(side(&mut raw_f));
            sides.push(Column {
                who: "raw",
                head: "raw floor (one thread, writes only)".into(),
                f: &mut raw_f,
            });
        }
        Err(err) => notes.push(format!("the raw floor not measured: {err}")),
    }
    let mut etcd_side = None;
    match etcd {
        Ok((f, version)) => {
            etcd_f = f;
            etcd_side = Some(side(&mut etcd_f));
            sides.push(Column {
                who: "etcd",
                head: format!("etcd {version} (v3 watch, HTTP gateway)"),
                f: &mut etcd_f,
            });
        }
        Err(err) => notes.push(format!("etcd's side not measured: {err}")),
    }
    fan_out_table(&mut out, sides);
    for note in notes {
        let _ = writeln!(out, "\n{note}");
    }
    Ok((
        out,
        WatchFigures {
            leasehold,
            raw: raw_side,
            etcd: etcd_side,
        },
    ))
}

/// The fan-out against the raw floor (`raw_sse.rs`), started for it.
async fn raw_fan_out(opts: &Opts) -> Result<FanOut, String> {
    let raw = RawSse::start().await?;
    let (pid, addr) = (raw.pid(), raw.addr);
    let target = Target::Leasehold("/raw".to_owned());
    measure(
        &pid,
        addr,
        &target,
        opts.watchers,
        opts.watch_changes,
        Changer::Raw(raw),
    )
    .await
}

/// The fan-out against a fresh etcd; its figures and etcd's version.
async fn etcd_fan_out(opts: &Opts) -> Result<(FanOut, String), String> {
    let etcd = EtcdProc::start("watch").await?;
    let key = "bench/watch";
    let changer = Changer::etcd(etcd.addr, key).await?;
    let target = Target::Etcd(key.to_owned());
    let f = measure(
        &etcd.pid(),
        etcd.addr,
        &target,
        opts.watchers,
        opts.watch_changes,
        changer,
    )
    .await?;
    drop(etcd);
    Ok((f, EtcdProc::version()))
}

fn side(f: &mut FanOut) -> WatchSide {
    WatchSide {
        ready: f.ready,
        per_kib: f.per_kib,
        last_p99: f.to_last.p50_p99().map(|(_, p99)| p99),
        last_p99_send: {
            f.to_last.from_send.sort_unstable();
            (!f.to_last.from_send.is_empty()).then(|| percentile(&f.to_last.from_send, 99.0))
        },
    }
}

/// One column of the fan-out table.
struct Column<'a> {
    /// The row label of the release table.
    who: &'static str,
    head: String,
    f: &'a mut FanOut,
}

/// The side-by-side table of the fan-out: leasehold, then the raw floor
/// and etcd when they ran.
fn fan_out_table(out: &mut String, mut sides: Vec<Column<'_>>) {
    let mut rows: Vec<Vec<String>> = vec![Vec::new(); 8];
    for Column { f, .. } in sides.iter_mut() {
        // p50 / p99 from the reply, then from the send: the event lies
        // between the two (etcd answers a change after most of its events).
        let pct = |l: &mut Lat| {
            l.from_reply.sort_unstable();
            l.from_send.sort_unstable();
            let (r, s) = (&l.from_reply, &l.from_send);
            format!(
                "{:.1} / {:.1} · {:.1} / {:.1}",
                percentile(r, 50.0),
                percentile(r, 99.0),
                percentile(s, 50.0),
                percentile(s, 99.0)
            )
        };
        let ms = |x: Option<f64>| x.map_or("?".into(), |v| format!("{v:.1}"));
        rows[0].push(format!("{} ({} refused or failed)", f.ready, f.failed));
        rows[1].push(format!("{:.1} s", f.open_s));
        rows[2].push(format!("{} → {}", mb(f.rss[0]), mb(f.rss[1])));
        rows[3].push(format!(
            "**{}**",
            f.per_kib.map_or("?".into(), |k| format!("{k:.2} KiB"))
        ));
        rows[4].push(pct(&mut f.to_first));
        rows[5].push(format!("**{}**", pct(&mut f.to_last)));
        rows[6].push(format!(
            "{} / {} ({} changes)",
            ms(f.cpu_ms[0]),
            ms(f.cpu_ms[1]),
            f.fan_outs
        ));
        rows[7].push(mb(f.rss[2]));
    }
    let names = [
        "streams open",
        "time to open them",
        "server RSS before → with the streams idle",
        "RSS per idle watcher",
        "release → first watcher's event, ms: p50 / p99 from the reply · from the send",
        "release → last watcher's event, ms: p50 / p99 from the reply · from the send",
        "CPU ms per change sent to all: server / reader",
        "server RSS after the changes",
    ];
    let heads: Vec<&str> = sides.iter().map(|c| c.head.as_str()).collect();
    let _ = writeln!(
        out,
        "| | {} |\n|---|{}",
        heads.join(" | "),
        "---|".repeat(sides.len())
    );
    for (name, row) in names.iter().zip(&rows) {
        let _ = writeln!(out, "| {name} | {} |", row.join(" | "));
    }
    for Column { who, f, .. } in &sides {
        if let Some(note) = &f.limit_note {
            let _ = writeln!(out, "\n{who}: {note}");
        }
        for e in &f.errors {
            let _ = writeln!(out, "  {who} watch error: {e}");
        }
    }
    // The release rows in full, each side.
    let _ = writeln!(out, "\nThe timed change (leasehold: release; etcd: delete) → the first and the last watcher's event; \"read first\": the event was read before the change's reply (0 from the reply):\n\n| server | release → | n | from the reply: p50 / p99 / max ms | from the send: p50 / p99 / max ms | read first |\n|---|---|---|---|---|---|");
    for Column { who, f, .. } in sides.iter_mut() {
        let first = f.to_first.row("the first watcher's event");
        let last = f.to_last.row("the last watcher's event");
        let _ = writeln!(out, "| {who} {first}\n| {who} {last}");
    }
}
