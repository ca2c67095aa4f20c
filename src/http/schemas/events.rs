//! The event stream's events in the document: one schema per event the
//! stream sends (`state`, then one per [`Change`]), each an object with
//! `event`, `id` and `data`, `data` described as JSON of its own schema
//! (`contentMediaType` / `contentSchema`), so a checker reads every event
//! of `text/event-stream` and validates what it carries.

use std::borrow::Cow;

use serde_json::json;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::answers::Inspected;
use crate::domain::Change;

/// The first event's name: the state when the stream opens.
pub const STATE_EVENT: &str = "state";

/// One event of a lease's stream (`GET /leases/{purpose}/{digest}/events`),
/// as a server-sent events parser reads it: `event`, `id` and `data`.
pub struct LeaseEvent;

/// Every event name the stream sends, with what its `data` holds.
pub fn lease_events() -> Vec<(&'static str, &'static str)> {
    let mut events = vec![(
        STATE_EVENT,
        "The state when the stream opens (left out when `Last-Event-ID` names it): \
         the inspect answer without `heldBy`, `remainingMs` as of now.",
    )];
    events.extend(Change::ALL.iter().map(|change| {
        let what = match change {
            Change::Acquired => "A holder acquired it",
            Change::Released => "A holder released it",
            Change::Expired => "A holder's TTL ran out",
            Change::HolderChanged => "A holder's label changed",
            Change::Revoked => {
                "An operator broke it, or one of its permits (`data.revocation` says \
                 why and which key's name)"
            }
        };
        (change.as_str(), what)
    }));
    events
}

/// A title for the events named `name` (`holder_changed`:
/// `HolderChangedEvent`), apart from the answers' schema names, which
/// code generators use for classes too.
fn event_title(name: &str) -> String {
    let words: String = name
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    format!("{words}Event")
}

/// The schema of the events named `name`.
fn event_schema(name: &str, what: &str) -> Schema {
    let data = ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "The state as JSON: an `Inspected` answer without `heldBy`.",
        ))
        .content_media_type("application/json")
        .content_schema(Some(Ref::from_schema_name(Inspected::name())));
    let description = if name == STATE_EVENT {
        what.to_owned()
    } else {
        format!(
            "{what}; `data` is the new state (the inspect answer without `heldBy`, \
             `remainingMs` as of the read)."
        )
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .title(Some(event_title(name)))
        .description(Some(description))
        .property(
            "event",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([name]))
                .description(Some("The event's name.")),
        )
        .required("event")
        .property(
            "id",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(64))
                .description(Some(
                    "The new `version`: send it back as `Last-Event-ID` to resume.",
                )),
        )
        .required("id")
        .property("data", data)
        .required("data")
        .into()
}

impl PartialSchema for LeaseEvent {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new()
            .description(Some(
                "One server-sent event of a lease's stream, by its `event` name: `state` first, \
                 then one per change. Each carries `id` (the new `version`) and `data` (the new \
                 state as JSON).",
            ))
            .examples([json!({
                "event": "acquired",
                "id": "12.1",
                "data": "{\"outcome\":\"inspected\",\"held\":true,\"version\":\"12.1\",\"holders\":1,\"remainingMs\":29998,\"fencingToken\":1764686400000000,\"holder\":\"worker-7:8080\",\"ttlMs\":30000,\"acquiredAt\":\"2026-12-03T14:55:00.123Z\",\"renewedAt\":\"2026-12-03T14:55:00.123Z\"}",
            })]);
        for (name, what) in lease_events() {
            one_of = one_of.item(event_schema(name, what));
        }
        RefOr::T(Schema::OneOf(one_of.build()))
    }
}

impl ToSchema for LeaseEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("LeaseEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Inspected::name().into_owned(), Inspected::schema()));
        <Inspected as ToSchema>::schemas(schemas);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_the_stream_sends_has_its_own_schema() {
        let schema = serde_json::to_value(LeaseEvent::schema()).expect("schema");
        let names: Vec<&str> = schema["oneOf"]
            .as_array()
            .expect("oneOf")
            .iter()
            .map(|s| {
                assert_eq!(s["required"], json!(["event", "id", "data"]));
                assert_eq!(s["properties"]["data"]["type"], "string");
                assert_eq!(
                    s["properties"]["data"]["contentMediaType"],
                    "application/json"
                );
                assert_eq!(
                    s["properties"]["data"]["contentSchema"]["$ref"],
                    "#/components/schemas/Inspected"
                );
                s["properties"]["event"]["enum"][0].as_str().expect("name")
            })
            .collect();
        assert_eq!(
            names,
            [
                "state",
                "acquired",
                "released",
                "expired",
                "holder_changed",
                "revoked"
            ]
        );
    }
}
