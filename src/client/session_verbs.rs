//! The session verbs over HTTP: renew (`PATCH`), end (`DELETE`) and
//! [`Client::session`] (`GET`), each answer applied to the session's state.

use std::sync::atomic::Ordering;

use reqwest::{Method, Url};
use serde_json::json;
use tokio::time::Instant;

use super::api::Client;
use super::error::{Cause, Error};
use super::machine::{LeaseState, Refused};
use super::session_core::{SessionEnd, SessionShared};
use super::session_wire::{LostLease, SessionGone, SessionInfo, SessionPage, SessionWire};
use crate::domain::OperationId;

/// The answer to [`Session::renew`](super::Session::renew).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRenewal {
    /// Renewed, with every attached lease it still holds; `lost` lists
    /// those it no longer holds (each one's registration ended).
    Renewed {
        /// The session now.
        session: SessionInfo,
        /// Attached leases it no longer holds.
        lost: Vec<LostLease>,
    },
    /// The session is gone.
    Lost(SessionGone),
}

/// The answer to [`Session::end`](super::Session::end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnded {
    /// Ended; `released` attached leases were released.
    Ended {
        /// How many.
        released: u64,
    },
    /// It was gone already.
    AlreadyAbsent,
}

impl SessionShared {
    pub(super) async fn renew(&self) -> Result<SessionRenewal, Error> {
        // Bound first: a guard in the `if let` would be held inside it, and
        // `observe` locks the core again.
        let begun = self.core().begin_renew(Instant::now());
        if let Err(refused) = begun {
            self.observe();
            return Err(Error::Refused(refused));
        }
        let op = &self.attempt.operation_id;
        let sent = Instant::now();
        let reply = self
            .client
            .call(
                Method::PATCH,
                self.client.url(&format!("/sessions/{}", self.id)),
                Some(&self.attempt),
                Some(json!({})),
                self.client.settings().request_timeout,
                op,
            )
            .await?;
        let wire = SessionWire::read(&reply.body).unwrap_or_default();
        match (reply.outcome(), reply.status) {
            ("renewed", 200) => {
                let info = wire.session.ok_or_else(|| reply.unexpected(op))?;
                if info.id != self.id {
                    return Err(reply.unexpected(op));
                }
                let lost = wire.lost.unwrap_or_default();
                self.apply_renewed(sent, &info, &lost);
                Ok(SessionRenewal::Renewed {
                    session: info,
                    lost,
                })
            }
            ("lost", 404) => {
                let gone = wire
                    .reason
                    .as_deref()
                    .and_then(SessionGone::parse)
                    .ok_or_else(|| reply.unexpected(op))?;
                self.finish(SessionEnd::Lost(gone));
                Ok(SessionRenewal::Lost(gone))
            }
            _ => Err(reply.failure(op)),
        }
    }

    pub(super) async fn end(&self) -> Result<SessionEnded, Error> {
        if self.end_reason() == Some(SessionEnd::Ended) {
            return Err(Error::Refused(Refused {
                state: LeaseState::Released,
            }));
        }
        self.ending.store(true, Ordering::SeqCst);
        let op = &self.attempt.operation_id;
        let result = self
            .client
            .call(
                Method::DELETE,
                self.client.url(&format!("/sessions/{}", self.id)),
                Some(&self.attempt),
                None,
                self.client.settings().request_timeout,
                op,
            )
            .await;
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                if e.may_have_applied() {
                    self.finish(SessionEnd::Unknown);
                } else {
                    self.ending.store(false, Ordering::SeqCst);
                }
                return Err(e);
            }
        };
        let wire = SessionWire::read(&reply.body).unwrap_or_default();
        let ended = match reply.outcome() {
            "ended" => SessionEnded::Ended {
                released: wire.released.unwrap_or(0),
            },
            "already_absent" => SessionEnded::AlreadyAbsent,
            _ => {
                let e = reply.failure(op);
                if e.may_have_applied() {
                    self.finish(SessionEnd::Unknown);
                } else {
                    self.ending.store(false, Ordering::SeqCst);
                }
                return Err(e);
            }
        };
        self.finish(SessionEnd::Ended);
        Ok(ended)
    }
}

impl Client {
    /// `GET /sessions/{id}`: the session and a page of its leases (`limit`
    /// 1 to 1000, the service's default when `None`; from `cursor`, a
    /// previous page's `next_cursor`). `None` when the session is unknown,
    /// ended or expired. A read: an uncertain reply is `Indeterminate`
    /// with the operation id `session`.
    pub async fn session(
        &self,
        id: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Option<SessionPage>, Error> {
        let op = OperationId::parse("session").map_err(|_| Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        })?;
        let bad = || Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        };
        let mut url = Url::parse(&self.url("/sessions/")).map_err(|_| bad())?;
        url.path_segments_mut()
            .map_err(|_| bad())?
            .pop_if_empty()
            .push(id);
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(cursor) = cursor {
                query.append_pair("cursor", cursor);
            }
        }
        let url = String::from(url).trim_end_matches('?').to_owned();
        let timeout = self.settings().request_timeout;
        let reply = self
            .call(Method::GET, url, None, None, timeout, &op)
            .await?;
        let wire = SessionWire::read(&reply.body).unwrap_or_default();
        match (reply.status, wire.outcome.as_deref()) {
            (200, Some("session")) => Ok(Some(SessionPage {
                session: wire.session.ok_or_else(|| reply.unexpected(&op))?,
                leases: wire.leases.unwrap_or_default(),
                next_cursor: wire.next_cursor,
            })),
            (404, Some("lost" | "not_found")) => Ok(None),
            _ => Err(reply.failure(&op)),
        }
    }
}
