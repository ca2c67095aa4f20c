//! Every outcome, rendered by the real response code, conforms to the
//! response the document declares for its operation and status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::domain::{
    AcquireOutcome, Failure, Guarantee, HeldBy, Inspection, Lease, LostReason, OperationId,
    Purpose, ReleaseOutcome, RenewOutcome, ResourceDigest, SessionId, StoreTime,
};
use crate::http::problem::{respond_one, ApiError, FieldError};

/// The JSON Schema subset this document uses: `$ref`, `oneOf`, `allOf`, `type`, `enum`,
/// `properties`, `required`, `additionalProperties: false`, bounds, `items`.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/components/schemas/");
        return validate(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            validate(doc, s, value, at)?;
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = one
            .iter()
            .filter(|s| validate(doc, s, value, at).is_ok())
            .count();
        if matching != 1 {
            return Err(format!("{at}: {matching} oneOf branches match {value}"));
        }
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "object" => value.is_object(),
            "string" => value.is_string(),
            "integer" => value.is_u64() || value.is_i64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "null" => value.is_null(),
            _ => false,
        });
        if !ok {
            return Err(format!("{at}: {value} is not of type {types:?}"));
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if !values.contains(value) {
            return Err(format!("{at}: {value} not in {values:?}"));
        }
    }
    if let (Some(min), Some(n)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) {
        if n < min {
            return Err(format!("{at}: {n} < minimum {min}"));
        }
    }
    if let (Some(max), Some(n)) = (
        schema.get("maximum").and_then(Value::as_f64),
        value.as_f64(),
    ) {
        if n > max {
            return Err(format!("{at}: {n} > maximum {max}"));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if schema
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
            || schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len > m)
        {
            return Err(format!("{at}: length of {s:?} out of bounds"));
        }
    }
    if let Some(items) = value.as_array() {
        if schema
            .get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| (items.len() as u64) < m)
        {
            return Err(format!("{at}: too few items"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(doc, item_schema, item, &format!("{at}[{i}]"))?;
            }
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = name.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                return Err(format!("{at}: required member {name} missing"));
            }
        }
        for (name, member) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(s) => validate(doc, s, member, &format!("{at}.{name}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{at}: unknown member {name}"));
                }
                // Problem schemas are open (RFC 9457 allows extension
                // members), but ours never send undocumented ones.
                None if properties.is_some() => {
                    return Err(format!("{at}: undocumented member {name}"))
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// A `forbidden` answer naming the scope the key lacks on a purpose.
pub(super) fn missing_scope(scope: &'static str) -> Response {
    ApiError::MissingPurposeScope {
        scope,
        purpose: Purpose::parse("invoice-export").expect("purpose"),
    }
    .into_response()
}

pub(super) async fn check(
    doc: &Value,
    path: &str,
    method: &str,
    response: Response,
) -> (StatusCode, Value) {
    let status = response.status();
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let retry_after = response.headers().get("retry-after").is_some();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let body: Value = serde_json::from_slice(&body).expect("JSON body");
    let declared = &doc["paths"][path][method]["responses"][status.as_str()];
    assert!(
        declared.is_object(),
        "{method} {path}: status {status} is not documented ({body})"
    );
    let schema = &declared["content"][content_type.as_str()]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} {status}: content type {content_type} is not documented"
    );
    if let Err(e) = validate(doc, schema, &body, "body") {
        panic!("{method} {path} {status}: {e}\n{body:#}");
    }
    let required_retry = declared["headers"]["Retry-After"]["required"] == json!(true);
    assert!(
        !required_retry || retry_after,
        "{method} {path} {status}: Retry-After documented as always sent"
    );
    if !status.is_success() {
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(body["status"], json!(status.as_u16()));
    }
    (status, body)
}

fn lease() -> Lease {
    Lease {
        purpose: Purpose::parse("invoice-export").expect("purpose"),
        digest: ResourceDigest::of_raw_id("order-42"),
        fencing_token: 1_764_686_400_000_000,
        ttl_ms: 30_000,
        remaining_ms: 29_990,
        guarantee: Guarantee::Fenced,
        replication: None,
        holder: None,
        acquired_at: StoreTime(1_764_686_400_000),
        renewed_at: StoreTime(1_764_686_400_000),
        max_hold_ms: Some(3_600_000),
        hold_ends_at: Some(StoreTime(1_764_690_000_000)),
    }
}

