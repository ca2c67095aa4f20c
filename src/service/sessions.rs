//! Sessions (docs/design.md §18): make, renew (and every attached lease
//! with it), end (releasing every attached lease), read, and an acquire
//! that attaches its lease to a session.

use crate::domain::{
    member, member_parts, AttachedRenew, Attempt, Failure, HolderLabel, LostLease, LostReason,
    OperationId, OwnerToken, Purpose, RenewOutcome, ResourceDigest, ResourceId, SessionGone,
    SessionId, SessionLease, SessionOutcome, SessionRecord, SessionView, Ttl,
};
use crate::store::{keep_ms, SessionCall, SessionFound, StoreError};

use futures_util::StreamExt as _;

use super::LeaseService;
use crate::domain::OutcomeName;
use crate::telemetry::{SESSION_LEASES_RENEWED, SESSION_OPERATIONS};

/// Counts a session verb's answer (bounded labels: the op and outcome names).
pub(super) fn count<T: OutcomeName>(op: &'static str, result: &Result<T, Failure>) {
    metrics::counter!(SESSION_OPERATIONS, "op" => op, "outcome" => result.outcome_name())
        .increment(1);
}

/// Releases in flight at once while a session ends.
const RELEASING: usize = 64;

pub(super) fn gone(found: &SessionFound) -> Option<SessionGone> {
    match found {
        SessionFound::Ended => Some(SessionGone::SessionEnded),
        SessionFound::Expired => Some(SessionGone::SessionExpired),
        SessionFound::Absent => Some(SessionGone::Absent),
        _ => None,
    }
}

/// The resource and operation id of a member of a session's set.
fn parse_member(m: &str) -> Option<(ResourceId, OperationId)> {
    let (purpose, digest, op) = member_parts(m)?;
    Some((
        ResourceId {
            purpose: Purpose::parse(purpose).ok()?,
            digest: ResourceDigest::parse(digest).ok()?,
        },
        OperationId::parse(op).ok()?,
    ))
}

impl LeaseService {
    pub(super) fn session_failure(&self, err: StoreError) -> Failure {
        self.failure(err, None)
    }

    /// A failure after part of a session verb was applied (the record
    /// renewed or ended, some leases done): not `unavailable` ("nothing
    /// was applied") but `indeterminate`, named by the session id (a
    /// retry of the verb is safe).
    fn partly(id: &SessionId, failure: Failure) -> Failure {
        match (failure, OperationId::parse(id.as_str())) {
            (Failure::Unavailable { .. }, Ok(operation_id)) => {
                Failure::Indeterminate { operation_id }
            }
            (failure, _) => failure,
        }
    }

    pub(super) async fn session_call(
        &self,
        id: &SessionId,
        call: SessionCall<'_>,
        keep: u64,
    ) -> Result<SessionFound, Failure> {
        let writes = !matches!(call, SessionCall::Get);
        match self.admitted(self.store.session(id, call, keep)).await? {
            Ok(found) => Ok(found),
            // A write whose reply was lost may have been applied.
            Err(StoreError::Indeterminate(reason)) if writes => {
                tracing::warn!(reason, session = %id, "store reply uncertain");
                Err(Self::partly(
                    id,
                    self.session_failure(StoreError::Unavailable(reason)),
                ))
            }
            Err(err) => Err(self.session_failure(err)),
        }
    }

