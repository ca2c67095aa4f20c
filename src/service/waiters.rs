//! Reading a resource's waiters: one store read under the admission limit,
//! turned into the `waiters` outcome and counted as verb `waiters`.

use std::time::Instant;

use super::LeaseService;
use crate::domain::{Failure, ResourceId, Waiters, WaitersLimit};

impl LeaseService {
    /// The first `limit` waiters of `resource`, in queue order. A store
    /// failure is `unavailable` (a read changes nothing).
    pub async fn read_queue(
        &self,
        resource: &ResourceId,
        limit: WaitersLimit,
    ) -> Result<Waiters, Failure> {
        let started = Instant::now();
        let result = match self
            .admitted(self.store.waiters(resource, limit.get()))
            .await
        {
            Ok(Ok(read)) => Ok(Waiters::from(read)),
            Ok(Err(err)) => Err(self.failure(err, None)),
            Err(overloaded) => Err(overloaded),
        };
        self.record("waiters", resource, started, &result);
        result
    }
}
