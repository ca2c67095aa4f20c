//! A reply as [`Client`](super::Client) reads it: the status and the JSON
//! members every verb may carry, checked against the API contract.

use std::time::Duration;

use serde::Deserialize;

use super::error::{Cause, Error, Rejection};
use crate::domain::FieldError;
use crate::domain::{
    Guarantee, HolderLabel, Lease, ListedLease, Mode, OperationId, PermitView, Purpose,
    Replication, ResourceDigest, ResourceId, StoreTime,
};
use crate::domain::{HeldBy, Inspection};

/// Every member any answer may carry; each verb reads the ones it expects.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Wire {
    pub(super) outcome: Option<String>,
    lease: Option<WireLease>,
    pub(super) waited_ms: Option<u64>,
    pub(super) retry_after_ms: Option<u64>,
    pub(super) reason: Option<String>,
    pub(super) held: Option<bool>,
    pub(super) remaining_ms: Option<u64>,
    pub(super) fencing_token: Option<u64>,
    pub(super) held_by: Option<String>,
    pub(super) version: Option<String>,
    pub(super) holder: Option<HolderLabel>,
    pub(super) ttl_ms: Option<u64>,
    pub(super) acquired_at: Option<StoreTime>,
    pub(super) renewed_at: Option<StoreTime>,
    pub(super) limit: Option<u32>,
    pub(super) mode: Option<Mode>,
    pub(super) holders: Option<u32>,
    pub(super) permits: Option<Vec<PermitView>>,
    pub(super) lock_delay_remaining_ms: Option<u64>,
    pub(super) permits_broken: Option<u32>,
    pub(super) owner_token: Option<String>,
    pub(super) operation_id: Option<String>,
    pub(super) detail: Option<String>,
    errors: Option<Vec<WireFieldError>>,
    leases: Option<Vec<WireListed>>,
    pub(super) next_cursor: Option<String>,
    /// A `history` answer's entries.
    pub(super) entries: Option<Vec<crate::domain::HistoryRecord>>,
}

/// One lease of a `listed` answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireListed {
    digest: String,
    #[serde(default)]
    holder: Option<HolderLabel>,
    fencing_token: u64,
    remaining_ms: u64,
    ttl_ms: u64,
    acquired_at: StoreTime,
    renewed_at: StoreTime,
    holders: u32,
    limit: u32,
    mode: Mode,
    #[serde(default)]
    permits: Option<Vec<PermitView>>,
    #[serde(default)]
    session: Option<crate::domain::SessionId>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireLease {
    purpose: String,
    digest: String,
    fencing_token: u64,
    ttl_ms: u64,
    remaining_ms: u64,
    guarantee: String,
    #[serde(default)]
    replication: Option<Replication>,
    #[serde(default)]
    holder: Option<HolderLabel>,
    acquired_at: StoreTime,
    renewed_at: StoreTime,
    #[serde(default)]
    max_hold_ms: Option<u64>,
    #[serde(default)]
    hold_ends_at: Option<StoreTime>,
}

#[derive(Debug, Deserialize)]
struct WireFieldError {
    field: String,
    message: String,
}

/// A reply that arrived: its status and, if it was JSON, its members.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) wire: Option<Wire>,
    /// The body as read (answers with members [`Wire`] does not know).
    pub(super) body: Vec<u8>,
}

impl Reply {
    pub(super) fn outcome(&self) -> &str {
        self.wire
            .as_ref()
            .and_then(|w| w.outcome.as_deref())
            .unwrap_or("")
    }

    pub(super) fn wire(&self) -> &Wire {
        static EMPTY: Wire = Wire {
            outcome: None,
            lease: None,
            waited_ms: None,
            retry_after_ms: None,
            reason: None,
            held: None,
            remaining_ms: None,
            fencing_token: None,
            held_by: None,
            version: None,
            holder: None,
            ttl_ms: None,
            acquired_at: None,
            renewed_at: None,
            limit: None,
            mode: None,
            holders: None,
            permits: None,
            lock_delay_remaining_ms: None,
            permits_broken: None,
            owner_token: None,
            operation_id: None,
            detail: None,
            errors: None,
            leases: None,
            next_cursor: None,
            entries: None,
        };
        self.wire.as_ref().unwrap_or(&EMPTY)
    }

    pub(super) fn unexpected(&self, op: &OperationId) -> Error {
        Error::Indeterminate {
            operation_id: op.clone(),
            cause: Cause::UnexpectedReply {
                status: self.status,
            },
        }
    }

