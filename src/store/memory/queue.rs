//! The fair queue in the embedded store: one instance, so the waiters' own
//! FIFO turn is the queue and nothing is granted in the store (a release
//! wakes the next waiter, which acquires for itself). The places are kept
//! here only to be read (`GET …/waiters`): in the order they were taken,
//! with when and the holder label their ask carries; an entry goes with
//! its leave, the acquire that takes it, or a heartbeat's roster.

use std::sync::atomic::Ordering;

use super::super::records::LOCAL;
use super::{wall_ms, MemoryStore};
use crate::domain::{Mode, QueueEntry, QueueRead, ResourceId, StoreTime, QUEUE_SCAN};
use crate::store::{AcquireSpec, InQueue, QueueOp, Queued, StoreAcquire, StoreError};

impl MemoryStore {
    pub(in crate::store) fn queue_member(&self, mode: Mode) -> String {
        let n = self.queues.members.fetch_add(1, Ordering::Relaxed);
        format!("{}:{LOCAL}:{n}", mode.code())
    }

    pub(in crate::store) async fn queue(
        &self,
        resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<Queued, StoreError> {
        let tag = resource.tag();
        Ok(match op {
            // The waiter looks at once, as before any queue.
            QueueOp::Enter(member, ask) | QueueOp::EnterFront(member, ask) => {
                let entry = QueueEntry {
                    instance: LOCAL.to_owned(),
                    mode: ask.map_or(Mode::Exclusive, |a| a.spec.shape.mode),
                    since: wall_ms(),
                    holder: ask.and_then(|a| a.spec.holder.cloned()),
                };
                let mut places = self.queues.lock();
                let list = places.entry(tag).or_default();
                list.retain(|(m, _)| m != member);
                let at = if matches!(op, QueueOp::EnterFront(..)) {
                    0
                } else {
                    list.len()
                };
                list.insert(at, (member.to_owned(), entry));
                Queued::Entered(None)
            }
            QueueOp::Leave(member, _) => {
                self.queues.drop_where(&tag, |m| m == member);
                Queued::Left { granted: false }
            }
            QueueOp::Beat(roster) => {
                self.queues
                    .drop_where(&tag, |m| !roster.split(',').any(|r| r == m));
                Queued::Beaten
            }
        })
    }

    /// After an acquire: the caller's place goes when it acquired, or when
    /// this was its last look.
    pub(in crate::store) fn settle_place(
        &self,
        resource: &ResourceId,
        spec: &AcquireSpec<'_>,
        answer: &StoreAcquire,
    ) {
        let took = matches!(
            answer,
            StoreAcquire::Acquired(_) | StoreAcquire::Replayed(_)
        );
        let member = match spec.queue {
            InQueue::Leaving(m) => Some(m),
            InQueue::As(m) if took => Some(m),
            _ => None,
        };
        if let Some(member) = member {
            self.queues.drop_where(&resource.tag(), |m| m == member);
        }
    }

    /// The first `limit` places of `resource`'s queue. A resource nobody
    /// waits for on this instance has none (a place whose waiter acquired
    /// without its member reaching the store is dropped here).
    pub(in crate::store) async fn waiters(
        &self,
        resource: &ResourceId,
        limit: usize,
    ) -> Result<QueueRead, StoreError> {
        let tag = resource.tag();
        let now: StoreTime = wall_ms();
        if !self.waiters.is_waited_for(&tag) {
            self.queues.drop_where(&tag, |_| true);
        }
        let places = self.queues.lock();
        let list = places.get(&tag).map(Vec::as_slice).unwrap_or_default();
        let seen = list.len().min(QUEUE_SCAN);
        Ok(QueueRead {
            now,
            waiting: u32::try_from(seen).unwrap_or(u32::MAX),
            complete: list.len() <= QUEUE_SCAN,
            entries: list.iter().take(limit).map(|(_, e)| e.clone()).collect(),
            instances: Vec::new(),
        })
    }
}
