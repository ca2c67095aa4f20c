//! `leasehold acquire | renew | release`: a lease held across several shell
//! steps (a CI job, systemd `ExecStartPre`/`ExecStopPost`). The attempt is
//! kept in a state file (mode 0600: it holds the owner token), written
//! before the acquire is sent, so that a step that got no certain answer is
//! simply run again and replays the same attempt. Exit codes as `lock`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use super::common::{
    parse_duration, resource, service_error, Connection, Exit, EXIT_OSERR, EXIT_TEMPFAIL,
    EXIT_USAGE,
};
use super::lock::{check_holder, operation_id, WAIT_ROUND};
use crate::client::{Acquire, AcquireOptions, Client};
use crate::domain::{
    Attempt, LostReason, OperationId, OwnerToken, Purpose, ReleaseOutcome, RenewOutcome,
    ResourceDigest, ResourceId,
};

/// `leasehold acquire [OPTIONS] --state FILE PURPOSE RAW_ID`
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// The state file to write (mode 0600; it holds the owner token). If it
    /// already holds an attempt for this resource, that attempt is asked
    /// again (a replay tells whether an earlier try got the lease).
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// The lease's time to live; renew it with `leasehold renew` before it
    /// runs out.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,
    /// How long to wait while someone else holds it. Default: do not wait.
    #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// A public label for this holder (host name, pod).
    #[arg(long, value_name = "LABEL")]
    pub holder: Option<String>,
    /// What the lease is for, e.g. invoice-export.
    pub purpose: String,
    /// The resource's raw id; only its SHA-256 digest is sent.
    pub raw_id: String,
}

/// `leasehold renew [OPTIONS] --state FILE`
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// The state file `leasehold acquire` wrote.
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// The new time to live; default: the one acquired with.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
}

/// `leasehold release [OPTIONS] --state FILE`
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// The state file `leasehold acquire` wrote; removed once the lease is
    /// known to be gone.
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
}

/// What the state file keeps.
struct State {
    resource: ResourceId,
    attempt: Attempt,
    ttl: Duration,
}

impl State {
    fn to_json(&self) -> String {
        json!({
            "purpose": self.resource.purpose.as_str(),
            "digest": self.resource.digest.as_str(),
            "ownerToken": self.attempt.owner_token.expose(),
            "operationId": self.attempt.operation_id.as_str(),
            "ttlMs": u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
        })
        .to_string()
    }

    fn from_json(text: &str) -> Option<State> {
        let v: Value = serde_json::from_str(text).ok()?;
        let field = |name: &str| v.get(name).and_then(Value::as_str);
        Some(State {
            resource: ResourceId {
                purpose: Purpose::parse(field("purpose")?).ok()?,
                digest: ResourceDigest::parse(field("digest")?).ok()?,
            },
            attempt: Attempt {
                owner_token: OwnerToken::parse(field("ownerToken")?).ok()?,
                operation_id: OperationId::parse(field("operationId")?).ok()?,
            },
            ttl: Duration::from_millis(v.get("ttlMs").and_then(Value::as_u64)?),
        })
    }

