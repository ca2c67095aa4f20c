//! Optional API keys: `Authorization: Bearer <key>`, each key allowed a set
//! of purposes with a role on them (`read`, `write`, `admin`) and,
//! optionally, the `metrics` scope. Keys are kept only as SHA-256 digests,
//! never logged.

use std::collections::{HashMap, HashSet};

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};

use super::problem::ApiError;
use crate::domain::Purpose;

/// What a key may do on its purposes; each role implies the ones before it
/// (`admin` ⊇ `write` ⊇ `read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Inspect (long-poll included), list and watch.
    Read,
    /// Acquire, renew and release, and everything `read` may do.
    Write,
    /// Everything `write` may do, and break.
    Admin,
}

impl Role {
    /// The scope's name in the keys file and in a `forbidden` answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }
}

/// One key's grants, merged over every line that names it: its role on
/// every purpose (`*`) and on named ones, and whether it may read
/// `/metrics`.
#[derive(Debug, Clone, Default)]
struct Grant {
    any: Option<Role>,
    named: HashMap<String, Role>,
    metrics: bool,
    /// The key's public name (`name=<name>` on its line): what a break's
    /// `revoked` event names instead of the key.
    name: Option<String>,
}

impl Grant {
    /// The key's role on `purpose`, if it may use it at all.
    fn role(&self, purpose: &str) -> Option<Role> {
        self.any.max(self.named.get(purpose).copied())
    }
}

/// The configured keys.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    keys: HashMap<[u8; 32], Grant>,
}

/// One key's reach, as [`ApiKeys::reach`] answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// Its role on every purpose (a `*` line), if any.
    pub any: Option<Role>,
    /// The purposes it names, sorted, with its role on each.
    pub named: Vec<(String, Role)>,
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
const FORMAT: &str = "expected '<key> <purpose>[,<purpose>...]|*|- \
     [read|write|admin|metrics[,...]] [name=<name>]'";

