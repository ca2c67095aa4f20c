//! What every client subcommand shares: the exit codes (sysexits), the
//! connection flags ([`Connection`]), the [`Exit`] a subcommand ends with,
//! and how a client error becomes a message and an exit code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::client::{self, Client, ClientIdentity, ClientSettings, TlsSettings};
use crate::domain::{Purpose, ResourceDigest, ResourceId};

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
    pub(super) code: u8,
    message: String,
}

impl Exit {
    pub(super) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Prints the message (prefixed with the subcommand) and exits.
    pub(super) fn report(self, command: &str) -> ExitCode {
        eprintln!("leasehold {command}: {}", self.message);
        ExitCode::from(self.code)
    }
}

impl Connection {
    /// A client for these settings, or the usage error that prevents one.
    pub(super) fn client(&self) -> Result<Client, Exit> {
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
pub(super) fn resource(purpose: &str, raw_id: &str) -> Result<ResourceId, Exit> {
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
pub(super) fn service_error(what: &str, url: &str, error: &client::Error) -> Exit {
    match error {
        client::Error::Rejected(r) if r.status == 401 || r.status == 403 => Exit::new(
            EXIT_NOPERM,
            // The service's detail names the missing scope (`write`, ...)
            // and purpose; it never quotes the key.
            format!(
                "{what}: the service refused the API key ({} {}): {}",
                r.status, r.outcome, r.detail
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
