//! What a Redis reply means: the per-call nonce that ties a script reply to
//! its request, and the table of error codes that are definite refusals.
//!
//! A multiplexed connection pairs replies with requests by order alone, so a
//! reply lost on the way (a desynchronising proxy, a bug anywhere between)
//! shifts every later reply onto the wrong caller. Every lease script
//! therefore echoes the nonce it was called with as the first element of
//! its reply; [`open`] refuses a reply that carries another one, and the
//! caller answers `indeterminate` and drops the connection.
//!
//! Redis' own error replies carry no nonce. They are refusals (nothing was
//! written: the scripts run every write under `redis.pcall` and return a
//! refusal *inside* a tagged reply, so an untagged error reply comes from
//! before the script wrote anything), but whose they are is proved by a
//! `PING <nonce>` right behind them on the same connection (see `exec`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;

use redis::Value;

use crate::store::StoreError;

/// The status a script returns when Redis refused one of its writes;
/// the element after the tag is Redis' error message.
pub const REFUSED: i64 = -9;

pub(super) const READONLY: &str = "Redis answered READONLY";
pub(super) const CLUSTER_DOWN: &str = "Redis Cluster is down";
pub(super) const TRY_AGAIN: &str = "Redis Cluster asked to try again";
pub(super) const MASTER_DOWN: &str = "Redis answered MASTERDOWN";
pub(super) const CONNECT_FAILED: &str = "cannot connect to Redis";
pub(super) const NOT_MASTER: &str = "the resolved Redis node is not a master";
pub(super) const CONNECTION_LOST: &str = "connection failed with the command in flight";
pub(super) const DESYNC: &str =
    "a reply that does not answer this request (connection out of step)";

/// Why Redis refused, by the error code (the first word of the error
/// message). Every code here is a refusal of the whole command: nothing of
/// it was applied.
pub fn refusal_reason(code: &str) -> &'static str {
    match code {
        "READONLY" => READONLY,
        "LOADING" => "Redis is loading its dataset",
        "MASTERDOWN" => MASTER_DOWN,
        "CLUSTERDOWN" => CLUSTER_DOWN,
        "TRYAGAIN" => TRY_AGAIN,
        "OOM" => "Redis is out of memory (maxmemory reached)",
        "NOREPLICAS" => "Redis has too few replicas to accept writes (min-replicas-to-write)",
        "MISCONF" => "Redis refuses writes after a failed save (stop-writes-on-bgsave-error)",
        "BUSY" => "Redis is busy running a script",
        "NOPERM" => "the Redis user lacks a permission",
        "NOAUTH" | "WRONGPASS" => "Redis refused the credentials",
        "WRONGTYPE" => "a key in the lease namespace holds another type",
        _ => "Redis refused the command",
    }
}

/// The error code of a message: its first word (`OOM command not allowed…`).
pub fn code_of(message: &str) -> &str {
    message.split_whitespace().next().unwrap_or("")
}

/// A per-call nonce: a 32-bit integer, sent as decimal text and echoed back
/// as an integer reply, which redis-rs parses without allocating. A reply
/// can only be mistaken for another request's on the same connection while
/// both are in flight, so uniqueness among the last 2^32 calls is plenty.
#[derive(Clone, Copy)]
pub struct Nonce {
    value: u32,
    text: [u8; 12],
    start: u8,
}

impl Nonce {
    fn new(value: u32) -> Self {
        let (text, start) = decimal(u64::from(value));
        Self { value, text, start }
    }

    /// The tag of status 1 made with this nonce (`nonce * 16 + 10`), in
    /// decimal: what a tagged script ([`super::evalsha::Script::tagged`])
    /// is sent instead of the nonce.
    pub fn tag_of_status_one(&self) -> TagText {
        let (text, start) = decimal(u64::from(self.value) * 16 + 10);
        TagText { text, start }
    }

    /// The decimal text sent to the script.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[usize::from(self.start)..]).unwrap_or("0")
    }

    /// The status a script packed with this nonce into the tag that leads
    /// its reply (`nonce * 16 + status + 9`), or `None` for a tag made with
    /// another nonce (or no tag).
    fn status_of(&self, item: &Value) -> Option<i64> {
        match item {
            Value::Int(tag) if *tag >= 0 && tag >> 4 == i64::from(self.value) => {
                Some((tag & 15) - 9)
            }
            _ => None,
        }
    }
}

