//! Operator verbs: break (docs/design.md §17).

use std::time::Instant;

use super::core::LeaseService;
use crate::domain::{BreakOutcome, Failure, OperationId, ResourceId, Revocation};
use crate::store::{StoreBreak, StoreError};

impl LeaseService {
    /// Removes every live permit of `resource`, or the one with
    /// `fencing_token`: waiters are woken, no lock-delay starts, each
    /// broken holder's next renew answers `lost`/`revoked` and its release
    /// `already_absent`/`revoked`, watchers hear `revoked` with
    /// `revocation`.
    pub async fn break_lease(
        &self,
        resource: &ResourceId,
        fencing_token: Option<u64>,
        revocation: &Revocation,
    ) -> Result<BreakOutcome, Failure> {
        let started = Instant::now();
        let answer = self
            .admitted(self.store.break_lease(resource, fencing_token, revocation))
            .await
            .map(|r| {
                r.map(|r| {
                    self.ended(resource, &r.ended_holds);
                    r.value
                })
            });
        let result = match answer {
            Err(failure) => Err(failure),
            Ok(Ok(StoreBreak::Broken(permits))) => {
                tracing::info!(
                    tag = %resource.tag(),
                    permits,
                    key_name = revocation.key_name.as_deref().unwrap_or(""),
                    reason = revocation.reason.as_ref().map_or("", |r| r.as_str()),
                    "lease broken"
                );
                Ok(BreakOutcome::Broken { permits })
            }
            Ok(Ok(StoreBreak::NothingToBreak)) => Ok(BreakOutcome::NothingToBreak),
            // No attempt names a break: an uncertain one is `indeterminate`
            // with the operation id `break` (it may have applied; breaking
            // again is safe: a second break finds nothing to break).
            Ok(Err(StoreError::Indeterminate(reason))) => match OperationId::parse("break") {
                Ok(operation_id) => {
                    tracing::warn!(reason, "store reply uncertain (break)");
                    Err(Failure::Indeterminate { operation_id })
                }
                Err(_) => Err(self.failure(StoreError::Indeterminate(reason), None)),
            },
            Ok(Err(err)) => Err(self.failure(err, None)),
        };
        self.record("break", resource, started, &result);
        result
    }
}
