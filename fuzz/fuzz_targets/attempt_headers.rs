//! `http::extract::attempt`, the `Lease-Owner-Token` / `Lease-Operation-Id`
//! headers: never panics; an attempt comes out only when both values parse,
//! and then with no problem recorded; anything else records a problem
//! (except both absent when not required).
//!
//! Input: flags byte (bit 0 required, bit 1 token present, bit 2 operation
//! present), then the token value, a 0xff separator, the operation value.
#![no_main]

use http::{HeaderMap, HeaderValue};
use leasehold::domain::{OperationId, OwnerToken};
use leasehold::http::extract::{self, Problems};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (token, op) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut headers = HeaderMap::new();
    let mut values = [None, None];
    for (i, (name, value, bit)) in [
        (extract::OWNER_TOKEN_HEADER, token, 2u8),
        (extract::OPERATION_ID_HEADER, op, 4u8),
    ]
    .into_iter()
    .enumerate()
    {
        if flags & bit == 0 {
            continue;
        }
        let Ok(v) = HeaderValue::from_bytes(value) else {
            return; // not something a client can send
        };
        values[i] = Some(v.to_str().ok().map(str::to_owned));
        headers.insert(name, v);
    }
    let required = flags & 1 == 1;
    let mut problems = Problems::default();
    let parsed = extract::attempt(&headers, required, &mut problems);
    let valid = matches!(&values[0], Some(Some(t)) if OwnerToken::parse(t).is_ok())
        && matches!(&values[1], Some(Some(o)) if OperationId::parse(o).is_ok());
    match parsed {
        Some(a) => {
            assert!(valid);
            assert!(problems.finish().is_ok());
            assert_eq!(
                Some(a.owner_token.expose()),
                values[0].clone().flatten().as_deref()
            );
        }
        None if values.iter().all(Option::is_none) && !required => {
            assert!(problems.finish().is_ok());
        }
        None => {
            assert!(!valid);
            assert!(problems.finish().is_err());
        }
    }
});
