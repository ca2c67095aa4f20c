//! The operator's command line (feature `cli`): `leasehold lock` runs a
//! command while holding a lease, `leasehold inspect` shows a lease,
//! `leasehold list` a purpose's leases. All speak the HTTP API through
//! [`crate::client`].
//!
//! Exit codes follow BSD `sysexits.h`, as `flock`, `consul lock` and cron
//! wrappers expect:
//!
//! | code | meaning |
//! | --- | --- |
//! | the command's | `lock`: the command ran and exited (killed by signal N: 128+N) |
//! | 64 | bad usage or settings (flags, files, a request the service rejected) |
//! | 69 | the service is unreachable or unavailable (refused, timed out, TLS not trusted, 503) |
//! | 71 | an operating system error (signal handlers, randomness, waiting for the command) |
//! | 75 | `lock`: not acquired within the wait, or the lease was lost while the command ran |
//! | 77 | the service refused the API key (401/403) |

mod inspect;
mod list;
mod lock;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::client::{self, Client, ClientIdentity, ClientSettings, TlsSettings};
use crate::domain::{Purpose, ResourceDigest, ResourceId};

pub use self::inspect::InspectArgs;
pub use self::list::ListArgs;
pub use self::lock::LockArgs;

/// Bad usage or settings (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// The service is unreachable or unavailable (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Not acquired, or the lease was lost (EX_TEMPFAIL): try again later.
pub const EXIT_TEMPFAIL: u8 = 75;
/// The API key was refused (EX_NOPERM).
pub const EXIT_NOPERM: u8 = 77;
/// The operating system failed us: no signal handler, no randomness, the
/// command could not be waited for (EX_OSERR).
pub const EXIT_OSERR: u8 = 71;

/// The client subcommands of the `leasehold` binary.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Run a command while holding a lease, like `flock` or `consul lock`.
    ///
    /// Acquires PURPOSE/RAW_ID (waiting up to --wait), keeps the lease alive
    /// while COMMAND runs, releases it when COMMAND exits and exits with
    /// COMMAND's status. COMMAND sees LEASEHOLD_FENCING_TOKEN,
    /// LEASEHOLD_PURPOSE and LEASEHOLD_DIGEST. If the lease is lost, COMMAND
    /// gets SIGTERM, then SIGKILL after --kill-grace, and lock exits 75.
    /// Exit codes: 64 bad usage, 69 service unreachable, 75 not acquired or
    /// lease lost, 77 API key refused.
    Lock(LockArgs),
    /// Show whether a lease is held, its remaining time and fencing token.
    Inspect(InspectArgs),
    /// List every lease held on a purpose (all pages; each lease once).
    List(ListArgs),
}

impl ClientCommand {
    /// Runs the subcommand to completion and says how the process exits.
    pub fn run(self) -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("leasehold: cannot start the runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        runtime.block_on(async move {
            match self {
                Self::Lock(args) => lock::run(args).await,
                Self::Inspect(args) => inspect::run(args).await,
                Self::List(args) => list::run(args).await,
            }
        })
    }
}

/// How to reach the service; shared by every client subcommand.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// The service's base URL (http:// or https://).
    #[arg(
        long,
        env = "LEASEHOLD_URL",
        default_value = "http://127.0.0.1:8080",
        value_name = "URL"
    )]
    pub url: String,
    /// A file whose first line is the API key (sent as a Bearer token).
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Trust only the CA certificates in this PEM file (https://; default:
    /// the system's trust store).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Present this PEM client certificate (https://; with --client-key).
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The PEM private key of --client-cert.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
}

/// A failure that ends a subcommand: what to print, and the exit code.
#[derive(Debug)]
pub(crate) struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Prints the message (prefixed with the subcommand) and exits.
    fn report(self, command: &str) -> ExitCode {
        eprintln!("leasehold {command}: {}", self.message);
        ExitCode::from(self.code)
    }
}

impl Connection {
    /// A client for these settings, or the usage error that prevents one.
    fn client(&self) -> Result<Client, Exit> {
        let mut settings = ClientSettings::new(self.url.clone());
        if let Some(path) = &self.api_key_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Exit::new(
                    EXIT_USAGE,
                    format!("cannot read the API key file {}: {e}", path.display()),
                )
            })?;
            let key = text.lines().next().unwrap_or("").trim();
            if key.is_empty() {
                return Err(Exit::new(
                    EXIT_USAGE,
                    format!("the API key file {} is empty", path.display()),
                ));
            }
            settings.api_key = Some(key.to_owned());
        }
        settings.tls = TlsSettings {
            ca_file: self.ca_file.clone(),
            client_identity: match (&self.client_cert, &self.client_key) {
                (Some(cert), Some(key)) => Some(ClientIdentity {
                    cert_file: cert.clone(),
                    key_file: key.clone(),
                }),
                _ => None,
            },
        };
        Client::new(settings).map_err(|e| Exit::new(EXIT_USAGE, e.to_string()))
    }
}

