//! [`Client`]: the HTTP calls, and the mapping of every reply (or its
//! absence) to a typed outcome or an [`Error`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION};
use reqwest::{Method, Url};
use serde_json::json;

use super::error::{BuildError, Cause, Error};
use super::reply::Reply;
use super::tls::{self, TlsSettings};
use crate::domain::{
    Attempt, BreakOutcome, BreakReason, EndedReason, HolderLabel, Inspection, LostReason,
    OperationId, OwnerToken, ReleaseOutcome, RenewOutcome, ResourceId,
};
use crate::domain::{ListLimit, Listing, Purpose};

const OWNER_TOKEN_HEADER: &str = "Lease-Owner-Token";
const OPERATION_ID_HEADER: &str = "Lease-Operation-Id";

/// How a [`Client`] talks to the service.
#[derive(Clone)]
pub struct ClientSettings {
    /// Where the service listens, e.g. `http://127.0.0.1:8080` or
    /// `https://leasehold.internal:8443`.
    pub base_url: String,
    /// For `https://`: which CAs to trust and an optional client
    /// certificate. Default: the system's trust store, no client
    /// certificate. Files are read when the [`Client`] is built.
    pub tls: TlsSettings,
    /// The least drift budget (the service's `--drift-budget-ms`): a handle
    /// counts its lease as valid for `min(ttl, remainingMs) - drift` from
    /// when the request was sent, where `drift = max(drift_budget,
    /// drift_fraction × ttl)` ([`ClientSettings::drift_for`]), and a
    /// watchdog stops the protected work one `drift` before that (DESIGN
    /// §14). Default 10 ms, the service default.
    pub drift_budget: Duration,
    /// The part of the TTL allowed for clock drift between this process
    /// and Redis, beyond [`ClientSettings::drift_budget`]. Default 0.01
    /// (1 %): a 30 s lease is valid locally for 29.7 s from its send.
    pub drift_fraction: f64,
    /// How long one request may take from connecting to the end of the
    /// reply; an acquire adds its `waitMs`. Default 5 s.
    pub request_timeout: Duration,
    /// How long connecting may take; a connect failure is `Unavailable`.
    /// Default 1 s.
    pub connect_timeout: Duration,
    /// Sent as `Authorization: Bearer <key>` when set. A secret: `Debug`
    /// redacts it.
    pub api_key: Option<String>,
    /// Replies larger than this are not read (`Indeterminate`). Default 64 KiB.
    pub max_reply_bytes: usize,
}

impl ClientSettings {
    /// Default settings for a service at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            tls: TlsSettings::default(),
            drift_budget: Duration::from_millis(10),
            drift_fraction: 0.01,
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            api_key: None,
            max_reply_bytes: 64 * 1024,
        }
    }
}

impl ClientSettings {
    /// The drift allowed a lease of `ttl`: `max(drift_budget, drift_fraction
    /// × ttl)`. A fraction that is not a number in [0, 0.5] counts as 0.01.
    pub fn drift_for(&self, ttl: Duration) -> Duration {
        let fraction = if (0.0..=0.5).contains(&self.drift_fraction) {
            self.drift_fraction
        } else {
            0.01
        };
        self.drift_budget.max(ttl.mul_f64(fraction))
    }
}

impl fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSettings")
            .field("base_url", &self.base_url)
            .field("tls", &self.tls)
            .field("drift_budget", &self.drift_budget)
            .field("drift_fraction", &self.drift_fraction)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_reply_bytes", &self.max_reply_bytes)
            .finish()
    }
}

/// A leasehold client: cheap to clone, one keep-alive connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// The base URL without a trailing slash.
    base: String,
    auth: Option<HeaderValue>,
    settings: ClientSettings,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .finish_non_exhaustive()
    }
}

