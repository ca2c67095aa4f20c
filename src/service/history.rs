//! Reading a resource's history: one store read under the admission limit,
//! turned into the `history` outcome and counted as verb `history`.

use std::time::Instant;

use super::LeaseService;
use crate::domain::{Failure, History, HistoryBound, HistoryLimit, ResourceId};

impl LeaseService {
    /// The newest `limit` changes of `resource`, newest first. A store
    /// failure is `unavailable` (a read changes nothing).
    pub async fn history(
        &self,
        resource: &ResourceId,
        limit: HistoryLimit,
    ) -> Result<History, Failure> {
        let started = Instant::now();
        let result = match self
            .admitted(self.store.history(resource, limit.get() as usize))
            .await
        {
            Ok(Ok(entries)) => Ok(History {
                entries: entries.into_iter().map(Into::into).collect(),
            }),
            Ok(Err(err)) => Err(self.failure(err, None)),
            Err(overloaded) => Err(overloaded),
        };
        self.record("history", resource, started, &result);
        result
    }

    /// What the store keeps of each resource's history (the largest
    /// `limit`).
    pub fn history_bound(&self) -> HistoryBound {
        self.store.history_bound()
    }
}
