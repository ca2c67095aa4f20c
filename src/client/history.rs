//! [`Client::history`]: a resource's history (`GET
//! /leases/{purpose}/{digest}/history`), newest change first.

use reqwest::Method;

use super::error::{Cause, Error};
use super::Client;
use crate::domain::{HistoryRecord, OperationId, ResourceId};

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