/// A key's public name: 1 to 64 of `[A-Za-z0-9._-]`.
fn key_name(text: &str) -> Option<&str> {
    let ok = (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then_some(text)
}

impl ApiKeys {
    /// Parses one key per line: `<key> <purposes> [<scopes>]`. `<purposes>`
    /// is a comma-separated list, `*` (every purpose) or `-` (none);
    /// `<scopes>` a comma-separated list of `read` (inspect, list, watch on
    /// its purposes), `write` (those, plus acquire, renew, release),
    /// `admin` (those, plus break) and `metrics`
    /// (`/metrics` on the API listener). A line that names none of `read`,
    /// `write` and `admin` (no scopes, or `metrics` alone) means `write` on
    /// its purposes, as every line did before roles. A key on several
    /// lines gets the strongest role each line gives each purpose. A last
    /// `name=<name>` (1 to 64 of `[A-Za-z0-9._-]`) gives the key a public
    /// name, which a break's `revoked` event carries. A `#`
    /// at the start of a line or after white space starts a comment; inside
    /// a key it is part of the key. A file that holds no key is an error
    /// (it would open the API by accident).
    pub fn parse(text: &str) -> Result<Self, ApiKeysError> {
        let mut keys: HashMap<[u8; 32], Grant> = HashMap::new();
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
            let (Some(key), Some(purposes)) = (parts.next(), parts.next()) else {
                return Err(err(FORMAT));
            };
            // Then the scopes and a `name=<name>`, each optional.
            let (mut scopes, mut name) = (None, None);
            for part in parts {
                match part.strip_prefix("name=") {
                    Some(n) if name.is_none() => {
                        name = Some(key_name(n).ok_or_else(|| {
                            err("invalid key name (1 to 64 of A-Z a-z 0-9 . _ -)")
                        })?);
                    }
                    None if scopes.is_none() && name.is_none() => scopes = Some(part),
                    _ => return Err(err(FORMAT)),
                }
            }
            if key.len() < 16 {
                return Err(err("keys must be at least 16 characters"));
            }
            let mut role = None;
            let mut metrics = false;
            for scope in scopes.unwrap_or("write").split(',') {
                match scope {
                    "read" => role = role.max(Some(Role::Read)),
                    "write" => role = role.max(Some(Role::Write)),
                    "admin" => role = role.max(Some(Role::Admin)),
                    "metrics" => metrics = true,
                    _ => return Err(err("unknown scope (known: read, write, admin, metrics)")),
                }
            }
            let role = role.unwrap_or(Role::Write);
            let grant = keys.entry(hash(key)).or_default();
            grant.metrics |= metrics;
            if let Some(name) = name {
                if grant.name.as_deref().is_some_and(|n| n != name) {
                    return Err(err("the key has another name on an earlier line"));
                }
                grant.name = Some(name.to_owned());
            }
            match purposes {
                "*" => grant.any = grant.any.max(Some(role)),
                "-" => {}
                list => {
                    for p in list.split(',') {
                        Purpose::parse(p).map_err(|_| err("invalid purpose"))?;
                        let held = grant.named.entry(p.to_owned()).or_insert(role);
                        *held = (*held).max(role);
                    }
                }
            }
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
            named.extend(grant.named.keys().cloned());
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

    /// 401 unless a valid key is sent (when keys are configured), whatever
    /// its purposes and scopes.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.lookup(headers).map(|_| ())
    }

    /// 401 without a valid key; 403 `forbidden` when the key may not use
    /// `purpose` at all, or (naming the scope) when its role there is
    /// weaker than `need`.
    pub fn authorize(
        &self,
        headers: &HeaderMap,
        purpose: &Purpose,
        need: Role,
    ) -> Result<(), ApiError> {
        let Some(grant) = self.lookup(headers)? else {
            return Ok(());
        };
        match grant.role(purpose.as_str()) {
            None => Err(ApiError::Forbidden),
            Some(role) if role >= need => Ok(()),
            Some(_) => Err(ApiError::MissingPurposeScope {
                scope: need.as_str(),
                purpose: purpose.clone(),
            }),
        }
    }

    /// 401 without a valid key; 403 `forbidden` (naming the scope) when
    /// the key has `need` on no purpose: a session (docs/sessions.md)
    /// belongs to none, and its leases are authorised each on its own.
    pub fn authorize_any(&self, headers: &HeaderMap, need: Role) -> Result<(), ApiError> {
        let Some(grant) = self.lookup(headers)? else {
            return Ok(());
        };
        let best = grant.any.max(grant.named.values().copied().max());
        match best {
            Some(role) if role >= need => Ok(()),
            _ => Err(ApiError::MissingScope(need.as_str())),
        }
    }

    /// The public name of the key sent (`name=<name>` in the keys file),
    /// if keys are configured and it has one; never the key itself.
    pub fn key_name(&self, headers: &HeaderMap) -> Option<String> {
        self.lookup(headers).ok().flatten()?.name.clone()
    }

    /// What the sent key may read: its role on every purpose (`*`), if
    /// any, and on each purpose it names (sorted, each at least as strong
    /// as the `*` role). `None` when the API is open; 401 without a valid
    /// key. For `GET /purposes`; never says anything about other keys.
    pub fn reach(&self, headers: &HeaderMap) -> Result<Option<Reach>, ApiError> {
        let Some(grant) = self.lookup(headers)? else {
            return Ok(None);
        };
        let mut named: Vec<(String, Role)> = grant
            .named
            .iter()
            .map(|(p, role)| (p.clone(), grant.any.max(Some(*role)).unwrap_or(*role)))
            .collect();
        named.sort();
        Ok(Some(Reach {
            any: grant.any,
            named,
        }))
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
        assert!(keys
            .authorize(&bearer("export-key-0123456789"), &p, Role::Write)
            .is_ok());
        assert!(matches!(
            keys.authorize(&bearer("export-key-0123456789"), &q, Role::Write),
            Err(ApiError::Forbidden)
        ));
        assert!(keys
            .authorize(&bearer("admin-key-0123456789"), &q, Role::Write)
            .is_ok());
        assert!(matches!(
            keys.authorize(&bearer("wrong-key-0123456789"), &p, Role::Write),
            Err(ApiError::Unauthorized)
        ));
        assert!(matches!(
            keys.authorize(&HeaderMap::new(), &p, Role::Write),
            Err(ApiError::Unauthorized)
        ));
        assert!(ApiKeys::parse("short p").is_err());
        assert!(ApiKeys::parse("k-0123456789abcdef p owner").is_err());
        assert!(ApiKeys::default()
            .authorize(&HeaderMap::new(), &p, Role::Write)
            .is_ok());
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
        assert!(keys
            .authorize(&bearer("abc#def-0123456789"), &p, Role::Write)
            .is_ok());
        assert!(matches!(
            keys.authorize(&bearer("abc"), &p, Role::Write),
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
            keys.authorize(&bearer("scraper-0123456789ab"), &p1, Role::Write),
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

    fn forbidden_scope(result: Result<(), ApiError>) -> Option<(&'static str, String)> {
        match result {
            Err(ApiError::MissingPurposeScope { scope, purpose }) => {
                Some((scope, purpose.as_str().to_owned()))
            }
            _ => None,
        }
    }

    #[test]
    fn roles_imply_the_weaker_ones() {
        let keys = ApiKeys::parse(
            "reader-0123456789abc p1 read\n\
             writer-0123456789abc p1 write\n\
             admin-0123456789abcd p1 admin\n\
             old-0123456789abcdef p1\n",
        )
        .expect("parse");
        let p1 = Purpose::parse("p1").expect("purpose");
        let may = |key: &str, need| keys.authorize(&bearer(key), &p1, need).is_ok();
        assert!(may("reader-0123456789abc", Role::Read));
        assert!(!may("reader-0123456789abc", Role::Write));
        assert!(!may("reader-0123456789abc", Role::Admin));
        for key in ["writer-0123456789abc", "old-0123456789abcdef"] {
            assert!(may(key, Role::Read) && may(key, Role::Write), "{key}");
            assert!(!may(key, Role::Admin), "{key}");
        }
        for need in [Role::Read, Role::Write, Role::Admin] {
            assert!(may("admin-0123456789abcd", need));
        }
        assert_eq!(
            forbidden_scope(keys.authorize(&bearer("reader-0123456789abc"), &p1, Role::Write)),
            Some(("write", "p1".to_owned()))
        );
        assert_eq!(
            forbidden_scope(keys.authorize(&bearer("writer-0123456789abc"), &p1, Role::Admin)),
            Some(("admin", "p1".to_owned()))
        );
        // A purpose the key may not use at all is still the plain 403.
        let p2 = Purpose::parse("p2").expect("purpose");
        assert!(matches!(
            keys.authorize(&bearer("admin-0123456789abcd"), &p2, Role::Read),
            Err(ApiError::Forbidden)
        ));
        // Open API: every role.
        assert!(ApiKeys::default()
            .authorize(&HeaderMap::new(), &p1, Role::Admin)
            .is_ok());
    }

    #[test]
    fn scopes_combine_and_old_lines_mean_write() {
        let keys = ApiKeys::parse(
            "a-0123456789abcdefgh p1 read,metrics\n\
             b-0123456789abcdefgh p1 metrics\n\
             c-0123456789abcdefgh * read,write\n\
             d-0123456789abcdefgh p1,p2 read # a comment\n\
             d-0123456789abcdefgh p2 write\n\
             e-0123456789abcdefgh * read\n\
             e-0123456789abcdefgh p3 admin\n",
        )
        .expect("parse");
        let (p1, p2, p3) = (
            Purpose::parse("p1").expect("purpose"),
            Purpose::parse("p2").expect("purpose"),
            Purpose::parse("p3").expect("purpose"),
        );
        let may = |key: &str, p: &Purpose, need| keys.authorize(&bearer(key), p, need).is_ok();
        // `read,metrics`: reads and scrapes, does not write.
        assert!(may("a-0123456789abcdefgh", &p1, Role::Read));
        assert!(!may("a-0123456789abcdefgh", &p1, Role::Write));
        assert!(keys
            .authorize_metrics(&bearer("a-0123456789abcdefgh"))
            .is_ok());
        // `metrics` alone names no role: `write`, as before roles.
        assert!(may("b-0123456789abcdefgh", &p1, Role::Write));
        assert!(keys
            .authorize_metrics(&bearer("b-0123456789abcdefgh"))
            .is_ok());
        // The strongest named role wins.
        assert!(may("c-0123456789abcdefgh", &p3, Role::Write));
        assert!(!may("c-0123456789abcdefgh", &p3, Role::Admin));
        // A key on several lines: per purpose, the strongest role given.
        assert!(may("d-0123456789abcdefgh", &p1, Role::Read));
        assert!(!may("d-0123456789abcdefgh", &p1, Role::Write));
        assert!(may("d-0123456789abcdefgh", &p2, Role::Write));
        assert!(!may("d-0123456789abcdefgh", &p3, Role::Read));
        assert!(may("e-0123456789abcdefgh", &p1, Role::Read));
        assert!(!may("e-0123456789abcdefgh", &p1, Role::Write));
        assert!(may("e-0123456789abcdefgh", &p3, Role::Admin));
    }

    #[test]
    fn unknown_scopes_are_refused_with_their_line() {
        for (text, line) in [
            ("k-0123456789abcdefgh p1 reader\n", 1),
            (
                "# c\nk-0123456789abcdefgh p1 read\nk-0123456789abcdefgz p1 read,Write\n",
                3,
            ),
            ("k-0123456789abcdefgh p1 read,\n", 1),
        ] {
            let err = ApiKeys::parse(text).expect_err("an unknown scope");
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("line {line}: unknown scope")),
                "{message}"
            );
            assert!(
                !message.contains("k-0123456789"),
                "the key is never quoted: {message}"
            );
        }
    }
}
