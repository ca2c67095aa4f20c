//! The hand-off of issue 3: how soon a waiter gets a lease its holder
//! releases, blocked server-side (`waitMs`) against polling every 50 ms,
//! and the report's section on it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Method;

use crate::env::Env;
use crate::http_client::{body_json, digest, lease_path, Client, Http};
use crate::opts::Opts;
use crate::stats::{ms, percentile, Stats};

/// The reference design's fixed retry interval, for the polling hand-off.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

struct Handoff {
    lat_ns: Vec<u64>,
    /// From the moment the holder sent its release (a bound that includes the
    /// release's own round trip, never negative).
    from_send_ns: Vec<u64>,
    /// The waiter's reply came before the holder's release reply was read.
    reply_first: u64,
    /// The waiter acquired without having waited (it came too late to queue).
    not_waited: u64,
    errors: Stats,
    wall: Duration,
}

/// A small deterministic jitter source (no crate needed for a benchmark).
struct Jitter(u64);

impl Jitter {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

/// `poll`: the waiter polls every 50 ms with `waitMs: 0`; otherwise it
/// sends one PUT with `waitMs` and blocks server-side.
async fn handoffs(addr: SocketAddr, count: usize, poll: bool) -> Result<Handoff, String> {
    let started = Instant::now();
    let mut holder = Http::connect(addr).await?;
    let mut holder_id = Client::new(0)?;
    let mut errors = Stats::default();
    let path = lease_path(&digest(0xfeed, usize::from(poll), 1));
    let hold_body = body_json(10_000, 0);
    let mut jitter = Jitter(0x9e37_79b9_7f4a_7c15);
    let mut out = Handoff {
        lat_ns: Vec::with_capacity(count),
        from_send_ns: Vec::with_capacity(count),
        reply_first: 0,
        not_waited: 0,
        errors: Stats::default(),
        wall: Duration::ZERO,
    };
    // The waiter runs on its own task and connection, as a separate client would.
    let (go_tx, mut go_rx) = tokio::sync::mpsc::channel::<()>(1);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<Result<(Instant, bool), String>>(1);
    let waiter_path = path.clone();
    let waiter = tokio::spawn(async move {
        let mut conn = Http::connect(addr).await?;
        let mut me = Client::new(1)?;
        let wait_body = body_json(10_000, 5_000);
        let try_body = body_json(10_000, 0);
        while go_rx.recv().await.is_some() {
            let op = me.next_op();
            let headers = [
                ("lease-owner-token", me.token.as_str()),
                ("lease-operation-id", op.as_str()),
            ];
            let result = async {
                loop {
                    let body = if poll { &try_body } else { &wait_body };
                    let (status, body) = conn
                        .call(Method::PUT, &waiter_path, &headers, Some(body))
                        .await?;
                    let at = Instant::now();
                    match status {
                        201 => return Ok((at, body.windows(10).any(|w| w == b"\"waitedMs\""))),
                        409 if poll => tokio::time::sleep(POLL_INTERVAL).await,
                        s => {
                            return Err(format!(
                                "waiter got HTTP {s}: {}",
                                String::from_utf8_lossy(&body)
                            ))
                        }
                    }
                }
            }
            .await;
            if result.is_ok() {
                match conn
                    .call(Method::DELETE, &waiter_path, &headers, None)
                    .await
                {
                    Ok((200, _)) => {}
                    Ok((s, _)) => return Err(format!("waiter release got HTTP {s}")),
                    Err(e) => return Err(e),
                }
            }
            if done_tx.send(result).await.is_err() {
                break;
            }
        }
        Ok::<(), String>(())
    });
    for _ in 0..count {
        let op = holder_id.next_op();
        let headers = [
            ("lease-owner-token", holder_id.token.as_str()),
            ("lease-operation-id", op.as_str()),
        ];
        match holder
            .call(Method::PUT, &path, &headers, Some(&hold_body))
            .await?
        {
            (201, _) => {}
            (s, body) => {
                errors.bad_status(s, &body);
                continue;
            }
        }
        go_tx
            .send(())
            .await
            .map_err(|_| "waiter task ended early".to_owned())?;
        // Let the waiter queue (server-side wait) or start polling; a
        // polling client meets the release at a random point of its cycle.
        let hold = if poll {
            5 + jitter.next(50)
        } else {
            2 + jitter.next(2)
        };
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let release_sent = Instant::now();
        let released_at = match holder.call(Method::DELETE, &path, &headers, None).await? {
            (200, _) => Instant::now(),
            (s, body) => {
                errors.bad_status(s, &body);
                Instant::now()
            }
        };
        match done_rx.recv().await {
            Some(Ok((acquired_at, waited))) => {
                if acquired_at < released_at {
                    out.reply_first += 1;
                }
                if !waited && !poll {
                    out.not_waited += 1;
                }
                out.from_send_ns.push(
                    u64::try_from(
                        acquired_at
                            .saturating_duration_since(release_sent)
                            .as_nanos(),
                    )
                    .unwrap_or(u64::MAX),
                );
                out.lat_ns.push(
                    u64::try_from(
                        acquired_at
                            .saturating_duration_since(released_at)
                            .as_nanos(),
                    )
                    .unwrap_or(u64::MAX),
                );
            }
            Some(Err(e)) => errors.untyped(e),
            None => break,
        }
    }
    drop(go_tx);
    match waiter.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => errors.untyped(e),
        Err(e) => errors.untyped(format!("waiter task: {e}")),
    }
    out.lat_ns.sort_unstable();
    out.from_send_ns.sort_unstable();
    out.errors = errors;
    out.wall = started.elapsed();
    Ok(out)
}

/// Runs both waiters (`--handoffs` server-side, `--poll-handoffs` polling)
/// and writes the section; returns the server-side waiter's p50, p99 and
/// count for the goal lines.
pub(crate) async fn section(
    opts: &Opts,
    env: &Env,
    summary: &mut String,
) -> Result<Option<(f64, f64, usize)>, String> {
    let mut handoff_goal = None;
    let _ = writeln!(
        summary,
        "\n## Hand-off: release reply → waiter's `acquired` reply\n"
    );
    let _ = writeln!(summary, "| waiter | hand-offs | p50 ms | p99 ms | max ms | from release sent: p50 / p99 ms | waiter reply first | did not wait | errors | wall s |\n|---|---|---|---|---|---|---|---|---|---|");
    for (poll, count) in [(false, opts.handoffs), (true, opts.poll_handoffs)] {
        if count == 0 {
            continue;
        }
        let h = handoffs(env.addr, count, poll).await?;
        if !poll {
            handoff_goal = Some((
                percentile(&h.lat_ns, 50.0),
                percentile(&h.lat_ns, 99.0),
                h.lat_ns.len(),
            ));
        }
        let _ = writeln!(
            summary,
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {:.1} |",
            if poll {
                "polls every 50 ms (waitMs 0)"
            } else {
                "server-side wait (waitMs 5000)"
            },
            h.lat_ns.len(),
            ms(&h.lat_ns, 50.0),
            ms(&h.lat_ns, 99.0),
            ms(&h.lat_ns, 100.0),
            ms(&h.from_send_ns, 50.0),
            ms(&h.from_send_ns, 99.0),
            h.reply_first,
            if poll {
                "-".into()
            } else {
                h.not_waited.to_string()
            },
            h.errors.errors() + h.errors.typed(),
            h.wall.as_secs_f64(),
        );
        for (k, v) in h.errors.untyped.iter().chain(&h.errors.typed_5xx) {
            let _ = writeln!(summary, "  hand-off error: {v} × {k}");
        }
    }
    Ok(handoff_goal)
}