    /// The shared failures, a rejection, or (anything else) an unexpected
    /// reply, which may have been applied.
    pub(super) fn failure(&self, op: &OperationId) -> Error {
        let wire = self.wire();
        let retry_after = wire.retry_after_ms.map(Duration::from_millis);
        match self.outcome() {
            "unavailable" => Error::Unavailable {
                retry_after,
                cause: Cause::Service,
            },
            "overloaded" => Error::Overloaded { retry_after },
            // A request that overran the service's own request timeout may
            // have reached the store: as ambiguous as `indeterminate`.
            "indeterminate" | "request_timeout" => Error::Indeterminate {
                operation_id: op.clone(),
                cause: Cause::Service,
            },
            outcome if (400..500).contains(&self.status) => Error::Rejected(Box::new(Rejection {
                status: self.status,
                outcome: if outcome.is_empty() {
                    "<none>".to_owned()
                } else {
                    outcome.to_owned()
                },
                detail: wire.detail.clone().unwrap_or_default(),
                errors: wire
                    .errors
                    .iter()
                    .flatten()
                    .map(|e| FieldError {
                        field: e.field.clone(),
                        message: e.message.clone(),
                    })
                    .collect(),
            })),
            _ => self.unexpected(op),
        }
    }

    /// The `lease` member, checked against the resource asked for.
    pub(super) fn lease(&self, resource: &ResourceId, op: &OperationId) -> Result<Lease, Error> {
        let w = self
            .wire()
            .lease
            .as_ref()
            .ok_or_else(|| self.unexpected(op))?;
        let purpose = Purpose::parse(&w.purpose).map_err(|_| self.unexpected(op))?;
        let digest = ResourceDigest::parse(&w.digest).map_err(|_| self.unexpected(op))?;
        if purpose != resource.purpose || digest != resource.digest || w.guarantee != "fenced" {
            return Err(self.unexpected(op));
        }
        Ok(Lease {
            purpose,
            digest,
            fencing_token: w.fencing_token,
            ttl_ms: w.ttl_ms,
            remaining_ms: w.remaining_ms,
            guarantee: Guarantee::Fenced,
            replication: w.replication,
            holder: w.holder.clone(),
            acquired_at: w.acquired_at,
            renewed_at: w.renewed_at,
            max_hold_ms: w.max_hold_ms,
            hold_ends_at: w.hold_ends_at,
        })
    }

    /// The `leases` of a `listed` answer, each digest checked.
    pub(super) fn listed(&self, op: &OperationId) -> Result<Vec<ListedLease>, Error> {
        let leases = self
            .wire()
            .leases
            .as_ref()
            .ok_or_else(|| self.unexpected(op))?;
        leases
            .iter()
            .map(|w| {
                Ok(ListedLease {
                    digest: ResourceDigest::parse(&w.digest).map_err(|_| self.unexpected(op))?,
                    holder: w.holder.clone(),
                    fencing_token: w.fencing_token,
                    remaining_ms: w.remaining_ms,
                    ttl_ms: w.ttl_ms,
                    acquired_at: w.acquired_at,
                    renewed_at: w.renewed_at,
                    holders: w.holders,
                    limit: w.limit,
                    mode: w.mode,
                    permits: w.permits.clone(),
                    session: w.session.clone(),
                })
            })
            .collect()
    }

    pub(super) fn retry_after_ms(&self, op: &OperationId) -> Result<u64, Error> {
        self.wire()
            .retry_after_ms
            .ok_or_else(|| self.unexpected(op))
    }
}

/// An `inspected` answer, checked against the contract (both
/// [`Client::inspect`] and the long-poll read it).
pub(super) fn inspection(reply: &Reply, op: &OperationId) -> Result<Inspection, Error> {
    if reply.outcome() != "inspected" {
        return Err(reply.failure(op));
    }
    let w = reply.wire();
    let held_by = match w.held_by.as_deref() {
        None => None,
        Some("caller") => Some(HeldBy::Caller),
        Some("caller_other_operation") => Some(HeldBy::CallerOtherOperation),
        Some("other") => Some(HeldBy::Other),
        Some(_) => return Err(reply.unexpected(op)),
    };
    Ok(Inspection {
        held: w.held.ok_or_else(|| reply.unexpected(op))?,
        version: w.version.clone().ok_or_else(|| reply.unexpected(op))?,
        remaining_ms: w.remaining_ms,
        fencing_token: w.fencing_token,
        held_by,
        holder: w.holder.clone(),
        ttl_ms: w.ttl_ms,
        acquired_at: w.acquired_at,
        renewed_at: w.renewed_at,
        limit: w.limit,
        mode: w.mode,
        holders: w.holders.unwrap_or(0),
        permits: w.permits.clone().unwrap_or_default(),
        lock_delay_ms: w.lock_delay_remaining_ms,
    })
}
