//! [`Client::history`]: a resource's history (`GET
//! /leases/{purpose}/{digest}/history`), newest change first.

use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::error::{Cause, Error};
use super::Client;
use crate::domain::{HolderLabel, OperationId, ResourceId, StoreTime};

/// One change of a resource, as the service answers it (docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    /// `acquired`, `released`, `expired`, `holder_changed`, `lock_delay` or
    /// `revoked` (a later service may add others).
    pub event: String,
    /// When (the store's clock).
    pub at: StoreTime,
    /// `expired` only: `at` is when the store noticed, not the expiry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noticed: bool,
    /// The permit's fencing token.
    pub fencing_token: u64,
    /// The resource's version after the change.
    pub version: String,
    /// The permit's holder label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderLabel>,
    /// `lock_delay` only: the delay in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// `revoked` only: the reason given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `revoked` only: the name of the API key that broke it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
}

impl Client {
    /// The newest changes of `resource`, newest first: `limit` at most
    /// (the service's default, 20, when `None`). A read: whatever fails,
    /// nothing changed (an uncertain reply is `Indeterminate` with the
    /// operation id `history`).
    pub async fn history(
        &self,
        resource: &ResourceId,
        limit: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, Error> {
        let op = OperationId::parse("history").map_err(|_| Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        })?;
        let mut url = format!("{}/history", self.lease_url(resource));
        if let Some(limit) = limit {
            url.push_str(&format!("?limit={limit}"));
        }
        let reply = self
            .call(
                Method::GET,
                url,
                None,
                None,
                self.settings().request_timeout,
                &op,
            )
            .await?;
        if reply.outcome() != "history" {
            return Err(reply.failure(&op));
        }
        reply
            .wire()
            .entries
            .clone()
            .ok_or_else(|| reply.unexpected(&op))
    }
}
