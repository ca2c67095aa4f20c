//! Validating newtypes for every name a request carries.
//!
//! Handlers and stores never see an unchecked string: each type can only be
//! built through its `parse` function, which states the rule it enforces.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

/// Why a name was rejected; the message is safe to show to the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub &'static str);

/// What a lease is for, e.g. `invoice-export`: `^[a-z][a-z0-9-]{0,62}$`.
///
/// Shared text (`Arc<str>`), like [`ResourceDigest`]: a lease answer and
/// the request's resource hold the same name, so a clone is a reference
/// count, not an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Purpose(Arc<str>);

impl Purpose {
    /// The pattern a purpose must match (also published in the OpenAPI document).
    pub const PATTERN: &'static str = "^[a-z][a-z0-9-]{0,62}$";

    /// Parses a purpose.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let bytes = raw.as_bytes();
        let ok = !bytes.is_empty()
            && bytes.len() <= 63
            && bytes[0].is_ascii_lowercase()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
        if ok {
            Ok(Self(Arc::from(raw)))
        } else {
            Err(NameError(
                "must match ^[a-z][a-z0-9-]{0,62}$ (lowercase letter first, then up to 62 lowercase letters, digits or '-')",
            ))
        }
    }

    /// The purpose as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for Purpose {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl serde::Serialize for ResourceDigest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The resource, never its raw id: `v1.` + 64 lowercase hex of SHA-256 of the raw id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceDigest(Arc<str>);

impl ResourceDigest {
    /// The pattern a digest must match.
    pub const PATTERN: &'static str = "^v1\\.[0-9a-f]{64}$";

    /// Parses a digest; anything but `v1.<64 lowercase hex>` is rejected.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let ok = raw.len() == 67
            && raw.starts_with("v1.")
            && raw.as_bytes()[3..]
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
        if ok {
            Ok(Self(Arc::from(raw)))
        } else {
            Err(NameError(
                "must be 'v1.' followed by 64 lowercase hex digits (SHA-256 of the raw resource id; see `leasehold digest`)",
            ))
        }
    }

    /// Computes the digest of a raw resource id.
    pub fn of_raw_id(raw_id: &str) -> Self {
        let hash = Sha256::digest(raw_id.as_bytes());
        let mut out = String::with_capacity(67);
        out.push_str("v1.");
        for byte in hash {
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Self(Arc::from(out))
    }

    /// The digest as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for ResourceDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The caller's id for one unit of work: 1–128 chars of `[A-Za-z0-9._~-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperationId(String);

impl OperationId {
    /// The pattern an operation id must match.
    pub const PATTERN: &'static str = "^[A-Za-z0-9._~-]{1,128}$";

    /// Parses an operation id.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let ok = !raw.is_empty()
            && raw.len() <= 128
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'));
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(NameError("must be 1 to 128 characters of [A-Za-z0-9._~-]"))
        }
    }

    /// The operation id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A public label for whoever holds a lease (a pod name, `host:port`):
/// 1–256 characters, no control characters. Shown to anyone the purpose is
/// open to, so never a secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HolderLabel(String);

impl HolderLabel {
    /// Longest label, in characters.
    pub const MAX_CHARS: usize = 256;

    /// Parses a holder label.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let n = raw.chars().count();
        if n == 0 || n > Self::MAX_CHARS {
            return Err(NameError("must be 1 to 256 characters"));
        }
        if raw.chars().any(char::is_control) {
            return Err(NameError("must not contain control characters"));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The label as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for HolderLabel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for HolderLabel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&raw).map_err(|e| serde::de::Error::custom(e.0))
    }
}

/// A bearer secret naming the holder: 24 random bytes from the OS CSPRNG,
/// base64url without padding (32 characters).
///
/// `Debug` and `Display` print a redacted form; only [`OwnerToken::expose`]
/// gives the secret, and only the store and the attempt answer call it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// The pattern an owner token must match.
    pub const PATTERN: &'static str = "^[A-Za-z0-9_-]{32}$";

    /// Draws a fresh token from the operating system's CSPRNG.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 24];
        getrandom::fill(&mut bytes)?;
        Ok(Self(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        ))
    }

    /// Parses a token a caller sent back.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let ok = raw.len() == 32
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(NameError(
                "must be 32 characters of base64url (as returned by POST /attempts)",
            ))
        }
    }

    /// The secret itself. Never log or display the result.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerToken(<redacted>)")
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Owner token + operation id, created before the first acquire so that a
/// retry after a lost reply can be told apart from a new acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The bearer secret naming the holder.
    pub owner_token: OwnerToken,
    /// The caller's id for this unit of work.
    pub operation_id: OperationId,
}

/// A purpose and a resource digest: one lockable thing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceId {
    /// What the lease is for.
    pub purpose: Purpose,
    /// Which resource.
    pub digest: ResourceDigest,
}

impl ResourceId {
    /// `<purpose>:<digest>`, the part of every store key and wake-up message
    /// that names this resource.
    pub fn tag(&self) -> String {
        let (purpose, digest) = (self.purpose.as_str(), self.digest.as_str());
        let mut tag = String::with_capacity(purpose.len() + 1 + digest.len());
        tag.push_str(purpose);
        tag.push(':');
        tag.push_str(digest);
        tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_labels_are_1_to_256_characters_without_control_characters() {
        assert!(HolderLabel::parse("pod-7:8080").is_ok());
        assert!(HolderLabel::parse("ünïcode | pipes").is_ok());
        assert!(HolderLabel::parse(&"é".repeat(256)).is_ok());
        assert!(HolderLabel::parse(&"é".repeat(257)).is_err());
        assert!(HolderLabel::parse("").is_err());
        assert!(HolderLabel::parse("a\nb").is_err());
        assert!(HolderLabel::parse("a\u{7f}").is_err());
        let json: Result<HolderLabel, _> = serde_json::from_str("\"a\\tb\"");
        assert!(json.is_err());
    }

    #[test]
    fn purpose_accepts_the_documented_shape_only() {
        for ok in ["a", "invoice-export", "a1-b2", &"a".repeat(63)] {
            assert!(Purpose::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "-a", "A", "a_b", "a b", "é", &"a".repeat(64)] {
            assert!(Purpose::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn digest_is_sha256_hex_with_version_prefix() {
        let d = ResourceDigest::of_raw_id("order-42");
        assert_eq!(d.as_str().len(), 67);
        assert!(ResourceDigest::parse(d.as_str()).is_ok());
        assert_eq!(
            ResourceDigest::of_raw_id("abc").as_str(),
            "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        for bad in [
            "order-42",
            "v2.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "v1.BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
            "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a",
        ] {
            assert!(ResourceDigest::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn operation_id_bounds() {
        assert!(OperationId::parse("job-1.retry_2~x").is_ok());
        assert!(OperationId::parse(&"x".repeat(128)).is_ok());
        assert!(OperationId::parse(&"x".repeat(129)).is_err());
        assert!(OperationId::parse("").is_err());
        assert!(OperationId::parse("a:b").is_err());
    }

    #[test]
    fn owner_tokens_are_random_32_char_base64url_and_redacted() {
        let a = OwnerToken::generate().expect("csprng");
        let b = OwnerToken::generate().expect("csprng");
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 32);
        assert!(OwnerToken::parse(a.expose()).is_ok());
        assert!(!format!("{a:?}").contains(a.expose()));
        assert!(!format!("{a}").contains(a.expose()));
        assert!(OwnerToken::parse("short").is_err());
        assert!(OwnerToken::parse(&"+".repeat(32)).is_err());
    }
}
