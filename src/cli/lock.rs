//! `leasehold lock`: run a command while holding a lease.
//!
//! acquire → register with a [`Watchdog`] → spawn the command → wait for
//! whichever comes first: the command exits (release, exit with its
//! status), the watchdog's token fires (SIGTERM, SIGKILL after the grace,
//! best-effort release, exit 75), or SIGINT/SIGTERM reaches this process
//! (forwarded to the command, which decides).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use super::common::{
    parse_duration, resource, service_error, Connection, Exit, EXIT_OSERR, EXIT_TEMPFAIL,
    EXIT_USAGE,
};
use crate::client::{Acquire, AcquireOptions, Client, LeaseHandle, Watchdog};
use crate::domain::{Attempt, HolderLabel, OperationId, ReleaseOutcome, ResourceId};

/// The longest wait asked of the service in one request: its default
/// `LEASEHOLD_MAX_WAIT_MS`.
pub(super) const WAIT_ROUND: Duration = Duration::from_secs(30);

/// `leasehold lock [OPTIONS] PURPOSE RAW_ID -- COMMAND [ARGS]...`
#[derive(Debug, Args)]
pub struct LockArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// The lease's time to live; it is renewed at about a third of it while
    /// COMMAND runs (e.g. 500ms, 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,
    /// How long to wait while someone else holds the lease (the service
    /// waits up to 30 s per request; longer waits take several). Default: do
    /// not wait.
    #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// A public label for this holder (host name, pod): anyone who can
    /// inspect or list the purpose sees it.
    #[arg(long, value_name = "LABEL")]
    pub holder: Option<String>,
    /// Bounds the whole hold (the service's `maxHoldMs`): renewals stop
    /// there, and COMMAND is stopped as for a lost lease (exit 75,
    /// "(max_hold)"). Default: no bound.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_hold: Option<Duration>,
    /// When the lease is lost: how long COMMAND may take to exit after
    /// SIGTERM before it gets SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_grace: Duration,
    /// What the lease is for, e.g. invoice-export (`^[a-z][a-z0-9-]{0,62}$`).
    pub purpose: String,
    /// The resource's raw id; only its SHA-256 digest is sent.
    pub raw_id: String,
    /// The command to run while the lease is held, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// The signals forwarded to the command.
pub(super) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    pub(super) fn install() -> Result<Self, Exit> {
        let install = |kind| {
            signal(kind)
                .map_err(|e| Exit::new(EXIT_OSERR, format!("cannot install a signal handler: {e}")))
        };
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM.
    pub(super) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
        }
    }
}

/// Runs `leasehold lock`.
pub(super) async fn run(args: LockArgs) -> ExitCode {
    match lock(args).await {
        Ok(code) => code,
        Err(exit) => exit.report("lock"),
    }
}

pub(super) fn check_holder(holder: &str) -> Result<HolderLabel, Exit> {
    HolderLabel::parse(holder).map_err(|_| {
        Exit::new(
            EXIT_USAGE,
            "--holder must be 1-256 characters without control characters",
        )
    })
}

/// A fresh operation id: `lock-` and 16 random hex digits.
pub(super) fn operation_id() -> Result<OperationId, Exit> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| Exit::new(EXIT_OSERR, format!("no randomness: {e}")))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    OperationId::parse(&format!("lock-{hex}"))
        .map_err(|e| Exit::new(EXIT_OSERR, format!("operation id: {e}")))
}

/// 128 + N for a signal, as shells report it.
pub(super) fn signal_exit(signal: Signal) -> ExitCode {
    ExitCode::from(128u8.saturating_add(signal as u8))
}

/// The command's exit status as this process's: its code, or 128 + the
/// signal that killed it.
pub(super) fn status_exit(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(255)),
        (None, None) => ExitCode::FAILURE,
    }
}

async fn lock(args: LockArgs) -> Result<ExitCode, Exit> {
    let holder = args.holder.as_deref().map(check_holder).transpose()?;
    if args.ttl.is_zero() {
        return Err(Exit::new(EXIT_USAGE, "--ttl must be greater than 0"));
    }
    let resource = resource(&args.purpose, &args.raw_id)?;
    let client = args.connection.client()?;
    let url = args.connection.url.as_str();
    let mut signals = Signals::install()?;
    let op = operation_id()?;

    let attempt = tokio::select! {
        sig = signals.next() => return Ok(signal_exit(sig)),
        attempt = client.create_attempt(&op) => {
            attempt.map_err(|e| service_error("creating an attempt", url, &e))?
        }
    };
    // The service waits at most LEASEHOLD_MAX_WAIT_MS (30 s by default) per
    // request: a longer --wait is waited out in rounds, with the same attempt.
    let deadline = Instant::now() + args.wait;
    let acquired = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let round = left.min(WAIT_ROUND);
        let started = Instant::now();
        let options = AcquireOptions {
            wait: round,
            holder: holder.clone(),
            max_hold: args.max_hold,
            ..AcquireOptions::new(args.ttl)
        };
        let acquired = tokio::select! {
            sig = signals.next() => {
                // The acquire may have gone through: give it back.
                let _ = client.release(&resource, &attempt).await;
                return Ok(signal_exit(sig));
            }
            acquired = client.acquire_with(&resource, &attempt, &options) => acquired,
        };
        match acquired {
            Ok(Acquire::Contended { retry_after_ms, .. }) if round < left => {
                // A round that ended early (the service shutting down, say)
                // must not turn into a busy loop.
                if started.elapsed() < round {
                    let pause = Duration::from_millis(retry_after_ms).min(Duration::from_secs(1));
                    tokio::time::sleep(pause.min(left)).await;
                }
            }
            other => break other,
        }
    };
    let handle = match acquired {
        Ok(Acquire::Acquired { handle, .. } | Acquire::ReplayedSameOperation { handle }) => handle,
        Ok(Acquire::Contended { retry_after_ms, .. }) => {
            return Err(Exit::new(
                EXIT_TEMPFAIL,
                format!(
                    "{}/{} is held by someone else (the service suggests retrying in {retry_after_ms} ms); the command was not run",
                    resource.purpose, resource.digest
                ),
            ))
        }
        Ok(Acquire::OwnerOperationConflict { .. }) => {
            return Err(Exit::new(
                EXIT_TEMPFAIL,
                "held by this attempt for another operation; the command was not run",
            ))
        }
        Ok(Acquire::LimitMismatch { limit }) => {
            return Err(Exit::new(
                EXIT_TEMPFAIL,
                format!("held with limit {limit}, not as a plain lease; the command was not run"),
            ))
        }
        Err(e) => {
            if e.may_have_applied() {
                // It may be ours: release is idempotent.
                let _ = client.release(&resource, &attempt).await;
            }
            return Err(service_error("acquiring", url, &e));
        }
    };
    hold(&args, &client, &resource, &attempt, handle, signals).await
}

