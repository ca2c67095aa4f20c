//! `leasehold session`: run a command while holding several leases on one
//! session (docs/design.md §18, §19).
//!
//! make a session (kept alive by its keep-alive stream, or by `PATCH` when
//! the stream is not there) → acquire every `--resource` on it (waiting up
//! to `--wait` in all) → spawn the command → wait for whichever comes
//! first: the command exits (end the session, which releases every lease;
//! exit with its status), the session or one of its leases is lost
//! (SIGTERM, SIGKILL after the grace, end the session, exit 75), or
//! SIGINT/SIGTERM reaches this process (forwarded to the command). If this
//! process dies, its keep-alive stream closes and the service ends the
//! session at once, freeing every lease.

use std::collections::HashSet;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::common::{
    parse_duration, resource, service_error, Connection, Exit, EXIT_OSERR, EXIT_TEMPFAIL,
    EXIT_USAGE,
};
use super::lock::{check_holder, send, signal_exit, status_exit, stop, Signals, WAIT_ROUND};
use crate::client::{
    AcquireOptions, Attach, KeepAlive, Session, SessionEnd, SessionLease, SessionOptions,
};
use crate::domain::{OperationId, ResourceId};

/// How the session is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeepAliveArg {
    /// The keep-alive stream (the session ends at once if this process
    /// dies), renewing by PATCH when the stream is not available.
    Stream,
    /// PATCH every third of the TTL (the session ends at its TTL if this
    /// process dies).
    Renew,
}

/// `leasehold session [OPTIONS] --purpose P --resource RAW_ID... -- COMMAND [ARGS]...`
#[derive(Debug, Args)]
pub struct SessionArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// What the leases are for, e.g. shard-owner (`^[a-z][a-z0-9-]{0,62}$`).
    #[arg(long, value_name = "PURPOSE")]
    pub purpose: String,
    /// A resource's raw id (repeat for each; only its SHA-256 digest is
    /// sent). Acquired in the order given.
    #[arg(long = "resource", required = true, value_name = "RAW_ID")]
    pub resources: Vec<String>,
    /// The session's time to live (1s to 1h): its leases end at most this
    /// long after the last renewal (e.g. 10s, 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,
    /// How long to wait, in all, while someone else holds a resource.
    /// Default: do not wait.
    #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// A public label for this holder (the session's and each lease's).
    #[arg(long, value_name = "LABEL")]
    pub holder: Option<String>,
    /// How the session is kept alive.
    #[arg(long, value_enum, default_value = "stream")]
    pub keep_alive: KeepAliveArg,
    /// When the session or a lease is lost: how long COMMAND may take to
    /// exit after SIGTERM before it gets SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_grace: Duration,
    /// The command to run while every lease is held, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Runs `leasehold session`.
pub(super) async fn run(args: SessionArgs) -> ExitCode {
    match session(args).await {
        Ok(code) => code,
        Err(exit) => exit.report("session"),
    }
}

/// A fresh operation id: `session-` and 16 random hex digits.
fn operation_id() -> Result<OperationId, Exit> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| Exit::new(EXIT_OSERR, format!("no randomness: {e}")))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    OperationId::parse(&format!("session-{hex}"))
        .map_err(|e| Exit::new(EXIT_OSERR, format!("operation id: {e}")))
}

async fn session(args: SessionArgs) -> Result<ExitCode, Exit> {
    let holder = args.holder.as_deref().map(check_holder).transpose()?;
    if args.ttl < Duration::from_secs(1) || args.ttl > Duration::from_secs(3600) {
        return Err(Exit::new(EXIT_USAGE, "--ttl must be from 1s to 1h"));
    }
    let mut resources = Vec::with_capacity(args.resources.len());
    let mut seen = HashSet::new();
    for raw in &args.resources {
        if !seen.insert(raw.as_str()) {
            return Err(Exit::new(
                EXIT_USAGE,
                format!("--resource {raw:?} is given twice"),
            ));
        }
        resources.push(resource(&args.purpose, raw)?);
    }
    let client = args.connection.client()?;
    let url = args.connection.url.as_str();
    let mut signals = Signals::install()?;
    let op = operation_id()?;
    let options = SessionOptions {
        holder: holder.clone(),
        keep_alive: match args.keep_alive {
            KeepAliveArg::Stream => KeepAlive::Stream,
            KeepAliveArg::Renew => KeepAlive::Renew,
        },
        ..SessionOptions::new(args.ttl)
    };
    let session = tokio::select! {
        sig = signals.next() => return Ok(signal_exit(sig)),
        made = Session::create(&client, &op, options) => {
            made.map_err(|e| service_error("making a session", url, &e))?
        }
    };
    let deadline = Instant::now() + args.wait;
    let mut leases = Vec::with_capacity(resources.len());
    for (i, r) in resources.iter().enumerate() {
        let lease_op = OperationId::parse(&format!("{op}-{i}"))
            .map_err(|e| Exit::new(EXIT_OSERR, format!("operation id: {e}")))?;
        let got = tokio::select! {
            sig = signals.next() => {
                let _ = session.end().await;
                return Ok(signal_exit(sig));
            }
            got = acquire(&session, r, &lease_op, holder.as_ref(), deadline, url) => got,
        };
        match got {
            Ok(lease) => leases.push(lease),
            Err(exit) => {
                // Ending the session releases what it already holds.
                let _ = session.end().await;
                return Err(exit);
            }
        }
    }
    hold(&args, &session, &resources, &leases, signals).await
}

