//! Reading a resource's fair queue (`GET …/waiters`): the same answer from
//! both stores, the first waiters in order with their instance, mode,
//! place time and holder label; never an owner token.

use super::{Store, StoreError};
use crate::domain::{QueueRead, ResourceId};

impl Store {
    /// The first `limit` live waiters of `resource`'s fair queue, in the
    /// order they will acquire; bounded work per call (at most
    /// [`crate::domain::QUEUE_SCAN`] entries read).
    pub async fn waiters(
        &self,
        resource: &ResourceId,
        limit: usize,
    ) -> Result<QueueRead, StoreError> {
        match self {
            Store::Memory(s) => s.waiters(resource, limit).await,
            Store::Redis(s) => s.waiters(resource, limit).await,
        }
    }
}