    /// The state in `path`; `None` when there is no file.
    fn read(path: &Path) -> Result<Option<State>, Exit> {
        match std::fs::read_to_string(path) {
            Ok(text) => State::from_json(&text).map(Some).ok_or_else(|| {
                Exit::new(
                    EXIT_USAGE,
                    format!("{} is not a leasehold state file", path.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Exit::new(
                EXIT_USAGE,
                format!("cannot read {}: {e}", path.display()),
            )),
        }
    }

    /// Writes the file whole (a temporary file beside it, renamed), mode
    /// 0600 from its creation.
    fn write(&self, path: &Path) -> Result<(), Exit> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let failed = |e: std::io::Error| {
            Exit::new(EXIT_OSERR, format!("cannot write {}: {e}", path.display()))
        };
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(failed)?;
        file.write_all(self.to_json().as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(failed)?;
        std::fs::rename(&tmp, path).map_err(failed)
    }
}

/// Removes the state file: the lease is known to be gone.
fn forget(path: &Path) {
    let _ = std::fs::remove_file(path);
}

fn required(path: &Path) -> Result<State, Exit> {
    State::read(path)?.ok_or_else(|| {
        Exit::new(
            EXIT_USAGE,
            format!(
                "{} does not exist: run `leasehold acquire --state` first",
                path.display()
            ),
        )
    })
}

/// Runs `leasehold acquire`.
pub(super) async fn run_acquire(args: AcquireArgs) -> ExitCode {
    match acquire(&args).await {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(exit) => exit.report("acquire"),
    }
}

async fn acquire(args: &AcquireArgs) -> Result<u64, Exit> {
    let holder = args.holder.as_deref().map(check_holder).transpose()?;
    if args.ttl.is_zero() {
        return Err(Exit::new(EXIT_USAGE, "--ttl must be greater than 0"));
    }
    let resource = resource(&args.purpose, &args.raw_id)?;
    let client = args.connection.client()?;
    let url = args.connection.url.as_str();
    let state = match State::read(&args.state)? {
        Some(old) if old.resource == resource => State {
            ttl: args.ttl,
            ..old
        },
        Some(_) => {
            return Err(Exit::new(
                EXIT_USAGE,
                format!(
                "{} holds the attempt of another lease: release it first, or use another --state",
                args.state.display()
            ),
            ))
        }
        None => {
            let attempt = client
                .create_attempt(&operation_id()?)
                .await
                .map_err(|e| service_error("creating an attempt", url, &e))?;
            State {
                resource,
                attempt,
                ttl: args.ttl,
            }
        }
    };
    // Written before the acquire is sent: whatever happens next, a rerun
    // asks with the same attempt.
    state.write(&args.state)?;
    let acquired = waiting(&client, &state, args.wait, holder).await;
    let held = |what: &str| {
        Exit::new(
            EXIT_TEMPFAIL,
            format!(
                "{}/{} {what}; nothing is held",
                state.resource.purpose, state.resource.digest
            ),
        )
    };
    match acquired {
        Ok(Acquire::Acquired { handle, .. } | Acquire::ReplayedSameOperation { handle }) => {
            Ok(handle.fencing_token())
        }
        Ok(Acquire::Contended { retry_after_ms, .. }) => {
            forget(&args.state);
            Err(held(&format!(
                "is held by someone else (the service suggests retrying in {retry_after_ms} ms)"
            )))
        }
        Ok(Acquire::OwnerOperationConflict { .. }) => {
            forget(&args.state);
            Err(held("is held by this owner for another operation"))
        }
        Ok(Acquire::LimitMismatch { limit }) => {
            forget(&args.state);
            Err(held(&format!("is held with limit {limit}")))
        }
        Err(e) => {
            if !e.may_have_applied() {
                forget(&args.state);
            }
            Err(service_error("acquiring", url, &e))
        }
    }
}

/// The acquire, waiting server-side in rounds of at most [`WAIT_ROUND`].
async fn waiting(
    client: &Client,
    state: &State,
    wait: Duration,
    holder: Option<crate::domain::HolderLabel>,
) -> Result<Acquire, crate::client::Error> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let round = left.min(WAIT_ROUND);
        let started = Instant::now();
        let options = AcquireOptions {
            wait: round,
            holder: holder.clone(),
            ..AcquireOptions::new(state.ttl)
        };
        match client
            .acquire_with(&state.resource, &state.attempt, &options)
            .await
        {
            Ok(Acquire::Contended { retry_after_ms, .. }) if round < left => {
                if started.elapsed() < round {
                    let pause = Duration::from_millis(retry_after_ms).min(Duration::from_secs(1));
                    tokio::time::sleep(pause.min(left)).await;
                }
            }
            other => return other,
        }
    }
}

/// Runs `leasehold renew`.
pub(super) async fn run_renew(args: RenewArgs) -> ExitCode {
    match renew(&args).await {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(exit) => exit.report("renew"),
    }
}

async fn renew(args: &RenewArgs) -> Result<u64, Exit> {
    let state = required(&args.state)?;
    let ttl = args.ttl.unwrap_or(state.ttl);
    if ttl.is_zero() {
        return Err(Exit::new(EXIT_USAGE, "--ttl must be greater than 0"));
    }
    let client = args.connection.client()?;
    match client.renew(&state.resource, &state.attempt, ttl).await {
        Ok(RenewOutcome::Renewed { lease }) => Ok(lease.fencing_token),
        Ok(RenewOutcome::Lost { reason }) => {
            forget(&args.state);
            Err(Exit::new(
                EXIT_TEMPFAIL,
                format!(
                    "the lease is lost ({}); stop the work it protected",
                    match reason {
                        LostReason::Absent => "it expired or was released",
                        LostReason::NotOwner => "someone else holds it now",
                        LostReason::Revoked => "an operator broke it",
                        LostReason::MaxHold => "it reached its maximum hold time",
                    }
                ),
            ))
        }
        Err(e) => Err(service_error("renewing", &args.connection.url, &e)),
    }
}

/// Runs `leasehold release`.
pub(super) async fn run_release(args: ReleaseArgs) -> ExitCode {
    match release(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => exit.report("release"),
    }
}

async fn release(args: &ReleaseArgs) -> Result<(), Exit> {
    let state = required(&args.state)?;
    let client = args.connection.client()?;
    match client.release(&state.resource, &state.attempt).await {
        Ok(ReleaseOutcome::Released | ReleaseOutcome::AlreadyAbsent { .. }) => {
            forget(&args.state);
            Ok(())
        }
        Ok(ReleaseOutcome::NotOwner) => {
            forget(&args.state);
            Err(Exit::new(
                EXIT_TEMPFAIL,
                "someone else holds the lease now: it was lost before this release",
            ))
        }
        Err(e) => Err(service_error("releasing", &args.connection.url, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_back_what_was_written_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("leasehold-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("lease.json");
        let state = State {
            resource: ResourceId {
                purpose: Purpose::parse("invoice-export").expect("purpose"),
                digest: ResourceDigest::of_raw_id("customer-42"),
            },
            attempt: Attempt {
                owner_token: OwnerToken::generate().expect("token"),
                operation_id: OperationId::parse("lock-0123").expect("op"),
            },
            ttl: Duration::from_secs(30),
        };
        state.write(&path).expect("write");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let back = State::read(&path).expect("read").expect("present");
        assert_eq!(back.resource, state.resource);
        assert_eq!(back.attempt.operation_id, state.attempt.operation_id);
        assert_eq!(
            back.attempt.owner_token.expose(),
            state.attempt.owner_token.expose()
        );
        assert_eq!(back.ttl, state.ttl);
        std::fs::write(&path, "{}").expect("overwrite");
        assert!(State::read(&path).is_err());
        forget(&path);
        assert!(State::read(&path).expect("read").is_none());
        let _ = std::fs::remove_dir(&dir);
    }
}
