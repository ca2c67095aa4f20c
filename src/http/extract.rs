//! Request parsing that answers every mistake with the same problem+json:
//! path parameters, attempt headers and JSON bodies, validated into domain
//! types, every invalid field named.

use std::convert::Infallible;

use std::future::Future as _;

use axum::body::Bytes;
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, StatusCode, Uri};
use serde::de::DeserializeOwned;

use super::problem::{ApiError, FieldError};
use crate::domain::{Attempt, OperationId, OwnerToken, Purpose, ResourceDigest, ResourceId};

/// The attempt headers.
pub const OWNER_TOKEN_HEADER: &str = "lease-owner-token";
/// The attempt headers.
pub const OPERATION_ID_HEADER: &str = "lease-operation-id";
/// The attempt headers as header names, built at compile time: a `&str`
/// key is parsed (and checked character by character) on every lookup.
pub const OWNER_TOKEN_NAME: HeaderName = HeaderName::from_static(OWNER_TOKEN_HEADER);
/// See [`OWNER_TOKEN_NAME`].
pub const OPERATION_ID_NAME: HeaderName = HeaderName::from_static(OPERATION_ID_HEADER);

/// The request's headers, taken rather than cloned: axum's `HeaderMap`
/// extractor copies the map, and every custom header name in it, per
/// request. Must be the last extractor (it consumes the request).
pub struct Headers(pub HeaderMap);

impl<S: Send + Sync> FromRequest<S> for Headers {
    type Rejection = Infallible;

    async fn from_request(req: Request, _: &S) -> Result<Self, Infallible> {
        Ok(Self(req.into_parts().0.headers))
    }
}

/// Why a request body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Over the body limit: `413`.
    TooLarge,
    /// The connection failed or closed mid-body.
    Unreadable,
}

/// The body, read whole within `limit` bytes (what axum's `Bytes`
/// extractor does under `DefaultBodyLimit`, without the extension that
/// layer inserts into every request).
async fn read_body(body: axum::body::Body, limit: usize) -> Result<Bytes, BodyError> {
    use http_body_util::BodyExt as _;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Unreadable),
    }
}

/// The request's headers (taken, as [`Headers`]) and its body, read within
/// the body limit; a body that cannot be read is left for [`json_body`] to
/// answer.
pub struct HeadersAndBody {
    /// The headers.
    pub headers: HeaderMap,
    /// The body, or why it could not be read.
    pub body: Result<Bytes, BodyError>,
}

impl FromRequest<super::app::AppState> for HeadersAndBody {
    type Rejection = axum::response::Response;

    /// A body still arriving half a second before the request timeout is
    /// answered `408` here, before the timeout could call a request that
    /// never reached the store `indeterminate`. The timer is armed only
    /// when the body is not all there at the first look (it usually comes
    /// with the head), so the common request reads no clock for it.
    async fn from_request(
        req: Request,
        state: &super::app::AppState,
    ) -> Result<Self, axum::response::Response> {
        let (parts, body) = req.into_parts();
        let headers = parts.headers;
        let mut read = std::pin::pin!(read_body(body, state.body_limit));
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(read.as_mut().poll(cx))).await;
        let body = match first {
            std::task::Poll::Ready(body) => body,
            std::task::Poll::Pending => {
                let within = state
                    .request_timeout
                    .saturating_sub(std::time::Duration::from_millis(500));
                tokio::time::timeout(within, read)
                    .await
                    .map_err(|_| super::problem::body_timeout())?
            }
        };
        Ok(Self { headers, body })
    }
}

/// Collects field errors across path, headers and body, then decides the status.
#[derive(Default)]
pub struct Problems {
    errors: Vec<FieldError>,
    shape: bool,
}

impl Problems {
    /// A request-shape error (path, header, JSON syntax): 400.
    pub fn shape(&mut self, field: &str, message: impl Into<String>) {
        self.shape = true;
        self.errors.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// An invalid value in well-formed JSON: 422 (unless a shape error is also present).
    pub fn value(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// Whether an error names `field` already.
    pub fn names(&self, field: &str) -> bool {
        self.errors.iter().any(|e| e.field == field)
    }

    /// `Ok` when nothing was wrong.
    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            return Ok(());
        }
        let status = if self.shape {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        Err(ApiError::Invalid {
            status,
            errors: self.errors,
        })
    }
}

/// Parses the `{purpose}` and `{digest}` path parameters.
pub fn resource(purpose: &str, digest: &str, problems: &mut Problems) -> Option<ResourceId> {
    let purpose = Purpose::parse(purpose)
        .map_err(|e| problems.shape("purpose", e.to_string()))
        .ok();
    let digest = ResourceDigest::parse(digest)
        .map_err(|e| problems.shape("digest", e.to_string()))
        .ok();
    Some(ResourceId {
        purpose: purpose?,
        digest: digest?,
    })
}

fn header_text<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    display: &str,
    problems: &mut Problems,
) -> Option<Option<&'a str>> {
    match headers.get(name) {
        None => Some(None),
        Some(v) => match v.to_str() {
            Ok(s) => Some(Some(s)),
            Err(_) => {
                problems.shape(display, "must be visible ASCII");
                None
            }
        },
    }
}