fn permit(holder: Option<&str>) -> crate::domain::PermitView {
    crate::domain::PermitView {
        holder: holder.and_then(|h| crate::domain::HolderLabel::parse(h).ok()),
        fencing_token: 7,
        remaining_ms: 10,
        ttl_ms: 30_000,
        acquired_at: StoreTime(1_764_686_400_000),
        renewed_at: StoreTime(1_764_686_400_000),
        max_hold_ms: None,
        hold_ends_at: None,
        lock_delay_ms: None,
        session: holder.and_then(|_| SessionId::parse(&format!("s1.{:032x}", 7)).ok()),
    }
}

fn failures() -> Vec<Response> {
    let op = OperationId::parse("export-1").expect("op");
    vec![
        respond_one(&Failure::Unavailable {
            retry_after_ms: 1000,
        }),
        respond_one(&Failure::Overloaded { retry_after_ms: 50 }),
        respond_one(&Failure::Indeterminate { operation_id: op }),
        ApiError::RequestTimeout.into_response(),
    ]
}

pub(super) fn refusals(with_body: bool) -> Vec<Response> {
    let error = |field: &str| FieldError {
        field: field.into(),
        message: "is wrong".into(),
    };
    let mut all = vec![
        ApiError::Invalid {
            status: StatusCode::BAD_REQUEST,
            errors: vec![error("purpose"), error("Lease-Owner-Token")],
        }
        .into_response(),
        ApiError::Unauthorized.into_response(),
        ApiError::HeadersTooLarge { limit: 16384 }.into_response(),
    ];
    if with_body {
        all.push(
            ApiError::Invalid {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                errors: vec![error("ttlMs")],
            }
            .into_response(),
        );
        all.push(ApiError::TooLarge { limit: 16384 }.into_response());
        all.push(ApiError::UnsupportedMediaType.into_response());
    }
    all
}

