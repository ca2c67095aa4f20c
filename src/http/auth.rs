//! Optional API keys: `Authorization: Bearer <key>`, each key allowed a set
//! of purposes. Keys are kept only as SHA-256 digests, never logged.

use std::collections::{HashMap, HashSet};

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};

use super::problem::ApiError;
use crate::domain::Purpose;

/// Which purposes a key may use.
#[derive(Debug, Clone)]
enum Allowed {
    Any,
    Only(HashSet<String>),
}

/// One key's grants: its purposes and whether it may read `/metrics`.
#[derive(Debug, Clone)]
struct Grant {
    purposes: Allowed,
    metrics: bool,
}

/// The configured keys.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    keys: HashMap<[u8; 32], Grant>,
}

/// Why an API keys file was rejected (never quotes a key). The setting's
/// name is added by whoever reports it.
#[derive(Debug)]
pub struct ApiKeysError {
    /// 1-based; 0 for the file as a whole.
    line: usize,
    reason: &'static str,
}

impl std::fmt::Display for ApiKeysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => f.write_str(self.reason),
            n => write!(f, "line {n}: {}", self.reason),
        }
    }
}

impl std::error::Error for ApiKeysError {}

/// The line format, for error messages.
const FORMAT: &str = "expected '<key> <purpose>[,<purpose>...]|*|- [write|metrics[,...]]'";

impl ApiKeys {
    /// Parses one key per line: `<key> <purposes> [<scopes>]`. `<purposes>`
    /// is a comma-separated list, `*` (every purpose) or `-` (none);
    /// `<scopes>` a comma-separated list of `write` (acquire, renew,
    /// release, inspect, list, watch on its purposes: the default, and what
    /// every line without scopes means) and `metrics` (`/metrics` on the API
    /// listener). A `#` at the start of a line or after white space starts a
    /// comment; inside a key it is part of the key. A file that holds no
    /// key is an error (it would open the API by accident).
    pub fn parse(text: &str) -> Result<Self, ApiKeysError> {
        let mut keys = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = strip_comment(line).trim();
            if line.is_empty() {
                continue;
            }
            let err = |reason| ApiKeysError {
                line: i + 1,
                reason,
            };
            let mut parts = line.split_whitespace();
            let (Some(key), Some(purposes), scopes, None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(err(FORMAT));
            };
            if key.len() < 16 {
                return Err(err("keys must be at least 16 characters"));
            }
            let purposes = match purposes {
                "*" => Allowed::Any,
                "-" => Allowed::Only(HashSet::new()),
                list => {
                    let mut set = HashSet::new();
                    for p in list.split(',') {
                        Purpose::parse(p).map_err(|_| err("invalid purpose"))?;
                        set.insert(p.to_owned());
                    }
                    Allowed::Only(set)
                }
            };
            let mut metrics = false;
            for scope in scopes.unwrap_or("write").split(',') {
                match scope {
                    "write" => {}
                    "metrics" => metrics = true,
                    _ => return Err(err("unknown scope (known: write, metrics)")),
                }
            }
            keys.insert(hash(key), Grant { purposes, metrics });
        }
        if keys.is_empty() {
            return Err(ApiKeysError {
                line: 0,
                reason: "holds no key (comments and blank lines only); unset it to \
                         run an open API on purpose",
            });
        }
        Ok(Self { keys })
    }

    /// Whether any key is configured (otherwise the API is open).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// `keys`, or `open` when no key is configured (`/readyz`).
    pub fn mode(&self) -> &'static str {
        if self.enabled() {
            "keys"
        } else {
            "open"
        }
    }

    /// The purposes some key names explicitly: only these get their own
    /// metric label when keys are configured (`None`: the API is open, and
    /// the label cap alone bounds them).
    pub fn named_purposes(&self) -> Option<HashSet<String>> {
        if !self.enabled() {
            return None;
        }
        let mut named = HashSet::new();
        for grant in self.keys.values() {
            if let Allowed::Only(set) = &grant.purposes {
                named.extend(set.iter().cloned());
            }
        }
        Some(named)
    }

    fn lookup(&self, headers: &HeaderMap) -> Result<Option<&Grant>, ApiError> {
        if !self.enabled() {
            return Ok(None);
        }
        let key = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(ApiError::Unauthorized)?;
        self.keys
            .get(&hash(key.trim()))
            .map(Some)
            .ok_or(ApiError::Unauthorized)
    }

    /// 401 unless a valid key is sent (when keys are configured).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.lookup(headers).map(|_| ())
    }

    /// 401/403 unless the key may use `purpose`.
    pub fn authorize(&self, headers: &HeaderMap, purpose: &Purpose) -> Result<(), ApiError> {
        match self.lookup(headers)?.map(|g| &g.purposes) {
            None | Some(Allowed::Any) => Ok(()),
            Some(Allowed::Only(set)) if set.contains(purpose.as_str()) => Ok(()),
            Some(Allowed::Only(_)) => Err(ApiError::Forbidden),
        }
    }

    /// 401/403 unless the key has the `metrics` scope (when keys are
    /// configured): metrics name purposes and their traffic.
    pub fn authorize_metrics(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match self.lookup(headers)? {
            None => Ok(()),
            Some(grant) if grant.metrics => Ok(()),
            Some(_) => Err(ApiError::MissingScope("metrics")),
        }
    }
}