    /// Makes a session for `attempt` (its owner token is the secret).
    pub async fn create_session(
        &self,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<SessionOutcome, Failure> {
        let result = self.create_session_inner(attempt, ttl, holder).await;
        count("create", &result);
        result
    }

    async fn create_session_inner(
        &self,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<SessionOutcome, Failure> {
        let id = SessionId::of(&attempt.owner_token);
        let call = SessionCall::Create {
            operation_id: attempt.operation_id.as_str(),
            ttl_ms: ttl.ms(),
            holder,
        };
        // A lost reply names the attempt: retried with it, it replays.
        let found = self
            .session_call(&id, call, keep_ms(ttl.ms()))
            .await
            .map_err(|f| match f {
                Failure::Indeterminate { .. } => Failure::Indeterminate {
                    operation_id: attempt.operation_id.clone(),
                },
                f => f,
            })?;
        Ok(match found {
            SessionFound::Live(r) => SessionOutcome::SessionCreated {
                session: SessionView::of(&id, &r),
            },
            SessionFound::Replayed(r) => SessionOutcome::ReplayedSameOperation {
                session: SessionView::of(&id, &r),
            },
            SessionFound::OtherOperation => SessionOutcome::OwnerOperationConflict,
            SessionFound::Full(_) => {
                return Err(self.overloaded());
            }
            other => SessionOutcome::Lost {
                reason: gone(&other).unwrap_or(SessionGone::Absent),
            },
        })
    }

    /// Every lease in session `id`'s set.
    async fn session_leases(
        &self,
        id: &SessionId,
    ) -> Result<Vec<(String, ResourceId, OperationId)>, Failure> {
        // The whole list in one read (a session holds at most
        // `session_max_leases`): pages by offset would skip a lease when
        // another is taken off the list between two of them.
        let all = self.settings.session_max_leases;
        let list = match self.store.session_page(id, 0, all).await {
            Ok(list) => list,
            Err(err) => return Err(self.session_failure(err)),
        };
        Ok(list
            .into_iter()
            .filter_map(|m| parse_member(&m).map(|(resource, op)| (m, resource, op)))
            .collect())
    }

    /// Renews session `id` for `ttl` (its own when `None`), and every
    /// lease attached to it to the session's new expiry.
    pub async fn renew_session(
        &self,
        id: &SessionId,
        token: &OwnerToken,
        ttl: Option<Ttl>,
    ) -> Result<SessionOutcome, Failure> {
        let result = self.renew_session_inner(id, token, ttl).await;
        count("renew", &result);
        result
    }

    async fn renew_session_inner(
        &self,
        id: &SessionId,
        token: &OwnerToken,
        ttl: Option<Ttl>,
    ) -> Result<SessionOutcome, Failure> {
        if !id.is_secret(token) {
            return Ok(SessionOutcome::NotOwner);
        }
        let ttl_ms = ttl.map(Ttl::ms);
        let keep = ttl_ms.map_or(0, keep_ms);
        let found = self
            .session_call(id, SessionCall::Renew { ttl_ms }, keep)
            .await?;
        let record = match found {
            SessionFound::Live(r) => r,
            other => {
                return Ok(SessionOutcome::Lost {
                    reason: gone(&other).unwrap_or(SessionGone::Absent),
                })
            }
        };
        if let Some(ms) = ttl_ms {
            // A stream kept here renews (from now) at a third of the new TTL.
            self.kept.ttl_changed(id, ms);
        }
        let lost = self
            .renew_leases(id, token, &record)
            .await
            .map_err(|f| Self::partly(id, f))?;
        // The leases it took off are no longer the session's.
        let mut session = SessionView::of(id, &record);
        session.leases = session.leases.saturating_sub(lost.len() as u64);
        Ok(SessionOutcome::Renewed { session, lost })
    }

    /// Gives every lease of session `id` the expiry of `record`; answers
    /// those it no longer holds (and drops them from the session).
    async fn renew_leases(
        &self,
        id: &SessionId,
        token: &OwnerToken,
        record: &SessionRecord,
    ) -> Result<Vec<LostLease>, Failure> {
        let leases = self.session_leases(id).await?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<(ResourceId, OperationId)> = leases
            .iter()
            .map(|(_, r, op)| (r.clone(), op.clone()))
            .collect();
        let fared = match self
            .admitted(
                self.store
                    .renew_attached(token, &pairs, record.expires_at, record.now),
            )
            .await?
        {
            Ok(fared) => fared,
            Err(err) => return Err(self.session_failure(err)),
        };
        let left = record.remaining_ms().max(1);
        let ttl = self.bounds().max_ttl().at_most(Some(left));
        let mut lost = Vec::new();
        let (mut light, mut full) = (0u64, 0u64);
        for ((m, resource, op), fared) in leases.iter().zip(fared) {
            if fared == AttachedRenew::Renewed {
                // A renewal changes no version: tell this instance's
                // purpose streams (docs/watching.md, `renewed`), as a
                // lease's own renew does.
                self.waiters.purposes().renewed(resource);
                light += 1;
                continue;
            }
            let attempt = Attempt {
                owner_token: token.clone(),
                operation_id: op.clone(),
            };
            let reason = match self.renew(resource, &attempt, ttl, None).await? {
                // Its hold bound comes before the session's new expiry (the
                // bound itself is compared: the time this renew granted
                // counts from later than the session's clock, so it says
                // less even when the bound comes after): the session no
                // longer carries it (answered `renewed` with the session's
                // time, its holder would believe past the bound). Released
                // now, listed `max_hold`: the renew just gave it the time
                // to its bound, and off the session no end would release
                // it.
                RenewOutcome::Renewed { lease }
                    if lease
                        .hold_ends_at
                        .is_some_and(|end| end < record.expires_at) =>
                {
                    self.release(resource, &attempt).await?;
                    LostReason::MaxHold
                }
                RenewOutcome::Renewed { .. } => {
                    full += 1;
                    continue;
                }
                RenewOutcome::Lost { reason } => reason,
            };
            lost.push(LostLease {
                purpose: resource.purpose.as_str().to_owned(),
                digest: resource.digest.as_str().to_owned(),
                reason,
            });
            self.session_call(id, SessionCall::Detach { member: m }, 0)
                .await?;
        }
        metrics::counter!(SESSION_LEASES_RENEWED, "path" => "light").increment(light);
        metrics::counter!(SESSION_LEASES_RENEWED, "path" => "full").increment(full);
        Ok(lost)
    }

    /// Ends session `id`: marks it ended, then releases every attached lease.
    pub async fn end_session(
        &self,
        id: &SessionId,
        token: &OwnerToken,
    ) -> Result<SessionOutcome, Failure> {
        let result = self.end_session_inner(id, token).await;
        count("end", &result);
        result
    }

    async fn end_session_inner(
        &self,
        id: &SessionId,
        token: &OwnerToken,
    ) -> Result<SessionOutcome, Failure> {
        if !id.is_secret(token) {
            return Ok(SessionOutcome::NotOwner);
        }
        let record = match self.session_call(id, SessionCall::Get, 0).await? {
            SessionFound::Live(r) => r,
            // Ended already: an end that failed half-way left leases on
            // its list (released by this retry); expired or gone: its
            // leases ended with it.
            SessionFound::Ended => {
                self.release_leases(id, token)
                    .await
                    .map_err(|f| Self::partly(id, f))?;
                self.session_call(id, SessionCall::Forget, 0)
                    .await
                    .map_err(|f| Self::partly(id, f))?;
                return Ok(SessionOutcome::AlreadyAbsent);
            }
            _ => return Ok(SessionOutcome::AlreadyAbsent),
        };
        let found = self
            .session_call(id, SessionCall::End, keep_ms(record.ttl_ms))
            .await?;
        if !matches!(found, SessionFound::Live(_)) {
            return Ok(SessionOutcome::AlreadyAbsent);
        }
        // Its streams on this instance say `lost` now, not at their next
        // renewal.
        self.kept.ended(id);
        let released = self
            .release_leases(id, token)
            .await
            .map_err(|f| Self::partly(id, f))?;
        self.session_call(id, SessionCall::Forget, 0)
            .await
            .map_err(|f| Self::partly(id, f))?;
        Ok(SessionOutcome::Ended { released })
    }

    /// Releases every lease in session `id`'s set; how many it held.
    async fn release_leases(&self, id: &SessionId, token: &OwnerToken) -> Result<u64, Failure> {
        let leases = self.session_leases(id).await?;
        // A window of RELEASING store calls in flight (no lockstep
        // batches: a slow call holds up only its own slot), so a killed
        // holder's 1 000 leases are free within the 1 s of §19.
        let mut pending = leases.iter();
        let mut calls = futures_util::stream::FuturesUnordered::new();
        let mut n = 0;
        loop {
            while calls.len() < RELEASING {
                let Some((_, resource, op)) = pending.next() else {
                    break;
                };
                calls.push(self.release_one(resource, token, op));
            }
            let Some(r) = calls.next().await else {
                break;
            };
            if r? == crate::domain::ReleaseOutcome::Released {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn release_one(
        &self,
        resource: &ResourceId,
        token: &OwnerToken,
        op: &OperationId,
    ) -> Result<crate::domain::ReleaseOutcome, Failure> {
        let attempt = Attempt {
            owner_token: token.clone(),
            operation_id: op.clone(),
        };
        self.release_for(resource, &attempt, true).await
    }

    /// Releases `resource` for `attempt` and takes it off session `id`.
    pub async fn release_session_lease(
        &self,
        id: &SessionId,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<crate::domain::ReleaseOutcome, Failure> {
        let outcome = self.release(resource, attempt).await;
        count("release", &outcome);
        let outcome = outcome?;
        if !matches!(outcome, crate::domain::ReleaseOutcome::NotOwner) {
            let m = member(
                resource.purpose.as_str(),
                resource.digest.as_str(),
                attempt.operation_id.as_str(),
            );
            self.session_call(id, SessionCall::Detach { member: &m }, 0)
                .await?;
        }
        Ok(outcome)
    }

    /// Session `id` and a page of its leases.
    pub async fn get_session(
        &self,
        id: &SessionId,
        offset: u64,
        limit: u64,
    ) -> Result<SessionOutcome, Failure> {
        let result = self.get_session_inner(id, offset, limit).await;
        count("read", &result);
        result
    }

    async fn get_session_inner(
        &self,
        id: &SessionId,
        offset: u64,
        limit: u64,
    ) -> Result<SessionOutcome, Failure> {
        let record = match self.session_call(id, SessionCall::Get, 0).await? {
            SessionFound::Live(r) => r,
            other => {
                return Ok(SessionOutcome::Lost {
                    reason: gone(&other).unwrap_or(SessionGone::Absent),
                })
            }
        };
        let page = match self.store.session_page(id, offset, limit).await {
            Ok(page) => page,
            Err(err) => return Err(self.session_failure(err)),
        };
        let next_cursor = (page.len() as u64 == limit).then(|| (offset + limit).to_string());
        let leases = page
            .iter()
            .filter_map(|m| member_parts(m))
            .map(|(purpose, digest, _)| SessionLease {
                purpose: purpose.to_owned(),
                digest: digest.to_owned(),
            })
            .collect();
        Ok(SessionOutcome::Session {
            session: SessionView::of(id, &record),
            leases,
            next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_after_part_was_applied_is_indeterminate() {
        let id = SessionId::parse(&format!("s1.{:032x}", 5)).expect("id");
        let after = LeaseService::partly(
            &id,
            Failure::Unavailable {
                retry_after_ms: 1000,
            },
        );
        assert_eq!(
            after,
            Failure::Indeterminate {
                operation_id: OperationId::parse(id.as_str()).expect("op")
            }
        );
        let shed = Failure::Overloaded { retry_after_ms: 50 };
        assert_eq!(LeaseService::partly(&id, shed.clone()), shed);
    }
}
