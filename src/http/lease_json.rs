//! The lease answers (`acquired`, `replayed_same_operation`, `renewed`)
//! written straight into the response buffer, member by member: names as
//! literals, numbers by hand, strings escaped only when they must be. The
//! same bytes as serde_json writes from the derived `Serialize` (the tests
//! below hold the two together, member for member), for about a third of
//! its cost: serde_json escapes every member name and value byte by byte.

use super::verb::Verb;
use crate::domain::{AcquireOutcome, Guarantee, Lease, RenewOutcome, StoreTime};

/// Whether a verb's answer is written here (a new verb must decide: the
/// match is exhaustive). The others' answers are serde's.
pub(super) const fn written_here(verb: Verb) -> bool {
    match verb {
        Verb::Acquire | Verb::Renew => true,
        Verb::Release | Verb::Inspect => false,
    }
}

/// Writes an acquire's answer when it carries a lease; `Ok(false)` leaves
/// the other outcomes to serde.
pub(super) fn acquire(outcome: &AcquireOutcome, out: &mut Vec<u8>) -> serde_json::Result<bool> {
    if !written_here(Verb::Acquire) {
        return Ok(false);
    }
    match outcome {
        AcquireOutcome::Acquired { lease, waited_ms } => {
            out.extend_from_slice(br#"{"outcome":"acquired","lease":"#);
            write_lease(lease, out)?;
            if let Some(ms) = waited_ms {
                out.extend_from_slice(br#","waitedMs":"#);
                number(*ms, out);
            }
            out.push(b'}');
            Ok(true)
        }
        AcquireOutcome::ReplayedSameOperation { lease } => {
            out.extend_from_slice(br#"{"outcome":"replayed_same_operation","lease":"#);
            write_lease(lease, out)?;
            out.push(b'}');
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Writes a renew's answer when it carries a lease; `Ok(false)` leaves
/// `lost` to serde.
pub(super) fn renew(outcome: &RenewOutcome, out: &mut Vec<u8>) -> serde_json::Result<bool> {
    if !written_here(Verb::Renew) {
        return Ok(false);
    }
    match outcome {
        RenewOutcome::Renewed { lease } => {
            out.extend_from_slice(br#"{"outcome":"renewed","lease":"#);
            write_lease(lease, out)?;
            out.push(b'}');
            Ok(true)
        }
        RenewOutcome::Lost { .. } => Ok(false),
    }
}

/// A [`Lease`], in the derived `Serialize`'s member order, leaving out
/// what it skips (`None`).
fn write_lease(lease: &Lease, out: &mut Vec<u8>) -> serde_json::Result<()> {
    // Destructured, so a new member fails to compile here until written.
    let Lease {
        purpose,
        digest,
        fencing_token,
        ttl_ms,
        remaining_ms,
        holder,
        acquired_at,
        renewed_at,
        max_hold_ms,
        hold_ends_at,
        guarantee,
        replication,
    } = lease;
    // `Purpose` and `ResourceDigest` only ever hold `[a-z0-9.-]` (their
    // parsers say so): nothing in them to escape.
    out.extend_from_slice(br#"{"purpose":"#);
    plain(purpose.as_str(), out);
    out.extend_from_slice(br#","digest":"#);
    plain(digest.as_str(), out);
    out.extend_from_slice(br#","fencingToken":"#);
    number(*fencing_token, out);
    out.extend_from_slice(br#","ttlMs":"#);
    number(*ttl_ms, out);
    out.extend_from_slice(br#","remainingMs":"#);
    number(*remaining_ms, out);
    if let Some(holder) = holder {
        out.extend_from_slice(br#","holder":"#);
        string(holder.as_str(), out)?;
    }
    out.extend_from_slice(br#","acquiredAt":"#);
    time(*acquired_at, out);
    out.extend_from_slice(br#","renewedAt":"#);
    time(*renewed_at, out);
    if let Some(ms) = max_hold_ms {
        out.extend_from_slice(br#","maxHoldMs":"#);
        number(*ms, out);
    }
    if let Some(at) = hold_ends_at {
        out.extend_from_slice(br#","holdEndsAt":"#);
        time(*at, out);
    }
    out.extend_from_slice(match guarantee {
        Guarantee::Fenced => br#","guarantee":"fenced""#,
    });
    if let Some(r) = replication {
        out.extend_from_slice(br#","replication":{"acknowledged":"#);
        number(u64::from(r.acknowledged), out);
        out.extend_from_slice(br#","required":"#);
        number(u64::from(r.required), out);
        out.push(b'}');
    }
    out.push(b'}');
    Ok(())
}

/// A time as its derived `Serialize` writes it: `YYYY-MM-DDTHH:MM:SS.mmmZ`
/// holds nothing to escape.
fn time(at: StoreTime, out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(&at.ascii());
    out.push(b'"');
}

/// A JSON string that holds nothing to escape.
fn plain(s: &str, out: &mut Vec<u8>) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// A JSON string: as it is when nothing in it needs escaping (what
/// serde_json escapes: `"`, `\` and control characters below U+0020),
/// else through serde_json.
fn string(s: &str, out: &mut Vec<u8>) -> serde_json::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        plain(s, out);
        Ok(())
    } else {
        serde_json::to_writer(out, s)
    }
}

/// A number in decimal, as serde_json writes a `u64` (with the same
/// `itoa`, two digits per step).
fn number(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{HolderLabel, Purpose, Replication, ResourceDigest, StoreTime};

    fn lease(variant: usize) -> Lease {
        let holder = match variant % 4 {
            0 => None,
            1 => Some("worker-7:8080"),
            2 => Some("wörker \"7\" \\ ü 😀"),
            _ => Some("a/b <c> & 'd' é"),
        };
        let bounded = variant % 3 == 1;
        Lease {
            purpose: Purpose::parse("invoice-export").expect("purpose"),
            digest: ResourceDigest::of_raw_id("raw id"),
            fencing_token: [1, 1_764_686_400_000_000, u64::MAX][variant % 3],
            ttl_ms: [30_000, 20, 0][variant % 3],
            remaining_ms: [29_999, 0, 10][variant % 3],
            holder: holder.and_then(|h| HolderLabel::parse(h).ok()),
            acquired_at: StoreTime(1_764_686_400_123),
            renewed_at: StoreTime(1_764_686_410_456 + variant as u64),
            max_hold_ms: bounded.then_some(3_600_000),
            hold_ends_at: bounded.then_some(StoreTime(1_764_690_000_123)),
            guarantee: Guarantee::Fenced,
            replication: (variant % 2 == 1).then_some(Replication {
                acknowledged: 0,
                required: 2,
            }),
        }
    }

    fn written(f: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<bool>) -> String {
        let mut out = Vec::new();
        assert!(f(&mut out).expect("written"), "not written by hand");
        String::from_utf8(out).expect("UTF-8")
    }

    /// Every member, present and absent, with strings that need escaping
    /// and the extremes of the numbers: byte for byte what serde writes.
    #[test]
    fn lease_answers_are_the_bytes_serde_writes() {
        for variant in 0..24 {
            let lease = lease(variant);
            if variant % 4 >= 2 {
                assert!(lease.holder.is_some(), "label {variant} must parse");
            }
            for waited_ms in [None, Some(0), Some(1234)] {
                let outcome = AcquireOutcome::Acquired {
                    lease: lease.clone(),
                    waited_ms,
                };
                let serde = serde_json::to_string(&outcome).expect("serde");
                assert_eq!(written(|out| acquire(&outcome, out)), serde);
            }
            let replayed = AcquireOutcome::ReplayedSameOperation {
                lease: lease.clone(),
            };
            let serde = serde_json::to_string(&replayed).expect("serde");
            assert_eq!(written(|out| acquire(&replayed, out)), serde);
            let renewed = RenewOutcome::Renewed { lease };
            let serde = serde_json::to_string(&renewed).expect("serde");
            assert_eq!(written(|out| renew(&renewed, out)), serde);
        }
    }

    #[test]
    fn other_outcomes_are_left_to_serde() {
        let mut out = Vec::new();
        let contended = AcquireOutcome::Contended {
            retry_after_ms: 10,
            waited_ms: None,
            reason: None,
        };
        assert!(!acquire(&contended, &mut out).expect("no error"));
        let lost = RenewOutcome::Lost {
            reason: crate::domain::LostReason::Absent,
        };
        assert!(!renew(&lost, &mut out).expect("no error"));
        assert!(out.is_empty());
    }
}
