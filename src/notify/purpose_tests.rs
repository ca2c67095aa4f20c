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

#[test]
fn the_seen_purposes_keep_the_newest_when_full() {
    let hub = PurposeHub::default();
    let purpose = |i: usize| Purpose::parse(&format!("p-{i}")).expect("purpose");
    for i in 0..=SEEN_PURPOSES {
        hub.seen(&purpose(i));
    }
    hub.seen(&purpose(SEEN_PURPOSES)); // seen again: no change
    let seen = hub.seen_purposes();
    assert_eq!(seen.len(), SEEN_PURPOSES);
    assert!(!seen.contains(&"p-0".to_owned()), "the oldest is forgotten");
    assert!(
        seen.contains(&format!("p-{SEEN_PURPOSES}")),
        "the newest is kept"
    );
    assert!(seen.contains(&"p-1".to_owned()));
}
