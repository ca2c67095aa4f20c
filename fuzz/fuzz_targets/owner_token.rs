//! `OwnerToken::parse`: never panics; accepts exactly 32 characters of
//! base64url; the secret never shows in `Debug` or `Display`.
#![no_main]

use leasehold::domain::OwnerToken;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let rule = s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match OwnerToken::parse(s) {
        Ok(t) => {
            assert!(rule, "accepted {s:?}");
            assert_eq!(t.expose(), s);
            assert!(!format!("{t:?}").contains(s));
            assert!(!t.to_string().contains(s));
            assert_eq!(OwnerToken::parse(t.expose()), Ok(t));
        }
        Err(_) => assert!(!rule, "rejected {s:?}"),
    }
});