#[tokio::test]
async fn every_outcome_conforms_to_its_documented_response() {
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let lease_path = "/leases/{purpose}/{digest}";
    let mut acquire = vec![
        respond_one(&AcquireOutcome::Acquired {
            lease: lease(),
            waited_ms: None,
        }),
        respond_one(&AcquireOutcome::Acquired {
            lease: lease(),
            waited_ms: Some(120),
        }),
        respond_one(&AcquireOutcome::ReplayedSameOperation { lease: lease() }),
        respond_one(&AcquireOutcome::OwnerOperationConflict {
            retry_after_ms: 1200,
        }),
        respond_one(&AcquireOutcome::Contended {
            retry_after_ms: 50,
            waited_ms: None,
            reason: None,
        }),
        respond_one(&AcquireOutcome::Contended {
            retry_after_ms: 2500,
            waited_ms: Some(5000),
            reason: Some(crate::domain::ContendedReason::Queued),
        }),
        respond_one(&AcquireOutcome::Contended {
            retry_after_ms: 900,
            waited_ms: None,
            reason: Some(crate::domain::ContendedReason::LockDelay),
        }),
        respond_one(&AcquireOutcome::LimitMismatch { limit: 4 }),
    ];
    let mut renew = vec![
        respond_one(&RenewOutcome::Renewed { lease: lease() }),
        respond_one(&RenewOutcome::Lost {
            reason: LostReason::Absent,
        }),
        respond_one(&RenewOutcome::Lost {
            reason: LostReason::NotOwner,
        }),
    ];
    let mut release = vec![
        respond_one(&ReleaseOutcome::Released),
        respond_one(&ReleaseOutcome::AlreadyAbsent { reason: None }),
        respond_one(&ReleaseOutcome::NotOwner),
    ];
    let mut inspect = vec![
        respond_one(&Inspection {
            held: false,
            version: "3.0".into(),
            remaining_ms: None,
            fencing_token: None,
            held_by: None,
            holder: None,
            ttl_ms: None,
            acquired_at: None,
            renewed_at: None,
            limit: None,
            mode: None,
            holders: 0,
            permits: Vec::new(),
            lock_delay_ms: Some(700),
        }),
        respond_one(&Inspection {
            held: true,
            version: "4.1".into(),
            remaining_ms: Some(10),
            fencing_token: Some(7),
            held_by: None,
            holder: None,
            ttl_ms: Some(30_000),
            acquired_at: Some(StoreTime(1_764_686_400_000)),
            renewed_at: Some(StoreTime(1_764_686_400_000)),
            limit: Some(1),
            mode: Some(crate::domain::Mode::Exclusive),
            holders: 1,
            permits: vec![permit(None)],
            lock_delay_ms: None,
        }),
        respond_one(&Inspection {
            held: true,
            version: "5.1".into(),
            remaining_ms: Some(10),
            fencing_token: Some(7),
            held_by: Some(HeldBy::CallerOtherOperation),
            holder: crate::domain::HolderLabel::parse("pod-1").ok(),
            ttl_ms: Some(30_000),
            acquired_at: Some(StoreTime(1_764_686_400_000)),
            renewed_at: Some(StoreTime(1_764_686_401_000)),
            limit: Some(4),
            mode: Some(crate::domain::Mode::Shared),
            holders: 2,
            permits: vec![permit(Some("pod-1")), permit(None)],
            lock_delay_ms: None,
        }),
    ];
    for list in [&mut acquire, &mut renew, &mut release, &mut inspect] {
        list.extend(failures());
        list.push(ApiError::Forbidden.into_response());
        list.push(missing_scope("write"));
        list.push(ApiError::NotFound.into_response());
    }
    acquire.extend(refusals(true));
    renew.extend(refusals(true));
    acquire.push(crate::http::problem::body_timeout());
    renew.push(crate::http::problem::body_timeout());
    release.extend(refusals(false));
    inspect.extend(refusals(false));
    let mut seen = std::collections::BTreeSet::new();
    for (method, responses) in [
        ("put", acquire),
        ("patch", renew),
        ("delete", release),
        ("get", inspect),
    ] {
        for response in responses {
            let (status, body) = check(&doc, lease_path, method, response).await;
            seen.insert((
                method,
                status.as_u16(),
                body["outcome"].as_str().unwrap_or("").to_owned(),
            ));
        }
    }
    // Every documented status of every lease operation was exercised.
    for method in ["put", "patch", "delete", "get"] {
        for status in doc["paths"][lease_path][method]["responses"]
            .as_object()
            .expect("responses")
            .keys()
        {
            let status: u16 = status.parse().expect("numeric status");
            assert!(
                seen.iter().any(|(m, s, _)| *m == method && *s == status),
                "{method} {status} never checked"
            );
        }
    }

    let created = crate::http::attempts::AttemptCreated {
        outcome: crate::http::attempts::AttemptCreatedTag::AttemptCreated,
        owner_token: "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz".into(),
        operation_id: "export-1".into(),
    };
    let mut attempts = vec![(StatusCode::CREATED, axum::Json(created)).into_response()];
    attempts.extend(refusals(true));
    for response in attempts {
        check(&doc, "/attempts", "post", response).await;
    }
    // Listing: a page with and without a next cursor, and every refusal.
    let listed = |holder: Option<&str>, next: Option<&str>| {
        respond_one(&crate::domain::Listing {
            leases: vec![crate::domain::ListedLease {
                digest: ResourceDigest::of_raw_id("order-42"),
                holder: holder.and_then(|h| crate::domain::HolderLabel::parse(h).ok()),
                fencing_token: 7,
                remaining_ms: 10,
                ttl_ms: 30_000,
                acquired_at: StoreTime(1_764_686_400_000),
                renewed_at: StoreTime(1_764_686_401_000),
                holders: if next.is_some() { 2 } else { 1 },
                limit: if next.is_some() { 3 } else { 1 },
                mode: crate::domain::Mode::Exclusive,
                // Two holders: both listed.
                permits: next.map(|_| {
                    [7, 9]
                        .map(|fencing_token| crate::domain::PermitView {
                            fencing_token,
                            renewed_at: StoreTime(1_764_686_401_000),
                            ..permit(None)
                        })
                        .to_vec()
                }),
                session: None,
            }],
            next_cursor: next.map(str::to_owned),
        })
    };
    let mut list = vec![
        listed(None, None),
        listed(Some("pod-1"), Some("aW52b2ljZS1leHBvcnQvYS92MQ")),
        ApiError::Forbidden.into_response(),
        missing_scope("read"),
        ApiError::NotFound.into_response(),
    ];
    list.extend(failures().into_iter().skip(3));
    list.extend(refusals(false));
    for failure in [
        Failure::Unavailable {
            retry_after_ms: 1000,
        },
        Failure::Overloaded { retry_after_ms: 50 },
    ] {
        list.push(respond_one(&failure));
    }
    let mut statuses = std::collections::BTreeSet::new();
    for response in list {
        statuses.insert(check(&doc, "/leases/{purpose}", "get", response).await.0);
    }
    for status in doc["paths"]["/leases/{purpose}"]["get"]["responses"]
        .as_object()
        .expect("responses")
        .keys()
    {
        assert!(
            statuses.iter().any(|s| s.as_str() == status),
            "list {status} never checked"
        );
    }
}

