//! The fair queue in the embedded store: one instance, so the waiters' own
//! FIFO turn is the queue; nothing is kept, and nothing is granted in the
//! store (a release wakes the next waiter, which acquires for itself).

use super::MemoryStore;
use crate::domain::{Mode, ResourceId};
use crate::store::{QueueOp, Queued, StoreError};

impl MemoryStore {
    pub(in crate::store) fn queue_member(&self, mode: Mode) -> String {
        format!("{}:local", mode.code())
    }

    pub(in crate::store) async fn queue(
        &self,
        _resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<Queued, StoreError> {
        Ok(match op {
            // The waiter looks at once, as before any queue.
            QueueOp::Enter(..) | QueueOp::EnterFront(..) => Queued::Entered(None),
            QueueOp::Leave(..) => Queued::Left { granted: false },
            QueueOp::Beat(_) => Queued::Beaten,
        })
    }
}
