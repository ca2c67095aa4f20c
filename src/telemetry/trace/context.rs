//! W3C Trace Context: parsing an incoming `traceparent` / `tracestate`
//! pair, and making trace and span ids.
//!
//! An invalid header is ignored (the request starts a trace of its own),
//! never an error: tracing must not turn a good request into a bad one.

use std::sync::atomic::{AtomicU64, Ordering};

/// A 16-byte trace id, never all zeros.
pub type TraceId = [u8; 16];
/// An 8-byte span id, never all zeros.
pub type SpanId = [u8; 8];

/// What a valid incoming `traceparent` (and its `tracestate`) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    /// The caller's trace.
    pub trace_id: TraceId,
    /// The caller's span: the request span's parent.
    pub span_id: SpanId,
    /// The caller's `sampled` flag.
    pub sampled: bool,
    /// The caller's `tracestate`, when it is well formed.
    pub trace_state: Option<String>,
}

/// Parses `traceparent` (and `tracestate`, kept only with a valid
/// `traceparent`). `None` for anything the W3C Trace Context level 1 text
/// calls invalid: wrong lengths, upper-case or non-hex digits, version
/// `ff`, all-zero ids, or (for version 00) trailing data.
pub fn parse(traceparent: &[u8], tracestate: Option<&[u8]>) -> Option<Parent> {
    // version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 = 55.
    if traceparent.len() < 55 {
        return None;
    }
    let version = hex_byte(&traceparent[0..2])?;
    if version == 0xff || (version == 0 && traceparent.len() != 55) {
        return None;
    }
    // A later version may append fields, after a '-'.
    if traceparent.len() > 55 && traceparent[55] != b'-' {
        return None;
    }
    if traceparent[2] != b'-' || traceparent[35] != b'-' || traceparent[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    for (i, byte) in trace_id.iter_mut().enumerate() {
        *byte = hex_byte(&traceparent[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span_id = [0u8; 8];
    for (i, byte) in span_id.iter_mut().enumerate() {
        *byte = hex_byte(&traceparent[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&traceparent[53..55])?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id,
        span_id,
        sampled: flags & 1 == 1,
        trace_state: tracestate.and_then(valid_trace_state),
    })
}

/// A `tracestate` worth passing on: at most 512 printable ASCII bytes
/// (the header's bound; its members are not checked one by one).
fn valid_trace_state(value: &[u8]) -> Option<String> {
    let ok =
        !value.is_empty() && value.len() <= 512 && value.iter().all(|b| (0x20..0x7f).contains(b));
    ok.then(|| String::from_utf8_lossy(value).into_owned())
}

/// Two lower-case hex digits.
fn hex_byte(pair: &[u8]) -> Option<u8> {
    fn digit(d: u8) -> Option<u8> {
        match d {
            b'0'..=b'9' => Some(d - b'0'),
            b'a'..=b'f' => Some(d - b'a' + 10),
            _ => None,
        }
    }
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// Lower-case hex, as OTLP/JSON writes ids.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xf)] as char);
    }
    out
}

/// Trace and span ids: SplitMix64 over a counter from a random seed. Each
/// id is distinct within the process's run and unpredictable enough for
/// tracing (ids are not secrets), without a system call per request.
pub struct Ids {
    seed: u64,
    counter: AtomicU64,
}

impl Ids {
    /// A generator with a fresh random seed.
    pub fn new() -> Self {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Self {
            seed: u64::from_le_bytes(seed),
            counter: AtomicU64::new(1),
        }
    }

    fn next(&self) -> u64 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut z = self
            .seed
            .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        match z ^ (z >> 31) {
            0 => 1,
            id => id,
        }
    }

    /// A new span id.
    pub fn span_id(&self) -> SpanId {
        self.next().to_be_bytes()
    }

    /// A new trace id.
    pub fn trace_id(&self) -> TraceId {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next().to_be_bytes());
        id[8..].copy_from_slice(&self.next().to_be_bytes());
        id
    }
}

impl Default for Ids {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read() {
        let parent = parse(GOOD.as_bytes(), Some(b"congo=t61rcWkgMzE")).expect("valid");
        assert_eq!(hex(&parent.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&parent.span_id), "00f067aa0ba902b7");
        assert!(parent.sampled);
        assert_eq!(parent.trace_state.as_deref(), Some("congo=t61rcWkgMzE"));
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!parse(unsampled.as_bytes(), None).expect("valid").sampled);
        // A later version may carry more fields.
        let later = GOOD.replacen("00-", "01-", 1) + "-what-comes-next";
        assert!(parse(later.as_bytes(), None).is_some());
    }

    #[test]
    fn an_invalid_traceparent_is_ignored() {
        let bad = [
            "",
            "garbage",
            &GOOD.to_uppercase(),
            &GOOD.replacen("00-", "ff-", 1),
            &(GOOD.to_owned() + "-extra"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ];
        for value in bad {
            assert_eq!(parse(value.as_bytes(), None), None, "{value}");
        }
        let with_bad_state = parse(GOOD.as_bytes(), Some(b"a=\x01")).expect("valid parent");
        assert_eq!(with_bad_state.trace_state, None);
    }

    #[test]
    fn ids_are_distinct_and_never_zero() {
        let ids = Ids::new();
        let spans: std::collections::HashSet<SpanId> = (0..10_000).map(|_| ids.span_id()).collect();
        assert_eq!(spans.len(), 10_000);
        assert!(!spans.contains(&[0; 8]));
        assert_ne!(ids.trace_id(), ids.trace_id());
    }
}
