//! Watchers whose socket the group writes itself (issue 25: "a change is
//! written to all watchers of an instance without a per-watcher wake-up
//! storm"). A direct event stream ([`crate::http::direct`]) attaches its
//! socket to its [`Watcher`]; from then on, on each change, the group
//! writes the change's bytes (encoded once) to every such socket in one
//! loop, without waking the stream's task. The task is woken only for
//! what the group leaves to it ([`Sink::behind`]): bytes the socket did
//! not take at once, a change it cannot take as the group's (the watcher
//! saw another state last), the `maxEvents` bound reached, a failed
//! write. Every write to the socket, the group's or the task's, is made
//! under the sink's lock and never waits, so two never interleave.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::Notify;

use super::{change_from, kind_index, Group, Published, Snapshot, Watcher};
use crate::domain::Change;

/// A socket the group may write to without waiting.
pub trait Socket: Send + Sync {
    /// Writes what the socket takes now: bytes written, or `WouldBlock`.
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize>;
}

/// A change as written to an attached socket (framing included).
pub type Encode = fn(Change, &Snapshot) -> Bytes;

/// An attached watcher's socket and what was written to it.
pub struct Sink {
    socket: Arc<dyn Socket>,
    encode: Encode,
    state: Mutex<State>,
    /// Signalled when the group left work to the stream's task.
    pub behind: Notify,
}

struct State {
    /// The state the watcher saw last (written, or being written).
    last: Option<Arc<Snapshot>>,
    /// Events still to send (`maxEvents`); `None`: no bound.
    left: Option<u32>,
    /// Bytes the socket has not taken yet, and how many it has.
    pending: Option<(Bytes, usize)>,
    /// A write failed.
    failed: bool,
    /// The stream is ending: nobody writes events to it any more.
    closed: bool,
}

/// What [`Watcher::flush`] left.
#[derive(Debug, PartialEq, Eq)]
pub enum Flush {
    /// Everything is written: wait for [`Sink::behind`].
    CaughtUp,
    /// The socket is full: wait until it is writable, then flush again.
    Full,
    /// `maxEvents` are written: end the stream.
    Done,
    /// A write failed: the client is gone.
    Failed,
}

impl Sink {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `pending` without waiting; `Some` when the task must go on.
    fn write_pending(&self, state: &mut State) -> Option<Flush> {
        let (bytes, at) = state.pending.take()?;
        match self.socket.try_write(&bytes[at..]) {
            Ok(n) if at + n == bytes.len() => None,
            Ok(n) => {
                state.pending = Some((bytes, at + n));
                Some(Flush::Full)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                state.pending = Some((bytes, at));
                Some(Flush::Full)
            }
            Err(_) => {
                state.failed = true;
                Some(Flush::Failed)
            }
        }
    }
}

impl Watcher {
    /// From now on the group writes this watcher's changes to `socket`
    /// itself, encoded with `encode`, at most `left` of them (`maxEvents`
    /// left; `None`: no bound). The stream's task waits on the returned
    /// sink's [`Sink::behind`] and calls [`Watcher::flush`] when woken.
    pub fn attach(
        &mut self,
        socket: Arc<dyn Socket>,
        encode: Encode,
        left: Option<u32>,
    ) -> Arc<Sink> {
        let sink = Arc::new(Sink {
            socket,
            encode,
            state: Mutex::new(State {
                last: self.last.take(),
                left,
                pending: None,
                failed: false,
                closed: false,
            }),
            behind: Notify::new(),
        });
        let id = self.group.next_sink.fetch_add(1, Ordering::Relaxed);
        self.group.sinks().insert(id, Arc::clone(&sink));
        self.sink = Some((id, Arc::clone(&sink)));
        // A change the group published before the sink was in its list.
        sink.behind.notify_one();
        sink
    }

