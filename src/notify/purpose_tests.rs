//! Unit tests of the purpose hub's ids and event data.
use super::*;
use crate::notify::with_digest;

#[test]
fn ids_round_trip_and_foreign_ones_are_refused() {
    assert_eq!(
        parse_id(&event_id(0xdead_beef, 42)),
        Some((0xdead_beef, 42))
    );
    for bad in ["", "12.1", "deadbeef", "deadbeef-", "xyzxyzxy-1", "beef-1"] {
        assert_eq!(parse_id(bad), None, "{bad}");
    }
}

#[test]
fn the_digest_comes_first_in_the_data() {
    let digest = ResourceDigest::of_raw_id("x");
    let data = with_digest(&digest, r#"{"outcome":"inspected","held":false}"#);
    let value: serde_json::Value = serde_json::from_str(&data).expect("json");
    assert_eq!(value["digest"], digest.as_str());
    assert_eq!(value["held"], false);
}
