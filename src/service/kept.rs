//! The keep-alive streams this instance serves (docs/design.md §19), by
//! session, each woken when its session ends here or is given a new TTL
//! here.

use crate::domain::SessionId;

use super::LeaseService;

/// The sessions this instance keeps alive over a stream, each with the
/// signal that wakes its stream when the session ends here (an end on
/// another instance is heard at the stream's next renewal).
#[derive(Default)]
pub struct KeptAlive(std::sync::Mutex<std::collections::HashMap<SessionId, KeptEntry>>);

struct KeptEntry {
    ended: tokio_util::sync::CancellationToken,
    ttl: tokio::sync::watch::Sender<u64>,
    streams: usize,
}

/// A stream's registration in [`KeptAlive`]: the signal, and the entry
/// goes with the last stream of the session.
pub struct KeptGuard<'a> {
    kept: &'a KeptAlive,
    id: SessionId,
    /// Cancelled when the session ends on this instance.
    pub ended: tokio_util::sync::CancellationToken,
    /// The session's TTL (ms) when a renew on this instance gave it one
    /// (a `PATCH` with `ttlMs`): the stream renews at a third of it.
    pub ttl: tokio::sync::watch::Receiver<u64>,
}

impl Drop for KeptGuard<'_> {
    fn drop(&mut self) {
        let mut map = self.kept.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.id) {
            entry.streams -= 1;
            if entry.streams == 0 {
                map.remove(&self.id);
            }
        }
    }
}

impl KeptAlive {
    pub(super) fn ended(&self, id: &SessionId) {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get(id) {
            entry.ended.cancel();
        }
    }

    /// Session `id` was given a TTL of `ttl_ms` on this instance.
    pub(super) fn ttl_changed(&self, id: &SessionId, ttl_ms: u64) {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get(id) {
            entry.ttl.send_replace(ttl_ms);
        }
    }
}

impl LeaseService {
    /// Registers a keep-alive stream of session `id` (until the guard
    /// drops): its signal fires when the session ends on this instance.
    pub fn keep_alive(&self, id: &SessionId) -> KeptGuard<'_> {
        let mut map = self.kept.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(id.clone()).or_insert_with(|| KeptEntry {
            ended: tokio_util::sync::CancellationToken::new(),
            ttl: tokio::sync::watch::Sender::new(0),
            streams: 0,
        });
        entry.streams += 1;
        KeptGuard {
            kept: &self.kept,
            id: id.clone(),
            ended: entry.ended.clone(),
            ttl: entry.ttl.subscribe(),
        }
    }
}