/// Generators (openapi-typescript) make a member with a `default` required: optional ones carry none.
#[test]
fn optional_members_carry_no_default() {
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let mut optional = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (member, property) in schema["properties"].as_object().into_iter().flatten() {
            if !required.contains(&member.as_str()) {
                optional += 1;
                assert!(
                    property.get("default").is_none(),
                    "{name}.{member} is optional but has a default: generated clients would require it"
                );
            }
        }
    }
    assert!(optional >= 5, "optional members were found ({optional})");
    let wait = &doc["components"]["schemas"]["AcquireBody"];
    assert_eq!(wait["required"], json!(["ttlMs"]), "waitMs is optional");
}

/// A header or path parameter is text, sent or left out, never JSON `null` (sent as "null").
#[test]
fn no_parameter_is_nullable() {
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let mut parameters = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            for p in op["parameters"].as_array().into_iter().flatten() {
                parameters += 1;
                let types = &p["schema"]["type"];
                assert!(
                    types.is_null() || types.is_string(),
                    "{method} {path} {}: type {types} allows null",
                    p["name"]
                );
            }
        }
    }
    assert!(parameters >= 16, "{parameters} parameters");
}

/// Every problem the document declares has a page at its `type`.
#[test]
fn every_documented_problem_type_has_a_page() {
    use crate::http::problem_table::ProblemType;
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let mut problems = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        if schema["properties"]["type"].is_null() {
            continue;
        }
        problems += 1;
        for outcome in schema["properties"]["outcome"]["enum"]
            .as_array()
            .expect("outcome enum")
        {
            let slug = outcome.as_str().expect("string").replace('_', "-");
            assert!(
                ProblemType::from_slug(&slug).is_some(),
                "{name}: no page for outcome {outcome}: add it to ProblemType (src/http/problem_table.rs)"
            );
            let example = &schema["example"]["type"];
            assert_eq!(
                example,
                &json!(format!("/problems/{slug}")),
                "{name}: example type"
            );
        }
    }
    assert!(problems >= 15, "{problems} problem schemas");
    let listed = &doc["components"]["schemas"]["ProblemType"]["enum"];
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(ProblemType::ALL.len()),
        "the document lists every problem type page"
    );
}

#[test]
fn the_validator_rejects_what_it_should() {
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let schema = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
    let contended = json!({"type": "/problems/contended", "title": "t", "status": 409, "detail": "d",
        "outcome": "contended", "retryAfterMs": 50});
    assert!(validate(&doc, &schema("ContendedProblem"), &contended, "b").is_ok());
    assert!(validate(&doc, &schema("AcquireConflict"), &contended, "b").is_ok());
    assert!(
        validate(
            &doc,
            &schema("OwnerOperationConflictProblem"),
            &contended,
            "b"
        )
        .is_err(),
        "wrong tag"
    );
    let mut extra = contended.clone();
    extra["leaked"] = json!(1);
    assert!(
        validate(&doc, &schema("ContendedProblem"), &extra, "b").is_err(),
        "undocumented member"
    );
    let mut missing = contended.clone();
    missing
        .as_object_mut()
        .expect("object")
        .remove("retryAfterMs");
    assert!(
        validate(&doc, &schema("ContendedProblem"), &missing, "b").is_err(),
        "missing member"
    );
    assert!(
        validate(&doc, &schema("AcquireBody"), &json!({"ttlMs": 10}), "b").is_err(),
        "below minimum"
    );
    assert!(
        validate(
            &doc,
            &schema("AcquireBody"),
            &json!({"ttlMs": 30000, "x": 1}),
            "b"
        )
        .is_err(),
        "closed body"
    );
}
