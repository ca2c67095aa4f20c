//! Listing a purpose's leases: one store page under the admission limit,
//! turned into the `listed` outcome and counted as verb `list`.

use std::time::{Duration, Instant};

use super::LeaseService;
use crate::domain::{
    Failure, ListCursor, ListLimit, ListedLease, Listing, OutcomeName as _, PermitView, Purpose,
    ResourceDigest,
};
use crate::store::StoreListed;

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
                leases: page.leases.into_iter().filter_map(listed).collect(),
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

    /// The digests of every live lease of `purpose`: a listing to its end,
    /// in pages of 1000 (a purpose watch's first load and re-lists).
    pub async fn live_digests(&self, purpose: &Purpose) -> Result<Vec<ResourceDigest>, Failure> {
        let mut cursor: Option<ListCursor> = None;
        let mut out = Vec::new();
        loop {
            let page = match self
                .admitted(
                    self.store
                        .list(purpose, cursor.as_ref(), usize::from(ListLimit::MAX)),
                )
                .await
            {
                Ok(Ok(page)) => page,
                Ok(Err(err)) => return Err(self.failure(err, None)),
                Err(overloaded) => return Err(overloaded),
            };
            out.extend(page.leases.into_iter().map(|l| l.digest));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Marks `purpose` watched in the store; answers how long until every
    /// instance announces its changes (docs/watching.md).
    pub async fn mark_purpose_watched(&self, purpose: &Purpose) -> Result<Duration, Failure> {
        self.store
            .mark_purpose(purpose)
            .await
            .map_err(|err| self.failure(err, None))
    }

    /// Whether the store issues cursors like `cursor` (one of the other
    /// store's kind is refused as malformed).
    pub fn accepts_cursor(&self, cursor: &ListCursor) -> bool {
        self.store.accepts(cursor)
    }
}

/// A held resource as the API lists it: its oldest holder's record on top
/// (as inspect answers), every holder when there are several.
fn listed(found: StoreListed) -> Option<ListedLease> {
    let first = found.permits.first()?.clone();
    let holders = found.holders;
    Some(ListedLease {
        digest: found.digest,
        holder: first.holder,
        session: first.session,
        fencing_token: first.fencing_token,
        remaining_ms: first.remaining_ms,
        ttl_ms: first.ttl_ms,
        acquired_at: first.acquired_at,
        renewed_at: first.renewed_at,
        holders,
        limit: found.limit,
        mode: found.mode,
        permits: (holders > 1).then(|| found.permits.into_iter().map(PermitView::from).collect()),
    })
}
