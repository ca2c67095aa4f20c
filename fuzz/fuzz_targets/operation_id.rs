//! `OperationId::parse`: never panics; accepts exactly 1–128 characters of
//! `[A-Za-z0-9._~-]`; display → parse round-trips.
#![no_main]

use leasehold::domain::OperationId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let rule = (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_~".contains(&b));
    match OperationId::parse(s) {
        Ok(op) => {
            assert!(rule, "accepted {s:?}");
            assert_eq!(OperationId::parse(&op.to_string()), Ok(op));
        }
        Err(_) => assert!(!rule, "rejected {s:?}"),
    }
});
