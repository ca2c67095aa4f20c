//! `leasehold watch`: follows one lease and prints a line per change (who
//! holds it, its fencing token, its version), through the inspect long-poll
//! (`?changedSince=V&waitMs=N`), until interrupted or `--count` lines.
//! Without `RAW_ID` the command follows the whole purpose through its event
//! stream instead (`watch_purpose.rs`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::common::{parse_duration, resource, service_error, Connection, Exit, EXIT_USAGE};
use super::inspect::as_json;
use crate::domain::{Inspection, ResourceId};

/// `leasehold watch [OPTIONS] PURPOSE [RAW_ID]`
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// Print each state as the service's JSON answer (with `purpose` and
    /// `digest`), one per line, instead of a summary line.
    #[arg(long)]
    pub json: bool,
    /// Stop after printing this many states (the first is the lease as it
    /// is now); 0: until interrupted.
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// How long one long-poll waits for a change before asking again; at
    /// most the service's LEASEHOLD_MAX_WAIT_MS.
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    pub poll: Duration,
    /// What the lease is for, e.g. invoice-export.
    pub purpose: String,
    /// The resource's raw id; only its SHA-256 digest is sent. Left out:
    /// every lease of the purpose (first the live ones, then each change).
    pub raw_id: Option<String>,
}

/// Runs `leasehold watch`.
pub(super) async fn run(args: WatchArgs) -> ExitCode {
    match watch(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => exit.report("watch"),
    }
}

async fn watch(args: &WatchArgs) -> Result<(), Exit> {
    if args.poll.is_zero() {
        return Err(Exit::new(EXIT_USAGE, "--poll must be more than 0"));
    }
    // Without RAW_ID the purpose is watched (`watch_purpose`, routed there).
    let Some(raw_id) = &args.raw_id else {
        return Err(Exit::new(EXIT_USAGE, "RAW_ID is missing"));
    };
    let resource = resource(&args.purpose, raw_id)?;
    let client = args.connection.client()?;
    let mut printed = 0u64;
    let mut version: Option<String> = None;
    loop {
        let seen = client
            .inspect_changed(&resource, version.as_deref(), args.poll)
            .await
            .map_err(|e| service_error("watching", &args.connection.url, &e))?;
        // An unchanged answer (the poll ran out) is asked again, not printed.
        if version.as_deref() == Some(seen.version.as_str()) {
            continue;
        }
        let line = if args.json {
            as_json(&resource, &seen)
        } else {
            summary(&resource, &seen)
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            // The reader went away (`leasehold watch … | head -1`): done.
            return Ok(());
        }
        printed += 1;
        if args.count > 0 && printed >= args.count {
            return Ok(());
        }
        version = Some(seen.version);
    }
}

/// One line: the version, whether it is held and by whom.
fn summary(resource: &ResourceId, seen: &Inspection) -> String {
    let mut line = format!(
        "{} {} version={}",
        resource.purpose, resource.digest, seen.version
    );
    if !seen.held {
        line.push_str(" free");
        if let Some(ms) = seen.lock_delay_ms {
            line.push_str(&format!(" lock-delay={ms}ms"));
        }
        return line;
    }
    line.push_str(&format!(" held holders={}", seen.holders));
    if let Some(token) = seen.fencing_token {
        line.push_str(&format!(" fencing-token={token}"));
    }
    if let Some(holder) = &seen.holder {
        line.push_str(&format!(" holder={holder}"));
    }
    if let Some(ms) = seen.remaining_ms {
        line.push_str(&format!(" remaining={ms}ms"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{HolderLabel, Purpose, ResourceDigest};

    #[test]
    fn a_summary_names_the_holder_and_token_or_says_free() {
        let resource = ResourceId {
            purpose: Purpose::parse("invoice-export").expect("purpose"),
            digest: ResourceDigest::of_raw_id("customer-42"),
        };
        let mut seen = Inspection {
            held: true,
            version: "3.1".into(),
            remaining_ms: Some(1200),
            fencing_token: Some(7),
            held_by: None,
            holder: HolderLabel::parse("pod-7").ok(),
            ttl_ms: Some(30_000),
            acquired_at: None,
            renewed_at: None,
            limit: Some(1),
            mode: None,
            holders: 1,
            permits: Vec::new(),
            lock_delay_ms: None,
        };
        let line = summary(&resource, &seen);
        assert!(line.starts_with("invoice-export v1."), "{line}");
        assert!(
            line.ends_with(
                "version=3.1 held holders=1 fencing-token=7 holder=pod-7 remaining=1200ms"
            ),
            "{line}"
        );
        seen.held = false;
        seen.version = "4.0".into();
        assert!(
            summary(&resource, &seen).ends_with("version=4.0 free"),
            "{line}"
        );
    }
}
