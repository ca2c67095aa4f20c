//! `ListCursor::parse` and `ListLimit::parse`: never panic; a cursor that
//! parses is canonical (it encodes back to the text given), and is refused
//! for any other purpose; a page size is 1 to 4 digits worth 1 to 1000.
#![no_main]

use leasehold::domain::{ListCursor, ListLimit, Purpose};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (Ok(purpose), Ok(other)) = (Purpose::parse("invoice-export"), Purpose::parse("other"))
    else {
        return;
    };
    if let Ok(cursor) = ListCursor::parse(s, &purpose) {
        assert_eq!(cursor.encode(&purpose), s);
        assert!(ListCursor::parse(s, &other).is_err());
    }
    let rule = (1..=4).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_digit())
        && s.parse::<u32>().is_ok_and(|n| (1..=1000).contains(&n));
    assert_eq!(ListLimit::parse(s).is_ok(), rule, "{s:?}");
});