/// Acquires `r` on the session, waiting in rounds until `deadline`.
async fn acquire(
    session: &Session,
    r: &ResourceId,
    op: &OperationId,
    holder: Option<&crate::domain::HolderLabel>,
    deadline: Instant,
    url: &str,
) -> Result<SessionLease, Exit> {
    let what = |why: String| {
        Exit::new(
            EXIT_TEMPFAIL,
            format!("{}/{}: {why}; the command was not run", r.purpose, r.digest),
        )
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let round = left.min(WAIT_ROUND);
        let started = Instant::now();
        let options = AcquireOptions {
            wait: round,
            holder: holder.cloned(),
            ..AcquireOptions::new(session.ttl())
        };
        match session.acquire(r, op, &options).await {
            Ok(Attach::Acquired { lease, .. } | Attach::ReplayedSameOperation { lease }) => {
                return Ok(lease)
            }
            Ok(Attach::Contended { retry_after_ms, .. }) if round < left => {
                if started.elapsed() < round {
                    let pause = Duration::from_millis(retry_after_ms).min(Duration::from_secs(1));
                    tokio::time::sleep(pause.min(left)).await;
                }
            }
            Ok(Attach::Contended { retry_after_ms, .. }) => {
                return Err(what(format!(
                    "held by someone else (the service suggests retrying in {retry_after_ms} ms)"
                )))
            }
            Ok(Attach::OwnerOperationConflict { .. }) => {
                return Err(what("held by this session for another operation".into()))
            }
            Ok(Attach::LimitMismatch { limit }) => {
                return Err(what(format!(
                    "held with limit {limit}, not as a plain lease"
                )))
            }
            Ok(Attach::SessionFull) => {
                return Err(what(
                    "the session holds its maximum number of leases".into(),
                ))
            }
            Ok(Attach::SessionLost(gone)) => {
                return Err(what(format!("the session is gone ({})", gone.as_str())))
            }
            Err(e) => return Err(service_error("acquiring", url, &e)),
        }
    }
}

/// Every lease is held: run the command under the session.
async fn hold(
    args: &SessionArgs,
    session: &Session,
    resources: &[ResourceId],
    leases: &[SessionLease],
    mut signals: Signals,
) -> Result<ExitCode, Exit> {
    // One token for "the session or any lease stopped protecting the work".
    let lost = CancellationToken::new();
    let mut watchers = Vec::with_capacity(leases.len() + 1);
    for token in leases
        .iter()
        .map(SessionLease::token)
        .chain([session.lost()])
    {
        let lost = lost.clone();
        watchers.push(tokio::spawn(async move {
            token.cancelled().await;
            lost.cancel();
        }));
    }
    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => {
            let _ = session.end().await;
            return Err(Exit::new(EXIT_USAGE, "no COMMAND after `--`"));
        }
    };
    let join = |items: Vec<String>| items.join(" ");
    let spawned = Command::new(program)
        .args(rest)
        .env("LEASEHOLD_SESSION", session.id())
        .env("LEASEHOLD_PURPOSE", args.purpose.as_str())
        .env(
            "LEASEHOLD_DIGESTS",
            join(resources.iter().map(|r| r.digest.to_string()).collect()),
        )
        .env(
            "LEASEHOLD_FENCING_TOKENS",
            join(
                leases
                    .iter()
                    .map(|l| l.fencing_token().to_string())
                    .collect(),
            ),
        )
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = session.end().await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Exit::new(
                code,
                format!("cannot run {}: {e}", program.to_string_lossy()),
            ));
        }
    };
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let exited = loop {
        tokio::select! {
            // A loss seen together with the exit counts: the work may not
            // have been protected to its end.
            biased;
            _ = lost.cancelled() => break None,
            status = child.wait() => break Some(status),
            sig = signals.next() => send(pid, sig),
        }
    };
    for w in watchers {
        w.abort();
    }
    match exited {
        Some(status) => {
            if let Err(e) = session.end().await {
                eprintln!(
                    "leasehold session: ending the session failed ({e}); its leases end within {} ms",
                    session.ttl().as_millis()
                );
            }
            let status = status
                .map_err(|e| Exit::new(EXIT_OSERR, format!("cannot wait for the command: {e}")))?;
            Ok(status_exit(status))
        }
        None => {
            let why = match session.end_reason() {
                Some(SessionEnd::Lost(gone)) => format!("the session is gone ({})", gone.as_str()),
                Some(SessionEnd::Expired) => "the session was not renewed in time".to_owned(),
                Some(other) => format!("the session ended ({other:?})"),
                None => {
                    let (i, reason) = leases
                        .iter()
                        .enumerate()
                        .find_map(|(i, l)| l.end_reason().map(|r| (i, r)))
                        .unwrap_or((0, crate::client::EndReason::Lost));
                    format!(
                        "the lease on {}/{} is no longer held ({})",
                        resources[i].purpose,
                        resources[i].digest,
                        format!("{reason:?}").to_lowercase()
                    )
                }
            };
            eprintln!("leasehold session: {why}; stopping the command");
            stop(&mut child, pid, args.kill_grace, &mut signals).await;
            // Whatever is still held is released with the session.
            let _ = session.end().await;
            Ok(ExitCode::from(EXIT_TEMPFAIL))
        }
    }
}