    /// Writes, without waiting, what the group left to this watcher: bytes
    /// the socket did not take, and the latest change when the group could
    /// not write it.
    pub fn flush(&mut self) -> Flush {
        let Some((_, sink)) = self.sink.clone() else {
            return Flush::Failed;
        };
        let mut state = sink.state();
        loop {
            if state.failed {
                return Flush::Failed;
            }
            if let Some(flush) = sink.write_pending(&mut state) {
                return flush;
            }
            if state.left == Some(0) {
                return Flush::Done;
            }
            if state.closed {
                return Flush::CaughtUp;
            }
            let published = self.rx.borrow_and_update().clone();
            let Published::State {
                snapshot,
                change,
                previous,
            } = published
            else {
                return Flush::CaughtUp;
            };
            let Some(change) = change_from(state.last.as_deref(), &snapshot, change, previous)
            else {
                return Flush::CaughtUp;
            };
            self.group.events[kind_index(change)].increment(1);
            state.pending = Some(((sink.encode)(change, &snapshot), 0));
            state.last = Some(snapshot);
            if let Some(left) = &mut state.left {
                *left = left.saturating_sub(1);
            }
        }
    }

    /// Queues `bytes` (a keep-alive) unless something is still to be
    /// written, then flushes.
    pub fn push(&mut self, bytes: Bytes) -> Flush {
        if let Some((_, sink)) = &self.sink {
            let mut state = sink.state();
            if state.pending.is_none() && !state.closed {
                state.pending = Some((bytes, 0));
            }
        }
        self.flush()
    }

    /// Ends the group's writes to the socket; what it has not taken yet of
    /// the last event (the task writes it before the stream's end).
    pub fn close(&mut self) -> Option<Bytes> {
        let (_, sink) = self.sink.as_ref()?;
        let mut state = sink.state();
        state.closed = true;
        state.pending.take().map(|(bytes, at)| bytes.slice(at..))
    }
}

/// Sockets one task writes in a fan-out: a larger fan-out is split over
/// tasks of this many, so the runtime's worker threads share it (one task
/// per change and few thousand watchers, not one per watcher).
const PER_TASK: usize = 1024;

impl Group {
    /// Writes `change` (from `previous` to `snapshot`) to every attached
    /// socket that saw `previous` last, one non-blocking write each; a sink it
    /// cannot serve so is left to its task. Returns once every socket was
    /// written to (or left), so the next change's writes come after.
    pub(super) async fn fan_out(
        &self,
        previous: &Arc<Snapshot>,
        snapshot: &Arc<Snapshot>,
        change: Change,
    ) {
        let mut sinks: Vec<Arc<Sink>> = self.sinks().values().cloned().collect();
        let mut others = Vec::new();
        while sinks.len() > PER_TASK {
            let rest = sinks.split_off(PER_TASK);
            let part = std::mem::replace(&mut sinks, rest);
            let (previous, snapshot) = (Arc::clone(previous), Arc::clone(snapshot));
            others.push(tokio::spawn(async move {
                write_all(&part, &previous, &snapshot, change).await
            }));
        }
        let mut written = write_all(&sinks, previous, snapshot, change).await;
        for other in others {
            written += other.await.unwrap_or(0);
        }
        self.events[kind_index(change)].increment(written);
    }
}

/// [`Group::fan_out`]'s loop over `sinks`: how many it wrote the change to.
/// Yields to other tasks when the task's budget is spent (a write is a
/// system call of several microseconds).
async fn write_all(
    sinks: &[Arc<Sink>],
    previous: &Arc<Snapshot>,
    snapshot: &Arc<Snapshot>,
    change: Change,
) -> u64 {
    let mut bytes: Option<Bytes> = None;
    let mut written = 0;
    for sink in sinks {
        {
            let mut state = sink.state();
            if state.closed || state.failed {
                continue;
            }
            match state.last.as_deref() {
                Some(last) if last.version() == snapshot.version() => continue,
                Some(last)
                    if last.version() == previous.version()
                        && state.pending.is_none()
                        && state.left != Some(0) => {}
                _ => {
                    drop(state);
                    sink.behind.notify_one();
                    continue;
                }
            }
            let bytes = bytes
                .get_or_insert_with(|| (sink.encode)(change, snapshot))
                .clone();
            written += 1;
            state.last = Some(Arc::clone(snapshot));
            if let Some(left) = &mut state.left {
                *left = left.saturating_sub(1);
            }
            state.pending = Some((bytes, 0));
            let left_to_task = sink.write_pending(&mut state).is_some() || state.left == Some(0);
            drop(state);
            if left_to_task {
                sink.behind.notify_one();
            }
        }
        tokio::task::consume_budget().await;
    }
    written
}
