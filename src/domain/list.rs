//! Listing a purpose's leases: the page size, the opaque cursor that
//! resumes a listing, and the `listed` answer. No I/O here.
//!
//! The cursor is base64url (no padding) of a short text that says where the
//! listing stands and for which purpose; it is parsed, never trusted: a
//! cursor that does not decode to exactly one of the forms below, or that
//! was issued for another purpose, is refused (400 `invalid_request`).
//!
//! | form | store | meaning |
//! | --- | --- | --- |
//! | `<purpose>/a/<digest>` | embedded | resume after this digest (digest order) |
//! | `<purpose>/s/<shard>/<node>/<scan>[/<digest>...]` | Redis | first read the digests listed (keys found by the last page beyond its limit), then resume `SCAN <scan>` on the node whose `run_id` starts with `<node>` (`0`: start that node's SCAN afresh); `<shard>` is the lowest hash slot of that Cluster master (0 elsewhere), 16384 when every node is done |

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;
use utoipa::ToSchema;

use super::bounds::Mode;
use super::names::{HolderLabel, NameError, Purpose, ResourceDigest};
use super::outcome::PermitView;
use super::time::StoreTime;

/// Leases per page: 1–1000, 100 when not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimit(u16);

impl ListLimit {
    /// The largest page.
    pub const MAX: u16 = 1000;
    /// The page size when the request names none.
    pub const DEFAULT: ListLimit = ListLimit(100);

    /// Parses a decimal page size in 1..=1000.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        const RULE: &str = "must be a whole number from 1 to 1000";
        if raw.is_empty() || raw.len() > 4 || !raw.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NameError(RULE));
        }
        match raw.parse::<u16>() {
            Ok(n) if (1..=Self::MAX).contains(&n) => Ok(Self(n)),
            _ => Err(NameError(RULE)),
        }
    }

    /// The page size.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

/// Where a Redis SCAN stands: on which node, at which SCAN cursor, and
/// which keys found already still wait to be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPosition {
    /// Cluster: the lowest hash slot of the master being scanned (masters
    /// are visited in the order of their lowest slot). 0 elsewhere;
    /// [`ScanPosition::DONE`] when every node has been scanned.
    pub shard: u16,
    /// The first hex digits of the scanned server's `run_id` (a new
    /// process, e.g. after a failover or restart, has another: its SCAN
    /// cursors mean nothing for the old one's).
    pub node: String,
    /// The SCAN cursor to send next; 0 starts the shard's SCAN afresh.
    pub scan: u64,
    /// Resources the last page found beyond its limit (one SCAN call
    /// returns whole hash buckets): read first by the next page.
    pub pending: Vec<ResourceDigest>,
}

impl ScanPosition {
    /// The `shard` of a listing whose SCANs are all done.
    pub const DONE: u16 = 16384;
    /// Most resources a cursor carries over to the next page.
    pub const MAX_PENDING: usize = 64;
}

/// A position in a listing, as a store resumes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListCursor {
    /// Embedded store: the leases after this digest.
    After(ResourceDigest),
    /// Redis: a SCAN in progress.
    Scan(ScanPosition),
}

/// Longest cursor accepted, in characters (64 pending digests and the rest).
const MAX_CURSOR_LEN: usize = 6144;
/// Longest node fingerprint kept from a `run_id`.
pub const NODE_ID_LEN: usize = 16;

impl ListCursor {
    /// The opaque text handed to the client for `purpose`.
    pub fn encode(&self, purpose: &Purpose) -> String {
        let text = match self {
            ListCursor::After(digest) => format!("{purpose}/a/{digest}"),
            ListCursor::Scan(p) => {
                let mut text = format!("{purpose}/s/{}/{}/{}", p.shard, p.node, p.scan);
                for digest in &p.pending {
                    text.push('/');
                    text.push_str(digest.as_str());
                }
                text
            }
        };
        URL_SAFE_NO_PAD.encode(text)
    }

