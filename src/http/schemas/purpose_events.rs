//! The purpose stream's events in the document
//! (`GET /leases/{purpose}/events`): one schema per event name, each an
//! object with `event`, `id` (when the event carries one) and `data`,
//! `data` described as JSON of its own schema (`contentMediaType` /
//! `contentSchema`), as for a lease's stream ([`super::events`]).

use std::borrow::Cow;

use serde_json::json;
use utoipa::openapi::schema::{
    AllOfBuilder, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::answers::Inspected;
use crate::domain::Change;

/// One event of a purpose's stream, as a server-sent events parser reads it.
pub struct PurposeEventDoc;

/// The schema names of what the events carry.
const LEASE: &str = "PurposeLease";
const PAGE: &str = "PurposeSnapshotPage";
const END: &str = "PurposeSnapshotEnd";
const RESET: &str = "PurposeReset";

/// Every event name the stream sends, what its `data` holds (a schema
/// name), whether it carries an `id`, and what it means.
pub fn purpose_events() -> Vec<(&'static str, &'static str, bool, &'static str)> {
    let mut events = vec![
        ("reset", RESET, false,
         "The `Last-Event-ID` sent cannot be resumed here (an id of another instance, or older than the events kept), or the watcher fell behind: a fresh snapshot follows."),
        ("snapshot", PAGE, false,
         "A page of the live leases when the stream (re)starts: up to 100 leases, each the inspect answer with its `digest`."),
        ("snapshot_end", END, true,
         "The snapshot is complete; `id` is where the changes that follow start."),
    ];
    events.extend(Change::ALL.iter().map(|change| {
        let what = match change {
            Change::Acquired => "A lease of the purpose was acquired; `data` is its new state.",
            Change::Released => "A lease of the purpose was released; `data` is its new state.",
            Change::Expired => "A lease's TTL ran out; `data` is its new state.",
            Change::HolderChanged => "A holder's label changed; `data` is its new state.",
            Change::Revoked => {
                "An operator broke it, or one of its permits; `data` is its new state, \
                 `data.revocation` says why and which key's name."
            }
        };
        (change.as_str(), LEASE, true, what)
    }));
    events.push((
        "renewed",
        LEASE,
        true,
        "A lease's holders renewed it (its version is unchanged, its end moved); `data` is \
         its new state. At most one a second per lease: a renewal sooner is sent a second after \
         the last, from a fresh read. A renewal through another instance is sent when the \
         service next reads the lease (at the end it last read, at the latest).",
    ));
    events
}

fn event_schema(name: &str, data: &str, with_id: bool, what: &str) -> Schema {
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(what))
        .property(
            "event",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([name]))
                .description(Some("The event's name.")),
        )
        .required("event");
    if with_id {
        object = object
            .property(
                "id",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(10))
                    .max_length(Some(29))
                    .pattern(Some("^[0-9a-f]{8}-[0-9]{1,20}$"))
                    .description(Some(
                        "Where the stream stands: send it back as `Last-Event-ID` to resume.",
                    )),
            )
            .required("id");
    }
    object
        .property(
            "data",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(format!("JSON: a `{data}`.")))
                .content_media_type("application/json")
                .content_schema(Some(Ref::from_schema_name(data))),
        )
        .required("data")
        .into()
}

/// A lease with its digest: `digest` and the members of `Inspected`.
fn lease() -> Schema {
    AllOfBuilder::new()
        .description(Some(
            "A lease of the purpose: its `digest`, then the inspect answer without `heldBy` \
             (`version` included; `remainingMs` as of the read).",
        ))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    "digest",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some("^v1\\.[0-9a-f]{64}$"))
                        .min_length(Some(67))
                        .max_length(Some(67)),
                )
                .required("digest"),
        )
        .item(Ref::from_schema_name(Inspected::name()))
        .into()
}

fn page() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("A page of the snapshot."))
        .property(
            "leases",
            ArrayBuilder::new()
                .items(Ref::from_schema_name(LEASE))
                .max_items(Some(100)),
        )
        .required("leases")
        .into()
}

fn end() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("The end of the snapshot: how many leases it listed."))
        .property(
            "leases",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0)),
        )
        .required("leases")
        .into()
}

fn reset() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("Why the stream starts over."))
        .property(
            "reason",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["unknown_id", "lagged"]))
                .description(Some(
                    "`unknown_id`: the `Last-Event-ID` cannot be resumed here; `lagged`: the \
                     watcher fell over 1024 events behind.",
                )),
        )
        .required("reason")
        .into()
}

impl PartialSchema for PurposeEventDoc {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new()
            .description(Some(
                "One server-sent event of a purpose's stream, by its `event` name.",
            ))
            .examples([json!({
                "event": "acquired",
                "id": "5f3a9c01-42",
                "data": "{\"digest\":\"v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\",\"outcome\":\"inspected\",\"held\":true,\"version\":\"12.1\",\"holders\":1,\"remainingMs\":29998,\"fencingToken\":1764686400000000,\"ttlMs\":30000,\"acquiredAt\":\"2026-12-03T14:55:00.123Z\",\"renewedAt\":\"2026-12-03T14:55:00.123Z\"}",
            })]);
        for (name, data, with_id, what) in purpose_events() {
            one_of = one_of.item(event_schema(name, data, with_id, what));
        }
        RefOr::T(Schema::OneOf(one_of.build()))
    }
}

impl ToSchema for PurposeEventDoc {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("PurposeEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Inspected::name().into_owned(), Inspected::schema()));
        <Inspected as ToSchema>::schemas(schemas);
        for (name, schema) in [
            (LEASE, lease()),
            (PAGE, page()),
            (END, end()),
            (RESET, reset()),
        ] {
            schemas.push((name.to_owned(), RefOr::T(schema)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_the_purpose_stream_sends_has_its_own_schema() {
        let schema = serde_json::to_value(PurposeEventDoc::schema()).expect("schema");
        let names: Vec<&str> = schema["oneOf"]
            .as_array()
            .expect("oneOf")
            .iter()
            .map(|s| {
                assert_eq!(
                    s["properties"]["data"]["contentMediaType"],
                    "application/json"
                );
                s["properties"]["event"]["enum"][0].as_str().expect("name")
            })
            .collect();
        assert_eq!(
            names,
            [
                "reset",
                "snapshot",
                "snapshot_end",
                "acquired",
                "released",
                "expired",
                "holder_changed",
                "revoked",
                "renewed"
            ]
        );
    }
}
