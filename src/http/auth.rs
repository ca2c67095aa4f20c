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

/// The configured keys.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    keys: HashMap<[u8; 32], Allowed>,
}

/// Why an API keys file was rejected (never quotes a key).
#[derive(Debug, thiserror::Error)]
#[error("LEASEHOLD_API_KEYS_FILE line {line}: {reason}")]
pub struct ApiKeysError {
    line: usize,
    reason: &'static str,
}

impl ApiKeys {
    /// Parses `<key> <purpose>[,<purpose>...]` or `<key> *` per line; `#`
    /// starts a comment.
    pub fn parse(text: &str) -> Result<Self, ApiKeysError> {
        let mut keys = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(key), Some(purposes), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(ApiKeysError {
                    line: i + 1,
                    reason: "expected '<key> <purpose>[,<purpose>...]' or '<key> *'",
                });
            };
            if key.len() < 16 {
                return Err(ApiKeysError {
                    line: i + 1,
                    reason: "keys must be at least 16 characters",
                });
            }
            let allowed = if purposes == "*" {
                Allowed::Any
            } else {
                let mut set = HashSet::new();
                for p in purposes.split(',') {
                    Purpose::parse(p).map_err(|_| ApiKeysError {
                        line: i + 1,
                        reason: "invalid purpose",
                    })?;
                    set.insert(p.to_owned());
                }
                Allowed::Only(set)
            };
            keys.insert(hash(key), allowed);
        }
        Ok(Self { keys })
    }

    /// Whether any key is configured (otherwise the API is open).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    fn lookup(&self, headers: &HeaderMap) -> Result<Option<&Allowed>, ApiError> {
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
        match self.lookup(headers)? {
            None | Some(Allowed::Any) => Ok(()),
            Some(Allowed::Only(set)) if set.contains(purpose.as_str()) => Ok(()),
            Some(Allowed::Only(_)) => Err(ApiError::Forbidden),
        }
    }
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
        assert!(ApiKeys::default().authorize(&HeaderMap::new(), &p).is_ok());
    }
}
