//! `leasehold watch PURPOSE` (no `RAW_ID`): follows every lease of a
//! purpose through `GET /leases/{purpose}/events` and prints one line per
//! live lease of the snapshot, then one per change, until interrupted or
//! `--count` lines. A stream that ends or breaks is opened again with
//! `Last-Event-ID`, so nothing is printed twice and nothing is missed while
//! the service keeps the events (else the service says `reset` and sends
//! the live leases again, and so does this command).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use super::common::{service_error, Exit, EXIT_USAGE};
use super::watch::WatchArgs;
use crate::client::{Cause, Error, StreamEvent};
use crate::domain::Purpose;

/// How long to wait before opening a stream that ended or broke again.
const REOPEN_AFTER: Duration = Duration::from_secs(1);

/// Runs `leasehold watch PURPOSE`.
pub(super) async fn run(args: WatchArgs) -> ExitCode {
    match follow(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => exit.report("watch"),
    }
}

/// Follows `args.purpose` until `--count` lines or an error.
async fn follow(args: &WatchArgs) -> Result<(), Exit> {
    let purpose = Purpose::parse(&args.purpose)
        .map_err(|e| Exit::new(EXIT_USAGE, format!("PURPOSE: {e}")))?;
    let client = args.connection.client()?;
    let mut printed = 0u64;
    let mut last: Option<String> = None;
    loop {
        let mut stream = client
            .watch_purpose(&purpose, last.as_deref())
            .await
            .map_err(|e| service_error("watching", &args.connection.url, &e))?;
        loop {
            let event = match stream.next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(Error::Indeterminate {
                    cause: Cause::ConnectionLost,
                    ..
                }) => break,
                Err(e) => return Err(service_error("watching", &args.connection.url, &e)),
            };
            if let Some(id) = &event.id {
                last = Some(id.clone());
            }
            for line in lines(&purpose, &event, args.json) {
                let mut out = std::io::stdout().lock();
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return Ok(());
                }
                printed += 1;
                if args.count > 0 && printed >= args.count {
                    return Ok(());
                }
            }
        }
        tokio::time::sleep(REOPEN_AFTER).await;
    }
}

/// The lines one event prints: one per lease of a `snapshot` page, one
/// for any other event.
fn lines(purpose: &Purpose, event: &StreamEvent, as_json: bool) -> Vec<String> {
    let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
    let leases: Vec<Value> = match event.event.as_str() {
        "snapshot" => data["leases"].as_array().cloned().unwrap_or_default(),
        _ => vec![data],
    };
    leases
        .into_iter()
        .map(|lease| {
            if as_json {
                let mut line = json!({"event": event.event, "purpose": purpose.as_str()});
                if let Some(id) = &event.id {
                    line["id"] = json!(id);
                }
                line["data"] = lease;
                line.to_string()
            } else {
                summary(purpose, &event.event, &lease)
            }
        })
        .collect()
}

/// One line: the event, then the lease's digest, version and holder.
fn summary(purpose: &Purpose, event: &str, data: &Value) -> String {
    match event {
        "snapshot_end" => format!("{purpose} snapshot_end leases={}", data["leases"]),
        "reset" => format!(
            "{purpose} reset reason={}",
            data["reason"].as_str().unwrap_or("?")
        ),
        _ => {
            let text = |name: &str| data[name].as_str().unwrap_or("?").to_owned();
            let mut line = format!(
                "{purpose} {} {event} version={}",
                text("digest"),
                text("version")
            );
            if data["held"] != Value::Bool(true) {
                line.push_str(" free");
                return line;
            }
            line.push_str(&format!(" held holders={}", data["holders"]));
            if let Some(token) = data["fencingToken"].as_u64() {
                line.push_str(&format!(" fencing-token={token}"));
            }
            if let Some(holder) = data["holder"].as_str() {
                line.push_str(&format!(" holder={holder}"));
            }
            if let Some(ms) = data["remainingMs"].as_u64() {
                line.push_str(&format!(" remaining={ms}ms"));
            }
            line
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_page_prints_a_line_per_lease_and_changes_one_each() {
        let p = Purpose::parse("invoice-export").expect("purpose");
        let page = StreamEvent {
            event: "snapshot".into(),
            id: None,
            data: r#"{"leases":[{"digest":"v1.a","version":"1.1","held":true,"holders":1,"fencingToken":7,"holder":"w","remainingMs":5}, {"digest":"v1.b","version":"2.1","held":true,"holders":1}]}"#.into(),
        };
        let out = lines(&p, &page, false);
        assert_eq!(
            out,
            [
                "invoice-export v1.a snapshot version=1.1 held holders=1 fencing-token=7 holder=w remaining=5ms",
                "invoice-export v1.b snapshot version=2.1 held holders=1",
            ]
        );
        let released = StreamEvent {
            event: "released".into(),
            id: Some("0a0b0c0d-4".into()),
            data: r#"{"digest":"v1.a","version":"2.0","held":false,"holders":0}"#.into(),
        };
        assert_eq!(
            lines(&p, &released, false),
            ["invoice-export v1.a released version=2.0 free"]
        );
        let json: Value = serde_json::from_str(&lines(&p, &released, true)[0]).expect("json");
        assert_eq!(json["id"], "0a0b0c0d-4");
        assert_eq!(json["data"]["digest"], "v1.a");
    }
}