/// `n` in decimal, right-aligned in the buffer, and where it starts
/// (12 digits: a nonce's tag, at most 2^36 + 10, fits).
fn decimal(mut n: u64) -> ([u8; 12], u8) {
    let mut text = [b'0'; 12];
    let mut at = text.len();
    loop {
        at -= 1;
        text[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    (text, at as u8)
}

/// A nonce's tag of status 1 as text ([`Nonce::tag_of_status_one`]).
pub struct TagText {
    text: [u8; 12],
    start: u8,
}

impl TagText {
    /// The decimal text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[usize::from(self.start)..]).unwrap_or("0")
    }
}

/// A fresh nonce for one script call: a per-process random start plus a
/// counter, so no two calls in flight share one.
pub fn next_nonce() -> Nonce {
    static NEXT: LazyLock<AtomicU32> = LazyLock::new(|| {
        let mut seed = [0u8; 4];
        // A fixed start is still unique within the process; randomness only
        // makes two processes' nonces unlikely to meet in a capture.
        let _ = getrandom::fill(&mut seed);
        AtomicU32::new(u32::from_le_bytes(seed))
    });
    Nonce::new(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// What a script reply says, once it is known to answer this request.
#[derive(Debug, PartialEq)]
pub enum Opened {
    /// The script's own answer: the items after the nonce.
    Answer(Vec<Value>),
    /// Redis refused one of the script's writes (nothing was written); the
    /// error code.
    Refused(String),
}

/// Checks that `reply` leads with a tag made from `nonce` and returns the
/// script's answer with the tag replaced by the plain status (`{status,
/// ...}`). `Err` means the reply belongs to another request.
///
/// An answer of integers only comes packed: one string of decimal integers
/// separated by single spaces (the scripts' `answer`), which is read here
/// as the array it stands for. redis-rs spends about 900 instructions on
/// each element of a reply, and the commonest answers (acquired, released,
/// refused) are three or four integers.
pub fn open(reply: Value, nonce: &Nonce) -> Result<Opened, ()> {
    let mut items = match reply {
        // A packed head and string items after it (a slim renew's answer,
        // lua/plain_renew.lua): read as the array they stand for.
        Value::Array(mut items) if matches!(items.first(), Some(Value::BulkString(_))) => {
            let Value::BulkString(packed) = items.remove(0) else {
                return Err(());
            };
            // One allocation: the words and the items after them.
            let words = packed.iter().filter(|&&b| b == b' ').count() + 1;
            let mut head = Vec::with_capacity(words + items.len());
            unpack_into(&packed, &mut head).ok_or(())?;
            head.append(&mut items);
            head
        }
        Value::Array(items) => items,
        Value::BulkString(packed) => unpack(&packed).ok_or(())?,
        _ => return Err(()),
    };
    let Some(first) = items.first_mut() else {
        return Err(());
    };
    let status = nonce.status_of(first).ok_or(())?;
    *first = Value::Int(status);
    if status == REFUSED {
        let message = match items.get(1) {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        return Ok(Opened::Refused(code_of(&message).to_owned()));
    }
    Ok(Opened::Answer(items))
}

/// The integers of a packed answer; `None` for anything else. By hand:
/// with `str::split` and `str::parse`, opening an acquired answer took
/// about 1 500 instructions, now about 1 100.
fn unpack(packed: &[u8]) -> Option<Vec<Value>> {
    let mut items = Vec::with_capacity(4);
    unpack_into(packed, &mut items)?;
    Some(items)
}

/// [`unpack`] into `items`.
fn unpack_into(packed: &[u8], items: &mut Vec<Value>) -> Option<()> {
    let (mut n, mut digits, mut negative) = (0i64, 0usize, false);
    // A space after the last word ends it as the others are ended.
    for &b in packed.iter().chain(std::iter::once(&b' ')) {
        match b {
            b'0'..=b'9' if digits < MAX_DIGITS => {
                n = n * 10 + i64::from(b - b'0');
                digits += 1;
            }
            b'-' if digits == 0 && !negative => negative = true,
            b' ' if digits > 0 => {
                items.push(Value::Int(if negative { -n } else { n }));
                (n, digits, negative) = (0, 0, false);
            }
            _ => return None,
        }
    }
    Some(())
}

/// Most digits of a packed integer: 18 cannot overflow an `i64`, and no
/// script answers with a larger number (times in ms, fencing tokens).
const MAX_DIGITS: usize = 18;

/// A tagged reply of a shape no script returns.
pub fn bad_reply() -> StoreError {
    StoreError::Indeterminate("unexpected reply shape from a lease script")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_with_this_nonce_opens() {
        let reply = Value::Array(vec![Value::Int(42 * 16 + 1 + 9), Value::Int(5)]);
        assert_eq!(
            open(reply, &Nonce::new(42)),
            Ok(Opened::Answer(vec![Value::Int(1), Value::Int(5)]))
        );
        let reply = Value::Array(vec![Value::Int(42 * 16 - 1 + 9)]);
        assert_eq!(
            open(reply, &Nonce::new(42)),
            Ok(Opened::Answer(vec![Value::Int(-1)]))
        );
    }

    #[test]
    fn a_packed_answer_opens_as_the_array_it_stands_for() {
        let tag = 42 * 16 + 1 + 9;
        assert_eq!(
            open(bulk(&format!("{tag} 7 1700000000000")), &Nonce::new(42)),
            Ok(Opened::Answer(vec![
                Value::Int(1),
                Value::Int(7),
                Value::Int(1_700_000_000_000)
            ]))
        );
        assert_eq!(
            open(bulk(&format!("{} -5 3", 42 * 16 + 9)), &Nonce::new(42)),
            Ok(Opened::Answer(vec![
                Value::Int(0),
                Value::Int(-5),
                Value::Int(3)
            ]))
        );
        // Not integers separated by single spaces: not an answer.
        for packed in [
            format!("{tag}  7"),
            format!("{tag} 7 "),
            format!("{tag} 7.5"),
            format!("{tag} 1e+14"),
            format!("{tag} x"),
            format!("{tag} -"),
            format!("{tag} 99999999999999999999"),
            String::new(),
        ] {
            assert_eq!(open(bulk(&packed), &Nonce::new(42)), Err(()), "{packed:?}");
        }
        // A packed head, then other items: one array.
        assert_eq!(
            open(
                Value::Array(vec![bulk(&format!("{tag} 7 9")), bulk("pod-1")]),
                &Nonce::new(42)
            ),
            Ok(Opened::Answer(vec![
                Value::Int(1),
                Value::Int(7),
                Value::Int(9),
                bulk("pod-1")
            ]))
        );
        assert_eq!(
            Nonce::new(42).tag_of_status_one().as_str(),
            (42 * 16 + 10).to_string()
        );
        assert_eq!(
            Nonce::new(u32::MAX).tag_of_status_one().as_str(),
            (u64::from(u32::MAX) * 16 + 10).to_string()
        );
        // Another request's tag.
        assert_eq!(
            open(bulk(&format!("{} 7", 41 * 16 + 10)), &Nonce::new(42)),
            Err(())
        );
    }

    #[test]
    fn another_requests_reply_is_refused() {
        for reply in [
            Value::Array(vec![Value::Int(41 * 16 + 10), Value::Int(1)]),
            Value::Array(vec![Value::Int(43 * 16 + 10), Value::Int(1)]),
            Value::Array(vec![Value::Int(-(42 * 16 + 10))]),
            Value::Array(vec![bulk("42"), Value::Int(1)]),
            Value::Array(vec![Value::Int(1), Value::Int(5)]),
            Value::Array(vec![]),
            Value::Int(42),
            bulk("42"),
            Value::Okay,
            Value::Nil,
        ] {
            assert_eq!(open(reply.clone(), &Nonce::new(42)), Err(()), "{reply:?}");
        }
    }

    #[test]
    fn nonces_print_as_decimal() {
        for n in [0u32, 7, 10, 1_234_567, u32::MAX] {
            assert_eq!(Nonce::new(n).as_str(), n.to_string());
        }
    }

    #[test]
    fn a_refusal_inside_the_script_is_read_with_its_code() {
        let reply = Value::Array(vec![
            Value::Int(7 * 16 + REFUSED + 9),
            bulk("OOM command not allowed when used memory > 'maxmemory'."),
        ]);
        assert_eq!(
            open(reply, &Nonce::new(7)),
            Ok(Opened::Refused("OOM".into()))
        );
        assert_eq!(
            refusal_reason("NOREPLICAS"),
            "Redis has too few replicas to accept writes (min-replicas-to-write)"
        );
        assert_eq!(refusal_reason("SOMETHINGNEW"), "Redis refused the command");
    }

    #[test]
    fn nonces_differ() {
        let a = next_nonce();
        let b = next_nonce();
        assert_ne!(a.as_str(), b.as_str());
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                any::<i64>().prop_map(Value::Int),
                proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::BulkString),
                "[ -~]{0,12}".prop_map(Value::SimpleString),
                Just(Value::Nil),
                Just(Value::Okay),
            ];
            leaf.prop_recursive(3, 24, 6, |inner| {
                proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
            })
        }

        proptest! {
            /// Any reply decodes without panicking, and opens only when it
            /// is an array led by exactly this call's nonce.
            #[test]
            fn only_a_reply_led_by_this_nonce_opens(reply in value(), n in any::<u32>()) {
                let nonce = Nonce::new(n);
                let led = matches!(&reply, Value::Array(items)
                    if matches!(items.first(), Some(Value::Int(t)) if *t >= 0 && t >> 4 == i64::from(n)));
                prop_assert_eq!(open(reply, &nonce).is_ok(), led);
            }

            /// A reply led by the nonce opens to exactly the items after it,
            /// or to a refusal when the script said so.
            #[test]
            fn the_status_and_the_rest_come_back(status in -9i64..=6, rest in proptest::collection::vec(value(), 0..6), n in any::<u32>()) {
                let mut items = vec![Value::Int(i64::from(n) * 16 + status + 9)];
                items.extend(rest.iter().cloned());
                let opened = open(Value::Array(items), &Nonce::new(n));
                if status == REFUSED {
                    prop_assert!(matches!(opened, Ok(Opened::Refused(_))));
                } else {
                    let mut want = vec![Value::Int(status)];
                    want.extend(rest.iter().cloned());
                    prop_assert_eq!(opened, Ok(Opened::Answer(want)));
                }
            }
        }
    }
}