/// The lease is held: run the command under it.
async fn hold(
    args: &LockArgs,
    client: &Client,
    resource: &ResourceId,
    attempt: &Attempt,
    handle: LeaseHandle,
    mut signals: Signals,
) -> Result<ExitCode, Exit> {
    let watchdog = Watchdog::new(1);
    let registration = match watchdog.register(&handle) {
        Ok(r) => r,
        Err(e) => {
            let _ = handle.release().await;
            return Err(Exit::new(
                EXIT_TEMPFAIL,
                format!("cannot keep the lease: {e}"),
            ));
        }
    };
    let lost = registration.token();
    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => {
            let _ = handle.release().await;
            return Err(Exit::new(EXIT_USAGE, "no COMMAND after `--`"));
        }
    };
    let spawned = Command::new(program)
        .args(rest)
        .env(
            "LEASEHOLD_FENCING_TOKEN",
            handle.fencing_token().to_string(),
        )
        .env("LEASEHOLD_PURPOSE", resource.purpose.as_str())
        .env("LEASEHOLD_DIGEST", resource.digest.as_str())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = handle.release().await;
            // 127 and 126, as shells say "not found" and "cannot execute".
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
    match exited {
        Some(status) => {
            match handle.release().await {
                Ok(ReleaseOutcome::Released) => {}
                // Gone between the last renew and the exit: say so, and
                // still report the command's own status.
                Ok(outcome @ (ReleaseOutcome::AlreadyAbsent { .. } | ReleaseOutcome::NotOwner)) => {
                    eprintln!(
                        "leasehold lock: the lease was no longer held when the command exited ({})",
                        match outcome {
                            ReleaseOutcome::NotOwner => "someone else holds it",
                            ReleaseOutcome::AlreadyAbsent {
                                reason: Some(crate::domain::EndedReason::Revoked),
                            } => "an operator broke it",
                            ReleaseOutcome::AlreadyAbsent {
                                reason: Some(crate::domain::EndedReason::MaxHold),
                            } => "it reached its maximum hold time",
                            _ => "it had expired",
                        }
                    );
                }
                Err(e) => eprintln!(
                    "leasehold lock: releasing failed ({e}); the lease expires within {} ms",
                    handle.ttl().as_millis()
                ),
            }
            drop(watchdog);
            let status = status
                .map_err(|e| Exit::new(EXIT_OSERR, format!("cannot wait for the command: {e}")))?;
            Ok(status_exit(status))
        }
        None => {
            let reason = registration.end_reason().map_or_else(
                || "ended".to_owned(),
                |r| match r {
                    crate::client::EndReason::MaxHold => "max_hold".to_owned(),
                    r => format!("{r:?}").to_lowercase(),
                },
            );
            eprintln!(
                "leasehold lock: the lease on {}/{} is no longer held ({reason}); stopping the command",
                resource.purpose, resource.digest
            );
            stop(&mut child, pid, args.kill_grace, &mut signals).await;
            // The server may still hold it (an unknown renew): clean up.
            let _ = client.release(resource, attempt).await;
            Ok(ExitCode::from(EXIT_TEMPFAIL))
        }
    }
}

/// Sends `signal` to the command, if it still runs.
pub(super) fn send(pid: Option<Pid>, signal: Signal) {
    if let Some(pid) = pid {
        // ESRCH: it is gone already.
        let _ = kill(pid, signal);
    }
}

/// SIGTERM, then SIGKILL after `grace`; returns once the command exited.
pub(super) async fn stop(
    child: &mut Child,
    pid: Option<Pid>,
    grace: Duration,
    signals: &mut Signals,
) {
    send(pid, Signal::SIGTERM);
    let deadline = tokio::time::sleep(grace);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = child.wait() => return,
            _ = &mut deadline => break,
            // Already stopping: a second SIGINT/SIGTERM does not end the
            // grace early.
            sig = signals.next() => send(pid, sig),
        }
    }
    eprintln!(
        "leasehold: the command did not exit within {} ms of SIGTERM; sending SIGKILL",
        grace.as_millis()
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
}