/// Parses the attempt headers; `required` makes their absence an error,
/// otherwise both or neither must be sent.
pub fn attempt(headers: &HeaderMap, required: bool, problems: &mut Problems) -> Option<Attempt> {
    let token = header_text(headers, &OWNER_TOKEN_NAME, "Lease-Owner-Token", problems)?;
    let op = header_text(headers, &OPERATION_ID_NAME, "Lease-Operation-Id", problems)?;
    if token.is_none() && op.is_none() && !required {
        return None;
    }
    let owner_token = match token {
        None => {
            problems.shape(
                "Lease-Owner-Token",
                "header is required (from POST /attempts)",
            );
            None
        }
        Some(t) => OwnerToken::parse(t)
            .map_err(|e| problems.shape("Lease-Owner-Token", e.to_string()))
            .ok(),
    };
    let operation_id = match op {
        None => {
            problems.shape(
                "Lease-Operation-Id",
                "header is required (from POST /attempts)",
            );
            None
        }
        Some(o) => OperationId::parse(o)
            .map_err(|e| problems.shape("Lease-Operation-Id", e.to_string()))
            .ok(),
    };
    Some(Attempt {
        owner_token: owner_token?,
        operation_id: operation_id?,
    })
}

/// Whom an inspect asks as: the attempt headers in any combination, each
/// one sent validated.
#[derive(Debug)]
pub enum Asker {
    /// Neither header, or `Lease-Operation-Id` alone: an operation id is no
    /// secret and names no owner, so it says nothing about who holds the lease.
    Anyone,
    /// `Lease-Owner-Token` alone: `heldBy` compares the owner token only.
    Owner(OwnerToken),
    /// Both headers: `heldBy` relative to the attempt.
    Attempt(Attempt),
}

/// Parses the attempt headers of an inspect, which takes them in any
/// combination (see [`Asker`]); a header that is sent must be well-formed.
pub fn asker(headers: &HeaderMap, problems: &mut Problems) -> Option<Asker> {
    let token = header_text(headers, &OWNER_TOKEN_NAME, "Lease-Owner-Token", problems);
    let op = header_text(headers, &OPERATION_ID_NAME, "Lease-Operation-Id", problems);
    // Both checked before giving up, so the answer names every bad header.
    let owner_token = match token {
        None => Err(()),
        Some(None) => Ok(None),
        Some(Some(t)) => OwnerToken::parse(t)
            .map(Some)
            .map_err(|e| problems.shape("Lease-Owner-Token", e.to_string())),
    };
    let operation_id = match op {
        None => Err(()),
        Some(None) => Ok(None),
        Some(Some(o)) => OperationId::parse(o)
            .map(Some)
            .map_err(|e| problems.shape("Lease-Operation-Id", e.to_string())),
    };
    let (Ok(owner_token), Ok(operation_id)) = (owner_token, operation_id) else {
        return None;
    };
    Some(match (owner_token, operation_id) {
        (Some(owner_token), Some(operation_id)) => Asker::Attempt(Attempt {
            owner_token,
            operation_id,
        }),
        (Some(owner_token), None) => Asker::Owner(owner_token),
        (None, _) => Asker::Anyone,
    })
}

/// Checks the content type and body size, then deserializes the JSON body,
/// naming the failing field.
pub fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BodyError>,
    limit: usize,
    problems: &mut Problems,
) -> Result<Option<T>, ApiError> {
    let body = match body {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            return Err(ApiError::TooLarge { limit });
        }
        Err(BodyError::Unreadable) => {
            problems.shape("body", "the request body could not be read");
            return Ok(None);
        }
    };
    if !is_json(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    // Every body is a JSON object; serde would also read a struct from an
    // array (`[30000]`), which the documented schema does not allow.
    let opens_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if !opens_object && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok() {
        problems.value("body", "must be a JSON object");
        return Ok(None);
    }
    // The common case, a valid body, without tracking the path (which
    // allocates for every key); only a failure is parsed again to name it.
    if let Ok(value) = serde_json::from_slice::<T>(&body) {
        return Ok(Some(value));
    }
    // Not JSON at all is a syntax error wherever it lies, before any member
    // is judged (`{"ttl": "\xff"}` is malformed, not an unknown member).
    if let Some((field, message)) = syntax_error(&body) {
        problems.shape(&field, message);
        return Ok(None);
    }
    // Well-formed JSON that is not a `T`: the member it names.
    let de = &mut serde_json::Deserializer::from_slice(&body);
    match serde_path_to_error::deserialize::<_, T>(&mut *de) {
        Ok(value) => Ok(Some(value)),
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.into_inner();
            let text = inner.to_string();
            // serde's message without its " at line 1 column 9" suffix: the
            // field is named.
            let message = text.split(" at line ").next().unwrap_or(&text);
            let field = member(path)
                .or_else(|| named_field(message))
                .unwrap_or_else(|| "body".to_owned());
            match inner.classify() {
                serde_json::error::Category::Data => problems.value(&field, message),
                // Read as JSON above; kept a 400 should the two parses differ.
                _ => problems.shape(&field, format!("malformed JSON: {message}")),
            }
            Ok(None)
        }
    }
}