    /// Parses a cursor a client sent back for a listing of `purpose`.
    pub fn parse(raw: &str, purpose: &Purpose) -> Result<Self, NameError> {
        const MALFORMED: &str = "is not a cursor this service issued (send back nextCursor unchanged, or leave it out to start over)";
        if raw.is_empty() || raw.len() > MAX_CURSOR_LEN {
            return Err(NameError(MALFORMED));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(raw)
            .map_err(|_| NameError(MALFORMED))?;
        let text = String::from_utf8(bytes).map_err(|_| NameError(MALFORMED))?;
        let mut parts = text.split('/');
        let (Some(owner), Some(kind)) = (parts.next(), parts.next()) else {
            return Err(NameError(MALFORMED));
        };
        if Purpose::parse(owner).is_err() {
            return Err(NameError(MALFORMED));
        }
        if owner != purpose.as_str() {
            return Err(NameError(
                "belongs to a listing of another purpose (start over without a cursor)",
            ));
        }
        let rest: Vec<&str> = parts.collect();
        match (kind, rest.as_slice()) {
            ("a", [digest]) => ResourceDigest::parse(digest)
                .map(ListCursor::After)
                .map_err(|_| NameError(MALFORMED)),
            ("s", [shard, node, scan, pending @ ..]) => {
                let shard = decimal(shard)
                    .and_then(|s| u16::try_from(s).ok())
                    .filter(|s| *s <= ScanPosition::DONE);
                let scan = decimal(scan);
                let node_ok = !node.is_empty()
                    && node.len() <= NODE_ID_LEN
                    && node
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                let pending = (pending.len() <= ScanPosition::MAX_PENDING)
                    .then(|| {
                        pending
                            .iter()
                            .map(|d| ResourceDigest::parse(d).ok())
                            .collect::<Option<Vec<_>>>()
                    })
                    .flatten();
                match (shard, scan, node_ok, pending) {
                    (Some(shard), Some(scan), true, Some(pending)) => {
                        Ok(ListCursor::Scan(ScanPosition {
                            shard,
                            node: (*node).to_owned(),
                            scan,
                            pending,
                        }))
                    }
                    _ => Err(NameError(MALFORMED)),
                }
            }
            _ => Err(NameError(MALFORMED)),
        }
    }
}

/// A canonical decimal `u64` (no sign, no leading zeros but `0` itself).
fn decimal(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.len() <= 20
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// One held resource of a listing: the public record of its holder (the
/// oldest, when several hold it, as inspect shows it). Never an owner token
/// or operation id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListedLease {
    /// The resource digest.
    #[schema(value_type = String, pattern = "^v1\\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")]
    pub digest: ResourceDigest,
    /// The holder's public label, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "worker-7:8080")]
    pub holder: Option<HolderLabel>,
    /// The holder's fencing token.
    #[schema(
        minimum = 1,
        maximum = 9007199254740991_i64,
        example = 1764686400000000_i64
    )]
    pub fencing_token: u64,
    /// The store's remaining time to live when this page was read.
    #[schema(minimum = 0, example = 12000)]
    pub remaining_ms: u64,
    /// The TTL the holder was granted or last renewed with.
    #[schema(minimum = 1, maximum = 604800000, example = 30000)]
    pub ttl_ms: u64,
    /// When the holder acquired it (RFC 3339, UTC, ms; the store's clock).
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T14:55:00.123Z")]
    pub acquired_at: StoreTime,
    /// When the holder last renewed it (the acquisition, if never).
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T14:55:18.120Z")]
    pub renewed_at: StoreTime,
    /// How many hold it now (more than one: a counting or shared lease).
    #[schema(minimum = 1, maximum = 10000, example = 1)]
    pub holders: u32,
    /// The limit its holders agreed on (1: a plain lease).
    #[schema(minimum = 1, maximum = 10000, example = 1)]
    pub limit: u32,
    /// The holders' mode.
    pub mode: Mode,
    /// The holders, oldest first, at most 100 of them (`holders` counts
    /// them all); present only when more than one holds it (the top-level
    /// members are the first one's).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub permits: Option<Vec<PermitView>>,
    /// The session the (first) holder's lease is on (docs/sessions.md),
    /// when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = r"^s1\.[0-9a-f]{32}$", nullable = false)]
    pub session: Option<super::SessionId>,
}

/// One page of a purpose's leases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename = "listed", rename_all = "camelCase")]
pub struct Listing {
    /// The leases of this page (possibly fewer than the limit, even none,
    /// when the page's work budget ran out first).
    pub leases: Vec<ListedLease>,
    /// Where the next page starts; absent when the listing is complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl super::OutcomeName for Listing {
    fn outcome_name(&self) -> &'static str {
        "listed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purpose(p: &str) -> Purpose {
        Purpose::parse(p).expect("purpose")
    }

    #[test]
    fn limits_are_1_to_1000() {
        assert_eq!(ListLimit::parse("1").map(ListLimit::get), Ok(1));
        assert_eq!(ListLimit::parse("1000").map(ListLimit::get), Ok(1000));
        for bad in ["0", "1001", "", "-1", "+5", "1.0", " 5", "99999", "abc"] {
            assert!(ListLimit::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cursors_round_trip_and_are_bound_to_their_purpose() {
        let p = purpose("invoice-export");
        let after = ListCursor::After(ResourceDigest::of_raw_id("x"));
        let scan = ListCursor::Scan(ScanPosition {
            shard: 5461,
            node: "0123456789abcdef".into(),
            scan: 1_234_567,
            pending: vec![],
        });
        let pending = ListCursor::Scan(ScanPosition {
            shard: ScanPosition::DONE,
            node: "0".into(),
            scan: 0,
            pending: (0..ScanPosition::MAX_PENDING)
                .map(|i| ResourceDigest::of_raw_id(&i.to_string()))
                .collect(),
        });
        for c in [after, scan, pending] {
            let text = c.encode(&p);
            assert!(text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            assert_eq!(ListCursor::parse(&text, &p), Ok(c.clone()));
            assert!(ListCursor::parse(&text, &purpose("other")).is_err());
        }
    }

    #[test]
    fn forged_cursors_are_refused() {
        let p = purpose("p");
        let enc = |s: &str| URL_SAFE_NO_PAD.encode(s);
        for bad in [
            String::new(),
            "!!!".into(),
            "a".repeat(600),
            enc("p"),
            enc("p/a"),
            enc("p/a/v1.zz"),
            enc("p/s/16385/abc/5"),
            enc("p/s/0/abc/5/v1.00"),
            enc("p/s/0/ABC/5"),
            enc("p/s/0//5"),
            enc("p/s/0/abc/05"),
            enc("p/s/0/abc/18446744073709551616"),
            enc("p/s/0/abc/5/6"),
            enc("P/s/0/abc/5"),
            enc("p/x/0"),
            URL_SAFE_NO_PAD.encode([0xff, 0xfe]),
        ] {
            assert!(ListCursor::parse(&bad, &p).is_err(), "{bad:?}");
        }
    }
}