/// Milliseconds of a duration, saturating.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Client {
    /// A client for the service at `settings.base_url`. Connects lazily.
    pub fn new(settings: ClientSettings) -> Result<Self, BuildError> {
        let url = Url::parse(&settings.base_url)
            .map_err(|_| BuildError::BaseUrl(settings.base_url.clone()))?;
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            _ => return Err(BuildError::BaseUrl(settings.base_url.clone())),
        };
        if url.cannot_be_a_base() || url.query().is_some() || url.fragment().is_some() {
            return Err(BuildError::BaseUrl(settings.base_url.clone()));
        }
        let auth = match &settings.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| BuildError::ApiKey)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let tls_config = tls::client_config(&settings.tls, https)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config)
            .connect_timeout(settings.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|_| BuildError::Http)?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                base: url.as_str().trim_end_matches('/').to_owned(),
                auth,
                settings,
            }),
        })
    }

    /// The settings this client was built with.
    pub fn settings(&self) -> &ClientSettings {
        &self.inner.settings
    }

    /// `<base>/leases/<purpose>/events`.
    pub(super) fn purpose_events_url(&self, purpose: &crate::domain::Purpose) -> String {
        format!("{}/leases/{purpose}/events", self.inner.base)
    }

    /// `<base>` and `path` (which starts with `/`).
    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.inner.base)
    }

    pub(super) fn lease_url(&self, resource: &ResourceId) -> String {
        format!(
            "{}/leases/{}/{}",
            self.inner.base, resource.purpose, resource.digest
        )
    }

    /// Sends one request and reads its reply, classifying transport
    /// failures: nothing written → `Unavailable`; written (or possibly
    /// written) → `Indeterminate`.
    pub(super) async fn call(
        &self,
        method: Method,
        url: String,
        attempt: Option<&Attempt>,
        body: Option<serde_json::Value>,
        timeout: Duration,
        op: &OperationId,
    ) -> Result<Reply, Error> {
        let mut request = self.inner.http.request(method, url).timeout(timeout);
        if let Some(auth) = &self.inner.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        if let Some(a) = attempt {
            let mut token =
                HeaderValue::from_str(a.owner_token.expose()).map_err(|_| Error::Unavailable {
                    retry_after: None,
                    cause: Cause::Connect,
                })?;
            token.set_sensitive(true);
            request = request
                .header(OWNER_TOKEN_HEADER, token)
                .header(OPERATION_ID_HEADER, a.operation_id.as_str());
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let indeterminate = |cause| Error::Indeterminate {
            operation_id: op.clone(),
            cause,
        };
        let response = match request.send().await {
            Ok(r) => r,
            // The request could not be built, or no connection was made
            // (TLS handshake included): it never left.
            Err(e) if e.is_builder() || e.is_connect() => {
                let cause = if tls::is_tls_failure(&e) {
                    Cause::Tls
                } else {
                    Cause::Connect
                };
                return Err(Error::Unavailable {
                    retry_after: None,
                    cause,
                });
            }
            Err(e) if tls::refused_client_certificate(&e) => {
                return Err(Error::Unavailable {
                    retry_after: None,
                    cause: Cause::ClientCertificate,
                });
            }
            Err(e) if e.is_timeout() => return Err(indeterminate(Cause::Timeout)),
            Err(_) => return Err(indeterminate(Cause::ConnectionLost)),
        };
        self.read_reply(response, op).await
    }

    /// Sends a GET of `url` with the API key and no timeout for the body (a
    /// stream): the answer's head, or what a sent request's failure is.
    pub(super) async fn open_stream(
        &self,
        url: String,
        headers: &[(&str, &str)],
        op: &OperationId,
    ) -> Result<reqwest::Response, Error> {
        let mut request = self.inner.http.get(url);
        if let Some(auth) = &self.inner.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        match request.send().await {
            Ok(r) => Ok(r),
            Err(e) if e.is_builder() || e.is_connect() => Err(Error::Unavailable {
                retry_after: None,
                cause: if tls::is_tls_failure(&e) {
                    Cause::Tls
                } else {
                    Cause::Connect
                },
            }),
            Err(_) => Err(Error::Indeterminate {
                operation_id: op.clone(),
                cause: Cause::ConnectionLost,
            }),
        }
    }

    /// Reads an answer's body (at most `max_reply_bytes`) as a [`Reply`].
    pub(super) async fn read_reply(
        &self,
        mut response: reqwest::Response,
        op: &OperationId,
    ) -> Result<Reply, Error> {
        let indeterminate = |cause| Error::Indeterminate {
            operation_id: op.clone(),
            cause,
        };
        let status = response.status().as_u16();
        let limit = self.inner.settings.max_reply_bytes;
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > limit {
                        return Err(indeterminate(Cause::UnexpectedReply { status }));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => return Err(indeterminate(Cause::Timeout)),
                Err(_) => return Err(indeterminate(Cause::ConnectionLost)),
            }
        }
        Ok(Reply {
            status,
            wire: serde_json::from_slice(&bytes).ok(),
            body: bytes,
        })
    }

    /// `POST /attempts`: a fresh owner token for `operation_id`. Stateless on
    /// the server, so safe to retry on any failure.
    pub async fn create_attempt(&self, operation_id: &OperationId) -> Result<Attempt, Error> {
        let url = format!("{}/attempts", self.inner.base);
        let body = json!({ "operationId": operation_id.as_str() });
        let reply = self
            .call(
                Method::POST,
                url,
                None,
                Some(body),
                self.inner.settings.request_timeout,
                operation_id,
            )
            .await?;
        if reply.outcome() != "attempt_created" {
            return Err(reply.failure(operation_id));
        }
        let token = reply.wire().owner_token.as_deref().unwrap_or("");
        let owner_token = OwnerToken::parse(token).map_err(|_| reply.unexpected(operation_id))?;
        if reply.wire().operation_id.as_deref() != Some(operation_id.as_str()) {
            return Err(reply.unexpected(operation_id));
        }
        Ok(Attempt {
            owner_token,
            operation_id: operation_id.clone(),
        })
    }

    /// `PATCH /leases/{purpose}/{digest}`: reset the TTL to `ttl`. A
    /// [`LeaseHandle`](super::LeaseHandle) calls this for you and tracks the result.
    pub async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Duration,
    ) -> Result<RenewOutcome, Error> {
        self.renew_with(resource, attempt, ttl, None).await
    }

    /// [`Client::renew`], replacing the public holder label when `holder`
    /// is given (etcd's Proclaim; the fencing token stays).
    pub async fn renew_with(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Duration,
        holder: Option<&HolderLabel>,
    ) -> Result<RenewOutcome, Error> {
        let op = &attempt.operation_id;
        let mut body = json!({ "ttlMs": millis(ttl) });
        if let Some(holder) = holder {
            body["holder"] = json!(holder.as_str());
        }
        let reply = self
            .call(
                Method::PATCH,
                self.lease_url(resource),
                Some(attempt),
                Some(body),
                self.inner.settings.request_timeout,
                op,
            )
            .await?;
        match reply.outcome() {
            "renewed" => Ok(RenewOutcome::Renewed {
                lease: reply.lease(resource, op)?,
            }),
            "lost" => match reply.wire().reason.as_deref() {
                Some("absent") => Ok(RenewOutcome::Lost {
                    reason: LostReason::Absent,
                }),
                Some("not_owner") => Ok(RenewOutcome::Lost {
                    reason: LostReason::NotOwner,
                }),
                Some("revoked") => Ok(RenewOutcome::Lost {
                    reason: LostReason::Revoked,
                }),
                Some("max_hold") => Ok(RenewOutcome::Lost {
                    reason: LostReason::MaxHold,
                }),
                _ => Err(reply.unexpected(op)),
            },
            _ => Err(reply.failure(op)),
        }
    }

    /// `DELETE /leases/{purpose}/{digest}`: release (idempotent). A
    /// [`LeaseHandle`](super::LeaseHandle) calls this for you and tracks the result.
    pub async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<ReleaseOutcome, Error> {
        let op = &attempt.operation_id;
        let reply = self
            .call(
                Method::DELETE,
                self.lease_url(resource),
                Some(attempt),
                None,
                self.inner.settings.request_timeout,
                op,
            )
            .await?;
        match reply.outcome() {
            "released" => Ok(ReleaseOutcome::Released),
            "already_absent" => Ok(ReleaseOutcome::AlreadyAbsent {
                reason: match reply.wire().reason.as_deref() {
                    Some("revoked") => Some(EndedReason::Revoked),
                    Some("max_hold") => Some(EndedReason::MaxHold),
                    _ => None,
                },
            }),
            "not_owner" => Ok(ReleaseOutcome::NotOwner),
            _ => Err(reply.failure(op)),
        }
    }

    /// `GET /leases/{purpose}/{digest}`: a read-only view; with an attempt,
    /// also who holds it relative to that attempt. Without one, an
    /// `Indeterminate` carries the operation id `inspect`.
    pub async fn inspect(
        &self,
        resource: &ResourceId,
        attempt: Option<&Attempt>,
    ) -> Result<Inspection, Error> {
        let anonymous;
        let op = match attempt {
            Some(a) => &a.operation_id,
            None => {
                anonymous = OperationId::parse("inspect").map_err(|_| Error::Unavailable {
                    retry_after: None,
                    cause: Cause::Connect,
                })?;
                &anonymous
            }
        };
        let reply = self
            .call(
                Method::GET,
                self.lease_url(resource),
                attempt,
                None,
                self.inner.settings.request_timeout,
                op,
            )
            .await?;
        super::reply::inspection(&reply, op)
    }
}

