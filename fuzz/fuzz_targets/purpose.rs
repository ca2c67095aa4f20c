//! `Purpose::parse`: never panics; accepts exactly `^[a-z][a-z0-9-]{0,62}$`;
//! display → parse round-trips.
#![no_main]

use leasehold::domain::Purpose;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let rule = s.len() <= 63
        && s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    match Purpose::parse(s) {
        Ok(p) => {
            assert!(rule, "accepted {s:?}");
            assert_eq!(p.as_str(), s);
            assert_eq!(Purpose::parse(&p.to_string()), Ok(p));
        }
        Err(_) => assert!(!rule, "rejected {s:?}"),
    }
});
