//! `http::extract::json_body` for every request body (attempt, acquire,
//! renew): never panics; a body is accepted only when it is a JSON object,
//! and a rejected one always records a problem; no error but for a wrong
//! content type.
//!
//! Input: a selector byte (which body type, which content type), then the
//! body.
#![no_main]

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use leasehold::http::attempts::AttemptBody;
use leasehold::http::extract::{self, Problems};
use leasehold::http::leases::{AcquireBody, RenewBody};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;

fn check<T: DeserializeOwned>(json: bool, body: &[u8]) -> Option<T> {
    let mut headers = HeaderMap::new();
    let content_type = if json {
        "application/json"
    } else {
        "text/plain"
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    let mut problems = Problems::default();
    match extract::json_body::<T>(
        &headers,
        Ok(Bytes::copy_from_slice(body)),
        16_384,
        &mut problems,
    ) {
        Ok(Some(value)) => {
            assert!(json);
            let v: serde_json::Value =
                serde_json::from_slice(body).expect("an accepted body is JSON");
            assert!(v.is_object(), "accepted a non-object");
            assert!(problems.finish().is_ok());
            Some(value)
        }
        Ok(None) => {
            assert!(json);
            assert!(problems.finish().is_err(), "rejected without a problem");
            None
        }
        Err(_) => {
            assert!(!json, "a JSON body was answered with an error");
            None
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let json = selector & 0x80 == 0;
    match selector % 3 {
        0 => {
            if let Some(b) = check::<AcquireBody>(json, body) {
                // Whole milliseconds only; the bounds are checked later.
                let _ = (b.ttl_ms, b.wait_ms);
            }
        }
        1 => {
            let _ = check::<RenewBody>(json, body).map(|b| b.ttl_ms);
        }
        _ => {
            let _ = check::<AttemptBody>(json, body).map(|b| b.operation_id);
        }
    }
});
