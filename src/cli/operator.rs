//! `leasehold break`: an operator removes a lease, or one permit of it,
//! through `POST /leases/{purpose}/{digest}/break` (an `admin` key).

use std::process::ExitCode;

use clap::Args;

use super::common::{resource, service_error, Connection, Exit, EXIT_USAGE};
use crate::domain::{BreakOutcome, BreakReason};

/// Exit code when there was nothing to break (like `grep` finding nothing).
pub const EXIT_NOTHING: u8 = 1;

/// `leasehold break [OPTIONS] PURPOSE RAW_ID`
#[derive(Debug, Args)]
pub struct BreakArgs {
    /// Where the service is and how to authenticate (an `admin` key).
    #[command(flatten)]
    pub connection: Connection,
    /// Break only the permit with this fencing token (default: every
    /// permit of the resource).
    #[arg(long, value_name = "N")]
    pub fencing_token: Option<u64>,
    /// Why (1 to 256 characters, no control characters); watchers see it.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// What the lease is for, e.g. invoice-export.
    pub purpose: String,
    /// The resource's raw id; only its SHA-256 digest is sent.
    pub raw_id: String,
}

/// Runs `leasehold break`.
pub(super) async fn run(args: BreakArgs) -> ExitCode {
    match break_lease(&args).await {
        Ok(BreakOutcome::Broken { permits }) => {
            println!("broken: {permits} permit(s) removed");
            ExitCode::SUCCESS
        }
        Ok(BreakOutcome::NothingToBreak) => {
            eprintln!(
                "leasehold break: nothing to break (no live permit{})",
                args.fencing_token
                    .map_or_else(String::new, |t| format!(" with fencing token {t}"))
            );
            ExitCode::from(EXIT_NOTHING)
        }
        Err(exit) => exit.report("break"),
    }
}

async fn break_lease(args: &BreakArgs) -> Result<BreakOutcome, Exit> {
    let resource = resource(&args.purpose, &args.raw_id)?;
    let reason = args
        .reason
        .as_deref()
        .map(BreakReason::parse)
        .transpose()
        .map_err(|e| Exit::new(EXIT_USAGE, format!("--reason: {}", e.0)))?;
    let client = args.connection.client()?;
    client
        .break_lease(&resource, args.fencing_token, reason.as_ref())
        .await
        .map_err(|e| service_error("breaking", &args.connection.url, &e))
}
