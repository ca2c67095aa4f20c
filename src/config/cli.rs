//! The command line's shape: the subcommands, and `leasehold healthcheck`'s
//! settings (the service's own are [`ServeArgs`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::serve::ServeArgs;

/// leasehold: time-bounded, owner-checked leases with typed outcomes and fencing tokens.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (the default).
    Serve(Box<ServeArgs>),
    /// Print the `v1.<sha256-hex>` digest of a raw resource id.
    Digest {
        /// The raw resource id (never sent to the service).
        raw_id: String,
    },
    /// Print the OpenAPI document.
    Openapi,
    /// GET a URL and exit 0 on a 2xx answer (a container health check without a shell).
    Healthcheck(HealthcheckArgs),
    /// Write each Lua script as Redis runs it (its includes spliced in) to
    /// `DIR/<name>.lua`: what luacheck and the benches read (hidden: a
    /// build tool, not an operator's command).
    #[command(hide = true)]
    Scripts {
        /// The directory to write into (created when missing).
        #[arg(long, value_name = "DIR")]
        dump: PathBuf,
    },
}

/// Settings of `leasehold healthcheck`: the same `LEASEHOLD_*` variables the
/// service reads, so inside the service's container it probes what the
/// service serves (HTTPS when `LEASEHOLD_TLS_CERT_FILE` is set).
#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// The URL to probe; default: `/readyz` on this container's
    /// `LEASEHOLD_LISTEN` port at the loopback address, `https://` when
    /// `LEASEHOLD_TLS_CERT_FILE` is set.
    #[arg(long)]
    pub url: Option<String>,
    /// The service's API listener (for the default URL).
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The certificate the service serves: an `https://` probe accepts
    /// exactly this certificate and nothing else.
    #[arg(long, env = "LEASEHOLD_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `LEASEHOLD_TLS_CERT_FILE`: presented as the client
    /// certificate when the service requires one.
    #[arg(long, env = "LEASEHOLD_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Set when the service requires client certificates.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA_FILE")]
    pub tls_client_ca_file: Option<PathBuf>,
}
