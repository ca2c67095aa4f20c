//! Listing a purpose's leases: one store page under the admission limit,
//! turned into the `listed` outcome and counted as verb `list`.

use std::time::Instant;

use super::LeaseService;
use crate::domain::{
    Failure, ListCursor, ListLimit, ListedLease, Listing, OutcomeName as _, Purpose,
};

impl LeaseService {
    /// One page of the live leases of `purpose`, from `cursor` (the start
    /// when `None`). A store failure is `unavailable` (a read changes
    /// nothing, so an uncertain one is no more than that).
    pub async fn list(
        &self,
        purpose: &Purpose,
        cursor: Option<&ListCursor>,
        limit: ListLimit,
    ) -> Result<Listing, Failure> {
        let started = Instant::now();
        let result = match self
            .admitted(self.store.list(purpose, cursor, limit.get()))
            .await
        {
            Ok(Ok(page)) => Ok(Listing {
                leases: page
                    .leases
                    .into_iter()
                    .map(|(digest, lease)| ListedLease {
                        digest,
                        holder: lease.holder,
                        fencing_token: lease.fencing_token,
                        remaining_ms: lease.remaining_ms,
                        ttl_ms: lease.ttl_ms,
                        acquired_at: lease.acquired_at,
                        renewed_at: lease.renewed_at,
                    })
                    .collect(),
                next_cursor: page.next.map(|next| next.encode(purpose)),
            }),
            Ok(Err(err)) => Err(self.failure(err, None)),
            Err(overloaded) => Err(overloaded),
        };
        if let Ok(listing) = &result {
            let listed = u64::try_from(listing.leases.len()).unwrap_or(u64::MAX);
            // One process-wide recorder, installed before any request.
            static LISTED: std::sync::OnceLock<metrics::Counter> = std::sync::OnceLock::new();
            LISTED
                .get_or_init(|| metrics::counter!(crate::telemetry::LIST_LEASES))
                .increment(listed);
        }
        self.meters.record(
            "list",
            result.outcome_name(),
            purpose.as_str(),
            started.elapsed().as_secs_f64(),
        );
        result
    }

    /// Whether the store issues cursors like `cursor` (one of the other
    /// store's kind is refused as malformed).
    pub fn accepts_cursor(&self, cursor: &ListCursor) -> bool {
        self.store.accepts(cursor)
    }
}
