//! `leasehold history`: a resource's newest changes, for people (a table,
//! newest first) or scripts (`--json`: one JSON object per entry, per
//! line, as the service answers it).

use std::process::ExitCode;

use clap::Args;

use super::common::{resource, service_error, Connection, Exit};
use crate::domain::HistoryRecord;

/// `leasehold history [OPTIONS] PURPOSE RAW_ID`
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// Print one JSON object per entry and line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Most entries shown (1 to what the service keeps, 100 by default;
    /// the service's default, 20, when left out).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// What the lease is for, e.g. invoice-export.
    pub purpose: String,
    /// The resource's raw id; only its SHA-256 digest is sent.
    pub raw_id: String,
}

/// Runs `leasehold history`.
pub(super) async fn run(args: HistoryArgs) -> ExitCode {
    match history(&args).await {
        Ok(entries) => {
            let text = if args.json {
                entries
                    .iter()
                    .map(|e| serde_json::to_string(e).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                table(&entries)
            };
            if !text.is_empty() {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(exit) => exit.report("history"),
    }
}

async fn history(args: &HistoryArgs) -> Result<Vec<HistoryRecord>, Exit> {
    let resource = resource(&args.purpose, &args.raw_id)?;
    let client = args.connection.client()?;
    client
        .history(&resource, args.limit)
        .await
        .map_err(|e| service_error("reading the history of", &args.connection.url, &e))
}

/// One row per entry under a header, newest first; `-` for no holder
/// label; the last column says what else the entry carries.
fn table(entries: &[HistoryRecord]) -> String {
    let mut rows = vec![format!(
        "{:<24}  {:<14}  {:>16}  {:>9}  {:<24}  {}",
        "AT", "EVENT", "FENCING TOKEN", "VERSION", "HOLDER", "NOTE"
    )];
    for e in entries {
        let mut note = Vec::new();
        if e.noticed {
            note.push("noticed at this time (expired before)".to_owned());
        }
        if let Some(ms) = e.lock_delay_ms {
            note.push(format!("lock-delay {ms} ms"));
        }
        if let Some(key) = &e.key_name {
            note.push(format!("by key {key}"));
        }
        if let Some(reason) = &e.reason {
            note.push(format!("reason: {reason}"));
        }
        rows.push(
            format!(
                "{:<24}  {:<14}  {:>16}  {:>9}  {:<24}  {}",
                e.at,
                e.event,
                e.fencing_token,
                e.version,
                e.holder.as_ref().map_or("-", |h| h.as_str()),
                note.join("; "),
            )
            .trim_end()
            .to_owned(),
        );
    }
    rows.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{HolderLabel, StoreTime};

    #[test]
    fn table_has_a_header_and_a_row_per_entry() {
        let entry = |event: &str, holder: Option<&str>| HistoryRecord {
            event: event.into(),
            at: StoreTime(1_764_686_400_000),
            noticed: event == "expired",
            fencing_token: 7,
            version: "3.1".into(),
            holder: holder.and_then(|h| HolderLabel::parse(h).ok()),
            lock_delay_ms: None,
            reason: None,
            key_name: None,
        };
        let text = table(&[entry("expired", None), entry("acquired", Some("pod-7"))]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("AT"), "{text}");
        assert!(
            lines[1].contains("expired") && lines[1].contains("noticed"),
            "{text}"
        );
        assert!(lines[2].ends_with("pod-7"), "{text}");
        assert!(lines[2].starts_with("2025-12-02T14:40:00.000Z"), "{text}");
    }
}
