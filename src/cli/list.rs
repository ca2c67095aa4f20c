//! `leasehold list`: every lease held on a purpose, for people (a table) or
//! scripts (`--json`: one JSON object per lease, per line).

use std::collections::HashSet;
use std::process::ExitCode;

use clap::Args;

use super::common::{service_error, Connection, Exit, EXIT_USAGE};
use crate::domain::{ListLimit, ListedLease, Mode, Purpose};

/// `leasehold list [OPTIONS] PURPOSE`
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// Print one JSON object per lease and line (the service's lease
    /// record) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Leases asked for per page (1 to 1000; the pages are all fetched).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub page_size: u16,
    /// What the leases are for, e.g. invoice-export.
    pub purpose: String,
}

/// Runs `leasehold list`.
pub(super) async fn run(args: ListArgs) -> ExitCode {
    match list(&args).await {
        Ok(leases) => {
            let text = if args.json {
                leases
                    .iter()
                    .map(|l| serde_json::to_string(l).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                table(&leases)
            };
            if !text.is_empty() {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(exit) => exit.report("list"),
    }
}

/// Follows the listing to its end. Redis may list a lease on two pages
/// when its keyspace shrank meanwhile: each digest is kept once (the first
/// page's record).
async fn list(args: &ListArgs) -> Result<Vec<ListedLease>, Exit> {
    let purpose = Purpose::parse(&args.purpose)
        .map_err(|e| Exit::new(EXIT_USAGE, format!("PURPOSE {:?}: {e}", args.purpose)))?;
    let limit = ListLimit::parse(&args.page_size.to_string())
        .map_err(|e| Exit::new(EXIT_USAGE, format!("--page-size: {e}")))?;
    let client = args.connection.client()?;
    let mut leases = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client
            .list(&purpose, Some(limit), cursor.as_deref())
            .await
            .map_err(|e| service_error("listing", &args.connection.url, &e))?;
        for lease in page.leases {
            if seen.insert(lease.digest.clone()) {
                leases.push(lease);
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(leases),
        }
    }
}

/// One row per resource under a header (its oldest holder's record, and
/// how many hold it of how many may); `-` for no holder label.
fn table(leases: &[ListedLease]) -> String {
    let mut rows = vec![format!(
        "{:<67}  {:>16}  {:>12}  {:<24}  {:>9}  {}",
        "DIGEST", "FENCING TOKEN", "REMAINING", "RENEWED AT", "HOLDERS", "HOLDER"
    )];
    for l in leases {
        let holders = match l.mode {
            Mode::Exclusive => format!("{}/{}", l.holders, l.limit),
            Mode::Shared => format!("{} shared", l.holders),
        };
        rows.push(format!(
            "{:<67}  {:>16}  {:>12}  {:<24}  {:>9}  {}",
            l.digest,
            l.fencing_token,
            format!("{} ms", l.remaining_ms),
            l.renewed_at,
            holders,
            l.holder.as_ref().map_or("-", |h| h.as_str()),
        ));
    }
    rows.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{HolderLabel, ResourceDigest, StoreTime};

    #[test]
    fn table_has_a_header_and_a_row_per_lease() {
        let lease = |raw: &str, holder: Option<&str>| ListedLease {
            digest: ResourceDigest::of_raw_id(raw),
            holder: holder.and_then(|h| HolderLabel::parse(h).ok()),
            fencing_token: 7,
            remaining_ms: 1200,
            ttl_ms: 30_000,
            acquired_at: StoreTime(1_764_686_400_000),
            renewed_at: StoreTime(1_764_686_410_000),
            holders: 1,
            limit: 1,
            mode: Mode::Exclusive,
            permits: None,
            session: None,
        };
        let text = table(&[lease("a", Some("pod-7")), lease("b", None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("DIGEST"), "{text}");
        assert!(
            lines[1].contains("1200 ms") && lines[1].ends_with("pod-7"),
            "{text}"
        );
        assert!(lines[2].ends_with(" -"), "{text}");
        assert!(lines[1].contains("2025-12-02T14:40:10.000Z"), "{text}");
    }
}