/// A path serde_path_to_error gives → the member it names, if it names one
/// (not the top level `.`, nor an unknown key `?`).
fn member(path: String) -> Option<String> {
    (!path.is_empty() && path != "." && !path.contains('?')).then_some(path)
}

/// Where `body` is not JSON (read on the failure path only): the member
/// whose value it breaks off in (`{"ttlMs": 30x`, `{"ttlMs":`), else
/// `body` with the position (between members, serde's message quotes the
/// tokens it expected, `,` or `}`, never a field); `None` for JSON.
fn syntax_error(body: &[u8]) -> Option<(String, String)> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let err = match serde_path_to_error::deserialize::<_, serde_json::Value>(&mut *de) {
        Ok(_) => {
            de.end().err()?;
            return Some((
                "body".to_owned(),
                "malformed JSON: trailing characters after the object".to_owned(),
            ));
        }
        Err(err) => err,
    };
    let path = err.path().to_string();
    let inner = err.into_inner();
    if inner.classify() == serde_json::error::Category::Data {
        return None;
    }
    let text = inner.to_string();
    Some(match member(path) {
        Some(field) => {
            let message = text.split(" at line ").next().unwrap_or(&text);
            (field, format!("malformed JSON: {message}"))
        }
        None => ("body".to_owned(), format!("malformed JSON: {text}")),
    })
}

/// The member a whole-body data error names (`missing field `ttlMs``,
/// `unknown field `ttl`, expected ...`, `duplicate field `ttlMs``) → it.
fn named_field(message: &str) -> Option<String> {
    let rest = ["missing field `", "unknown field `", "duplicate field `"]
        .iter()
        .find_map(|lead| message.strip_prefix(lead))?;
    let len = rest.find('`')?;
    Some(rest[..len].to_owned())
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    // What nearly every client sends, decided without splitting and
    // case-folding.
    if value.as_bytes() == b"application/json" {
        return true;
    }
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let lower_prefix = |s: &str, prefix: &str| {
        s.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    let lower_suffix = |s: &str, suffix: &str| {
        s.len() >= suffix.len()
            && s.get(s.len() - suffix.len()..)
                .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
    };
    essence.eq_ignore_ascii_case("application/json")
        || (lower_prefix(essence, "application/") && lower_suffix(essence, "+json"))
}

/// The lease path's two parameters: as the router matched them
/// (percent-decoded and borrowed: axum's `Path<(String, String)>` would
/// deserialize them into two new `String`s per request), or, for the lease
/// verbs the front serves without the router, the request's path itself
/// (one with no `%`, so nothing to decode).
pub enum RawPath {
    /// From the router.
    Routed(Result<RawPathParams, RawPathParamsRejection>),
    /// `/leases/{purpose}/{digest}` with no `%` in it (the front door's
    /// classifier, `lanes::classify`, put it in a verb's lane).
    Plain(Uri),
}

impl<S: Send + Sync> FromRequestParts<S> for RawPath {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        Ok(Self::Routed(
            RawPathParams::from_request_parts(parts, state).await,
        ))
    }
}

pub(super) fn path_resource(path: RawPath, problems: &mut Problems) -> Option<ResourceId> {
    match path {
        RawPath::Plain(uri) => {
            let rest = uri.path().strip_prefix("/leases/").unwrap_or_default();
            let (purpose, digest) = match memchr::memchr(b'/', rest.as_bytes()) {
                Some(end) => (&rest[..end], &rest[end + 1..]),
                None => (rest, ""),
            };
            resource(purpose, digest, problems)
        }
        RawPath::Routed(Ok(params)) => {
            let (mut purpose, mut digest) = ("", "");
            for (name, value) in &params {
                match name {
                    "purpose" => purpose = value,
                    "digest" => digest = value,
                    _ => {}
                }
            }
            resource(purpose, digest, problems)
        }
        RawPath::Routed(Err(_)) => {
            problems.shape("path", "path parameters must be valid UTF-8");
            None
        }
    }
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