/// PURPOSE and RAW_ID as a resource; the raw id is only hashed, never sent.
fn resource(purpose: &str, raw_id: &str) -> Result<ResourceId, Exit> {
    let purpose = Purpose::parse(purpose).map_err(|e| {
        Exit::new(
            EXIT_USAGE,
            format!("PURPOSE {purpose:?}: {e} (expected ^[a-z][a-z0-9-]{{0,62}}$)"),
        )
    })?;
    Ok(ResourceId {
        purpose,
        digest: ResourceDigest::of_raw_id(raw_id),
    })
}

/// The exit for a client error; `what` says which call failed.
fn service_error(what: &str, url: &str, error: &client::Error) -> Exit {
    match error {
        client::Error::Rejected(r) if r.status == 401 || r.status == 403 => Exit::new(
            EXIT_NOPERM,
            format!(
                "{what}: the service refused the API key ({} {})",
                r.status, r.outcome
            ),
        ),
        client::Error::Rejected(r) => {
            let fields: Vec<String> = r
                .errors
                .iter()
                .map(|f| format!("{}: {}", f.field, f.message))
                .collect();
            let detail = if fields.is_empty() {
                r.detail.clone()
            } else {
                fields.join("; ")
            };
            Exit::new(
                EXIT_USAGE,
                format!(
                    "{what}: rejected by the service ({} {}): {detail}",
                    r.status, r.outcome
                ),
            )
        }
        client::Error::Unavailable {
            cause: client::Cause::Tls,
            ..
        } => Exit::new(
            EXIT_UNAVAILABLE,
            format!(
                "{what}: TLS handshake with {url} failed (certificate not trusted? see --ca-file)"
            ),
        ),
        client::Error::Unavailable {
            cause: client::Cause::ClientCertificate,
            ..
        } => Exit::new(
            EXIT_UNAVAILABLE,
            format!(
                "{what}: {url} requires a client certificate (mutual TLS): pass --client-cert and --client-key; nothing was applied"
            ),
        ),
        client::Error::Unavailable {
            cause: client::Cause::Service,
            retry_after,
        } => Exit::new(
            EXIT_UNAVAILABLE,
            format!(
                "{what}: the service is unavailable (its store cannot be reached); nothing was applied{}",
                retry_hint(*retry_after)
            ),
        ),
        client::Error::Unavailable { cause, .. } => Exit::new(
            EXIT_UNAVAILABLE,
            format!("{what}: cannot reach {url} ({cause}); nothing was applied"),
        ),
        client::Error::Overloaded { retry_after } => Exit::new(
            EXIT_UNAVAILABLE,
            format!(
                "{what}: the service is overloaded; nothing was applied{}",
                retry_hint(*retry_after)
            ),
        ),
        client::Error::Indeterminate { cause, .. } => Exit::new(
            EXIT_UNAVAILABLE,
            format!("{what}: no certain answer from {url} ({cause})"),
        ),
        refused @ client::Error::Refused(_) => {
            Exit::new(EXIT_TEMPFAIL, format!("{what}: {refused}"))
        }
    }
}

fn retry_hint(retry_after: Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |d| format!("; retry in {} ms", d.as_millis()))
}

/// Parses a duration such as `500ms`, `30s`, `5m` or `1h` (a whole number
/// and a unit).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let usage = || format!("{text:?} is not a duration such as 500ms, 30s, 5m or 1h");
    let n: u64 = number.parse().map_err(|_| usage())?;
    let millis_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(usage()),
    };
    n.checked_mul(millis_per)
        .map(Duration::from_millis)
        .ok_or_else(usage)
}

/// Whether `name` is one of [`ClientCommand`]'s subcommands.
pub fn is_client_command(name: &str) -> bool {
    matches!(name, "lock" | "inspect" | "list")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in [
            "",
            "30",
            "s",
            "-1s",
            "1.5s",
            "3 s",
            "10d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_bad_purpose_is_a_usage_error() {
        let exit = resource("Not A Purpose", "x").expect_err("rejected");
        assert_eq!(exit.code, EXIT_USAGE);
        assert!(resource("invoice-export", "customer-42").is_ok());
    }
}
