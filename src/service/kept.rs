//! The keep-alive streams this instance serves (docs/design.md §19), by
//! session, each woken when its session ends here or is given a new TTL
//! here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::domain::SessionId;

use super::LeaseService;

/// The sessions this instance keeps alive over a stream, each with the
/// signal that wakes its streams when the session ends here or is given a
/// new TTL here (an end on another instance is heard at the stream's next
/// renewal).
#[derive(Default)]
pub struct KeptAlive(Arc<Mutex<HashMap<SessionId, KeptEntry>>>);

struct KeptEntry {
    signal: watch::Sender<Signal>,
    streams: usize,
}

/// What happened to a kept session on this instance.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signal {
    /// It was ended here.
    pub ended: bool,
    /// A renew here gave it this TTL (ms): its streams renew at a third
    /// of it.
    pub ttl_ms: Option<u64>,
}

/// A stream's registration among the kept streams: the signal, and the entry
/// goes with the last stream of the session. Taken before the stream's
/// first renew, so no change after it is missed.
pub struct KeptGuard {
    kept: Arc<Mutex<HashMap<SessionId, KeptEntry>>>,
    id: SessionId,
    /// Changes when the session ends, or is given a TTL, on this instance.
    pub signal: watch::Receiver<Signal>,
}

impl Drop for KeptGuard {
    fn drop(&mut self) {
        let mut map = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.id) {
            entry.streams -= 1;
            if entry.streams == 0 {
                map.remove(&self.id);
            }
        }
    }
}

impl KeptAlive {
    fn signal(&self, id: &SessionId, change: impl FnOnce(&mut Signal)) {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get(id) {
            entry.signal.send_modify(change);
        }
    }

    /// Session `id` was ended on this instance.
    pub(super) fn ended(&self, id: &SessionId) {
        self.signal(id, |s| s.ended = true);
    }

    /// Session `id` was given a TTL of `ttl_ms` on this instance.
    pub(super) fn ttl_changed(&self, id: &SessionId, ttl_ms: u64) {
        self.signal(id, |s| s.ttl_ms = Some(ttl_ms));
    }
}

impl LeaseService {
    /// Registers a keep-alive stream of session `id` (until the guard
    /// drops): its signal changes when the session ends, or is given a
    /// TTL, on this instance.
    pub fn keep_alive(&self, id: &SessionId) -> KeptGuard {
        let mut map = self.kept.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(id.clone()).or_insert_with(|| KeptEntry {
            signal: watch::Sender::new(Signal::default()),
            streams: 0,
        });
        entry.streams += 1;
        KeptGuard {
            kept: Arc::clone(&self.kept.0),
            id: id.clone(),
            signal: entry.signal.subscribe(),
        }
    }
}