/// The line without its comment: from a `#` at the start or after white
/// space.
fn strip_comment(line: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_space {
            return &line[..i];
        }
        prev_space = c.is_whitespace();
    }
    line
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn bearer(key: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {key}")).expect("header"),
        );
        h
    }

    #[test]
    fn keys_are_scoped_to_purposes() {
        let keys = ApiKeys::parse(
            "# ops\nexport-key-0123456789 invoice-export,report\nadmin-key-0123456789 *\n",
        )
        .expect("parse");
        let p = Purpose::parse("invoice-export").expect("purpose");
        let q = Purpose::parse("other").expect("purpose");
        assert!(keys.authorize(&bearer("export-key-0123456789"), &p).is_ok());
        assert!(matches!(
            keys.authorize(&bearer("export-key-0123456789"), &q),
            Err(ApiError::Forbidden)
        ));
        assert!(keys.authorize(&bearer("admin-key-0123456789"), &q).is_ok());
        assert!(matches!(
            keys.authorize(&bearer("wrong-key-0123456789"), &p),
            Err(ApiError::Unauthorized)
        ));
        assert!(matches!(
            keys.authorize(&HeaderMap::new(), &p),
            Err(ApiError::Unauthorized)
        ));
        assert!(ApiKeys::parse("short p").is_err());
        assert!(ApiKeys::parse("k-0123456789abcdef p read").is_err());
        assert!(ApiKeys::default().authorize(&HeaderMap::new(), &p).is_ok());
    }

    #[test]
    fn a_file_without_a_key_is_refused() {
        for text in ["", "\n\n", "# only a comment\n   # another\n"] {
            let err = ApiKeys::parse(text).expect_err("no key must not open the API");
            assert!(err.to_string().contains("holds no key"), "{err}");
        }
    }

    #[test]
    fn a_hash_inside_a_key_is_part_of_it() {
        let keys = ApiKeys::parse("abc#def-0123456789 p # a comment\n").expect("parse");
        let p = Purpose::parse("p").expect("purpose");
        assert!(keys.authorize(&bearer("abc#def-0123456789"), &p).is_ok());
        assert!(matches!(
            keys.authorize(&bearer("abc"), &p),
            Err(ApiError::Unauthorized)
        ));
    }

    #[test]
    fn metrics_need_the_metrics_scope_and_labels_only_named_purposes() {
        let keys = ApiKeys::parse(
            "writer-0123456789abc p1,p2\nscraper-0123456789ab - metrics\nall-0123456789abcdef * write,metrics\n",
        )
        .expect("parse");
        assert!(matches!(
            keys.authorize_metrics(&bearer("writer-0123456789abc")),
            Err(ApiError::MissingScope("metrics"))
        ));
        assert!(keys
            .authorize_metrics(&bearer("scraper-0123456789ab"))
            .is_ok());
        assert!(keys
            .authorize_metrics(&bearer("all-0123456789abcdef"))
            .is_ok());
        assert!(matches!(
            keys.authorize_metrics(&HeaderMap::new()),
            Err(ApiError::Unauthorized)
        ));
        let p1 = Purpose::parse("p1").expect("purpose");
        assert!(matches!(
            keys.authorize(&bearer("scraper-0123456789ab"), &p1),
            Err(ApiError::Forbidden)
        ));
        let named = keys.named_purposes().expect("keys configured");
        assert_eq!(named.len(), 2);
        assert!(named.contains("p1") && named.contains("p2"));
        assert!(ApiKeys::default().named_purposes().is_none());
        assert!(ApiKeys::default()
            .authorize_metrics(&HeaderMap::new())
            .is_ok());
    }
}