impl Client {
    /// `POST /leases/{purpose}/{digest}/break` (an `admin` key): removes
    /// every live permit, or the one with `fencing_token`, with `reason`
    /// for watchers. An uncertain reply is `Indeterminate` with the
    /// operation id `break` (breaking again is safe).
    pub async fn break_lease(
        &self,
        resource: &ResourceId,
        fencing_token: Option<u64>,
        reason: Option<&BreakReason>,
    ) -> Result<BreakOutcome, Error> {
        let op = OperationId::parse("break").map_err(|_| Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        })?;
        let mut body = serde_json::Map::new();
        if let Some(token) = fencing_token {
            body.insert("fencingToken".into(), token.into());
        }
        if let Some(reason) = reason {
            body.insert("reason".into(), reason.as_str().into());
        }
        let reply = self
            .call(
                Method::POST,
                format!("{}/break", self.lease_url(resource)),
                None,
                Some(body.into()),
                self.inner.settings.request_timeout,
                &op,
            )
            .await?;
        match reply.outcome() {
            "broken" => match reply.wire().permits_broken {
                Some(permits) => Ok(BreakOutcome::Broken { permits }),
                None => Err(reply.unexpected(&op)),
            },
            "nothing_to_break" => Ok(BreakOutcome::NothingToBreak),
            _ => Err(reply.failure(&op)),
        }
    }

    /// One page of the leases held on `purpose` (`GET /leases/{purpose}`):
    /// `limit` leases at most (the service's default, 100, when `None`),
    /// from `cursor` (a previous page's `next_cursor`; the start when
    /// `None`). A read: whatever fails, nothing changed (an uncertain
    /// reply is `Indeterminate` with the operation id `list`).
    pub async fn list(
        &self,
        purpose: &Purpose,
        limit: Option<ListLimit>,
        cursor: Option<&str>,
    ) -> Result<Listing, Error> {
        let op = OperationId::parse("list").map_err(|_| Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        })?;
        let mut url =
            Url::parse(&format!("{}/leases/{purpose}", self.inner.base)).map_err(|_| {
                Error::Unavailable {
                    retry_after: None,
                    cause: Cause::Connect,
                }
            })?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.get().to_string());
            }
            if let Some(cursor) = cursor {
                query.append_pair("cursor", cursor);
            }
        }
        let url = String::from(url).trim_end_matches('?').to_owned();
        let reply = self
            .call(
                Method::GET,
                url,
                None,
                None,
                self.inner.settings.request_timeout,
                &op,
            )
            .await?;
        if reply.outcome() != "listed" {
            return Err(reply.failure(&op));
        }
        Ok(Listing {
            leases: reply.listed(&op)?,
            next_cursor: reply.wire().next_cursor.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_a_floor_or_one_percent_of_the_ttl() {
        let s = ClientSettings::new("http://127.0.0.1:1");
        assert_eq!(
            s.drift_for(Duration::from_millis(300)),
            Duration::from_millis(10)
        );
        assert_eq!(
            s.drift_for(Duration::from_secs(30)),
            Duration::from_millis(300)
        );
        assert_eq!(
            s.drift_for(Duration::from_secs(7 * 24 * 3600)),
            Duration::from_millis(6_048_000)
        );
        let odd = ClientSettings {
            drift_fraction: f64::NAN,
            ..ClientSettings::new("http://127.0.0.1:1")
        };
        assert_eq!(
            odd.drift_for(Duration::from_secs(30)),
            Duration::from_millis(300)
        );
    }
}
