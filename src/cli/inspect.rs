//! `leasehold inspect`: whether a lease is held, for people (a table) or
//! scripts (`--json`, the service's answer plus the resource).

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::common::{resource, service_error, Connection, Exit};
use crate::domain::{Inspection, ResourceId};

/// `leasehold inspect [OPTIONS] PURPOSE RAW_ID`
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Where the service is and how to authenticate.
    #[command(flatten)]
    pub connection: Connection,
    /// Print the service's JSON answer (with `purpose` and `digest`) instead
    /// of a table.
    #[arg(long)]
    pub json: bool,
    /// What the lease is for, e.g. invoice-export.
    pub purpose: String,
    /// The resource's raw id; only its SHA-256 digest is sent.
    pub raw_id: String,
}

/// Runs `leasehold inspect`.
pub(super) async fn run(args: InspectArgs) -> ExitCode {
    match inspect(&args).await {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(exit) => exit.report("inspect"),
    }
}

async fn inspect(args: &InspectArgs) -> Result<String, Exit> {
    let resource = resource(&args.purpose, &args.raw_id)?;
    let client = args.connection.client()?;
    let inspection = client
        .inspect(&resource, None)
        .await
        .map_err(|e| service_error("inspecting", &args.connection.url, &e))?;
    Ok(if args.json {
        as_json(&resource, &inspection)
    } else {
        table(&resource, &inspection)
    })
}

/// The answer as the service gave it, plus which resource it is about.
pub(super) fn as_json(resource: &ResourceId, inspection: &Inspection) -> String {
    let mut value = serde_json::to_value(inspection).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        object.insert("purpose".into(), json!(resource.purpose.as_str()));
        object.insert("digest".into(), json!(resource.digest.as_str()));
    }
    value.to_string()
}

/// Two aligned columns, one row per fact.
fn table(resource: &ResourceId, inspection: &Inspection) -> String {
    let mut rows = vec![
        ("purpose", resource.purpose.to_string()),
        ("digest", resource.digest.to_string()),
        (
            "held",
            if inspection.held { "yes" } else { "no" }.to_owned(),
        ),
    ];
    if let Some(ms) = inspection.remaining_ms {
        rows.push(("remaining", format!("{ms} ms")));
    }
    if let Some(token) = inspection.fencing_token {
        rows.push(("fencing token", token.to_string()));
    }
    if let Some(holder) = &inspection.holder {
        rows.push(("holder", holder.to_string()));
    }
    if let Some(at) = inspection.acquired_at {
        rows.push(("acquired at", at.to_string()));
    }
    if let Some(at) = inspection.renewed_at {
        rows.push(("renewed at", at.to_string()));
    }
    rows.iter()
        .map(|(name, value)| format!("{name:<14}{value}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Purpose, ResourceDigest};

    fn sample() -> (ResourceId, Inspection) {
        let resource = ResourceId {
            purpose: Purpose::parse("invoice-export").expect("purpose"),
            digest: ResourceDigest::of_raw_id("customer-42"),
        };
        let inspection = Inspection {
            held: true,
            version: "3.1".into(),
            remaining_ms: Some(1200),
            fencing_token: Some(7),
            held_by: None,
            holder: crate::domain::HolderLabel::parse("pod-7").ok(),
            ttl_ms: Some(30_000),
            acquired_at: Some(crate::domain::StoreTime(1_764_686_400_000)),
            renewed_at: Some(crate::domain::StoreTime(1_764_686_410_000)),
            limit: Some(1),
            mode: Some(crate::domain::Mode::Exclusive),
            holders: 1,
            permits: Vec::new(),
            lock_delay_ms: None,
        };
        (resource, inspection)
    }

    #[test]
    fn json_is_the_answer_with_the_resource() {
        let (resource, inspection) = sample();
        let value: serde_json::Value =
            serde_json::from_str(&as_json(&resource, &inspection)).expect("json");
        assert_eq!(value["outcome"], "inspected");
        assert_eq!(value["held"], true);
        assert_eq!(value["fencingToken"], 7);
        assert_eq!(value["remainingMs"], 1200);
        assert_eq!(value["purpose"], "invoice-export");
        assert_eq!(value["digest"], resource.digest.as_str());
    }

    #[test]
    fn table_has_one_row_per_fact() {
        let (resource, inspection) = sample();
        let text = table(&resource, &inspection);
        assert!(text.contains("held          yes"), "{text}");
        assert!(text.contains("fencing token 7"), "{text}");
        assert!(text.contains("remaining     1200 ms"), "{text}");
        assert!(text.contains("holder        pod-7"), "{text}");
        assert!(
            text.contains("acquired at   2025-12-02T14:40:00.000Z"),
            "{text}"
        );
    }
}
