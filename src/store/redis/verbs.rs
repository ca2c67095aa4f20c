//! The lease verbs on Redis: each builds its script's arguments (named
//! in the script's header, `lua/<verb>.lua`) and decodes its reply.

use redis::Value;

use super::call::*;
use super::decode::*;
use super::keys::*;
use super::reply::{bad_reply, ints, label};
use super::scripts::SCRIPTS;
use super::store::*;
use crate::domain::{Attempt, HeldBy, HolderLabel, Mode, ResourceId, Ttl};
use crate::store::{
    AcquireSpec, Contention, Probe, QueueOp, Replicated, Replication, StoreAcquire, StoreError,
    StoreInspect, StoreLease, StoreRelease, StoreRenew, PERMITS_SHOWN,
};

impl RedisStore {
    pub(in crate::store) async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        spec: &AcquireSpec<'_>,
    ) -> Result<Replicated<StoreAcquire>, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let ttl = spec.ttl;
        let ttl_text = ttl.ms().to_string();
        let shape = spec.shape;
        // The script's `shape` argument: empty for the common case, so the
        // uncontended plain acquire sends (and Redis parses) no more than it
        // must.
        let shape_text = if shape.is_plain() && shape.lock_delay_ms == 0 && spec.queued_as.is_none()
        {
            String::new()
        } else {
            format!(
                "{}:{}:{}:{}",
                shape.limit,
                shape.mode.code(),
                shape.lock_delay_ms,
                spec.queued_as.unwrap_or("")
            )
        };
        let done = self
            .run(Call {
                script: &SCRIPTS.acquire,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &ttl_text,
                    spec.holder.map_or("", HolderLabel::as_str),
                    &shape_text,
                ],
                acks: self.acks,
            })
            .await?;
        let items = &done.value;
        let [status] = ints::<1>(items)?;
        let value = match status {
            1 => {
                let [_, token, now] = ints::<3>(items)?;
                let now = store_time(now)?;
                StoreAcquire::Acquired(StoreLease {
                    fencing_token: token_of(token)?,
                    remaining_ms: ttl.ms(),
                    ttl_ms: ttl.ms(),
                    acquired_at: now,
                    renewed_at: now,
                    holder: spec.holder.cloned(),
                })
            }
            2 => {
                let [_, remaining, token, acquired, renewed, granted] = ints::<6>(items)?;
                StoreAcquire::Replayed(StoreLease {
                    fencing_token: token_of(token)?,
                    remaining_ms: non_negative(remaining).unwrap_or(0),
                    ttl_ms: non_negative(granted).ok_or_else(bad_reply)?,
                    acquired_at: store_time(acquired)?,
                    renewed_at: store_time(renewed)?,
                    holder: label(items, 6)?,
                })
            }
            3 => StoreAcquire::OwnerOperationConflict {
                remaining_ms: non_negative(ints::<2>(items)?[1]),
            },
            0 => {
                let [_, retry, why] = ints::<3>(items)?;
                StoreAcquire::Contended {
                    remaining_ms: non_negative(retry),
                    why: match why {
                        0 => Contention::Held,
                        1 => Contention::LockDelay,
                        2 => Contention::Queued,
                        3 => Contention::Requeue,
                        _ => return Err(bad_reply()),
                    },
                }
            }
            4 => StoreAcquire::LimitMismatch {
                limit: u32::try_from(ints::<2>(items)?[1]).map_err(|_| bad_reply())?,
            },
            _ => return Err(bad_reply()),
        };
        Ok(Replicated {
            value,
            replication: done.replication,
        })
    }

    pub(in crate::store) fn queue_member(&self, mode: Mode) -> String {
        let n = self
            .queue_members
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}:{}:{n}", mode.code(), self.instance)
    }

    pub(in crate::store) async fn queue(
        &self,
        resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<(), StoreError> {
        let queue = key(&self.namespace, "queue", resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let (verb, member) = match op {
            QueueOp::Enter(member) => ("enter", member),
            QueueOp::EnterFront(member) => ("front", member),
            QueueOp::Beat(roster) => ("beat", roster),
            QueueOp::Leave(member) => ("leave", member),
        };
        let done = self
            .run(Call {
                script: &SCRIPTS.queue,
                tag: &tag,
                keys: &[&queue, &seq],
                args: &[
                    verb,
                    &self.instance,
                    QUEUE_HORIZON_MS,
                    SEQ_KEY_TTL_TEXT,
                    &self.wake_channel,
                    &tag,
                    member,
                ],
                acks: None,
            })
            .await?;
        match ints::<1>(&done.value)? {
            [1] => Ok(()),
            _ => Err(bad_reply()),
        }
    }

    pub(in crate::store) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<Replicated<StoreRenew>, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let ttl_text = ttl.ms().to_string();
        let seq_ttl = SEQ_KEY_TTL_MS.max(ttl.ms()).to_string();
        let done = self
            .run(Call {
                script: &SCRIPTS.renew,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &ttl_text,
                    holder.map_or("", HolderLabel::as_str),
                    &seq_ttl,
                    &self.wake_channel,
                    &tag,
                ],
                acks: self.acks,
            })
            .await?;
        let [status] = ints::<1>(&done.value)?;
        let value = match status {
            1 => {
                let [_, token, acquired, now] = ints::<4>(&done.value)?;
                let _ = holder; // sent; the script answers the label now held
                StoreRenew::Renewed(StoreLease {
                    fencing_token: token_of(token)?,
                    remaining_ms: ttl.ms(),
                    ttl_ms: ttl.ms(),
                    acquired_at: store_time(acquired)?,
                    renewed_at: store_time(now)?,
                    holder: label(&done.value, 4)?,
                })
            }
            0 => StoreRenew::Absent,
            -1 => StoreRenew::NotOwner,
            _ => return Err(bad_reply()),
        };
        Ok(Replicated {
            value,
            replication: done.replication,
        })
    }

    pub(in crate::store) async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<Replicated<StoreRelease>, StoreError> {
        let (status, replication) = self.release_as(resource, attempt, "").await?;
        let value = match status {
            1 => StoreRelease::Released,
            0 => StoreRelease::AlreadyAbsent,
            -1 => StoreRelease::NotOwner,
            _ => return Err(bad_reply()),
        };
        Ok(Replicated { value, replication })
    }

    /// The clean-up release of an acquisition whose waiter left: true when
    /// the permit went, false when it was claimed by a replay or renewed
    /// since (or is gone already).
    pub(in crate::store) async fn release_abandoned(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<bool, StoreError> {
        match self.release_as(resource, attempt, "a").await?.0 {
            1 => Ok(true),
            0 | -1 | 2 => Ok(false),
            _ => Err(bad_reply()),
        }
    }

    /// `release.lua` in `mode` (see its header): the status and replication.
    async fn release_as(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        mode: &str,
    ) -> Result<(i64, Option<Replication>), StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let done = self
            .run(Call {
                script: &SCRIPTS.release,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &self.wake_channel,
                    &tag,
                    mode,
                ],
                acks: self.acks,
            })
            .await?;
        let [status] = ints::<1>(&done.value)?;
        Ok((status, done.replication))
    }

    pub(in crate::store) async fn inspect(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        watching: bool,
    ) -> Result<StoreInspect, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let (token, op) = match probe {
            Probe::Anyone => ("", ""),
            Probe::Owner(token) => (token.expose(), ""),
            Probe::Attempt(a) => (a.owner_token.expose(), a.operation_id.as_str()),
        };
        let watch = if watching { WATCH_MARK_MS } else { "0" };
        let done = self
            .run(Call {
                script: &SCRIPTS.inspect,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[token, op, watch, SEQ_KEY_TTL_TEXT],
                acks: None,
            })
            .await?;
        let items = done.value;
        let [status, changes, live, limit, _, delay, held_by] = ints_or_mode(&items)?;
        let changes = non_negative(changes).ok_or_else(bad_reply)?;
        let live = usize::try_from(live).map_err(|_| bad_reply())?;
        let version = format!("{changes}.{live}");
        if status == 0 {
            return Ok(StoreInspect::Free {
                version,
                lock_delay_ms: non_negative(delay).filter(|d| *d > 0),
            });
        }
        if status != 1 || live == 0 || items.len() != 7 + 6 * live.min(PERMITS_SHOWN) {
            return Err(bad_reply());
        }
        let mode = match items.get(4) {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(Mode::from_code),
            Some(Value::SimpleString(s)) => Mode::from_code(s),
            _ => None,
        }
        .ok_or_else(bad_reply)?;
        let mut permits = Vec::with_capacity(live.min(PERMITS_SHOWN));
        for at in (7..items.len()).step_by(6) {
            let [remaining, fence, acquired, renewed, granted] = ints::<5>(&items[at..])?;
            permits.push(StoreLease {
                fencing_token: token_of(fence)?,
                remaining_ms: non_negative(remaining).unwrap_or(0),
                ttl_ms: non_negative(granted).ok_or_else(bad_reply)?,
                acquired_at: store_time(acquired)?,
                renewed_at: store_time(renewed)?,
                holder: label(&items, at + 5)?,
            });
        }
        permits.sort_by_key(|p| p.fencing_token);
        Ok(StoreInspect::Held {
            holders: u32::try_from(live).map_err(|_| bad_reply())?,
            permits,
            limit: u32::try_from(limit).map_err(|_| bad_reply())?,
            mode,
            held_by: match held_by {
                1 => Some(HeldBy::Caller),
                2 => Some(HeldBy::CallerOtherOperation),
                3 => Some(HeldBy::Other),
                _ => None,
            },
            version,
            lock_delay_ms: non_negative(delay).filter(|d| *d > 0),
        })
    }
}
