//! `ResourceDigest::parse`: never panics; accepts exactly `v1.` + 64
//! lowercase hex; display → parse round-trips; the digest of any raw id
//! (the input itself) parses.
#![no_main]

use leasehold::domain::ResourceDigest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let rule = s.len() == 67
        && s.starts_with("v1.")
        && s.bytes()
            .skip(3)
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    match ResourceDigest::parse(s) {
        Ok(d) => {
            assert!(rule, "accepted {s:?}");
            assert_eq!(ResourceDigest::parse(&d.to_string()), Ok(d));
        }
        Err(_) => assert!(!rule, "rejected {s:?}"),
    }
    let of = ResourceDigest::of_raw_id(s);
    assert_eq!(ResourceDigest::parse(of.as_str()), Ok(of));
});
