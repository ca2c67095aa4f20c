//! Unit tests of the watch hub: groups, classification of changes, versions.

use super::*;

fn snapshot(version: &str, fence: Option<u64>, remaining_ms: u64) -> Snapshot {
    Snapshot::new(Inspection {
        held: fence.is_some(),
        version: version.to_owned(),
        remaining_ms: fence.map(|_| remaining_ms),
        fencing_token: fence,
        held_by: None,
        holder: None,
        ttl_ms: fence.map(|_| 30_000),
        acquired_at: None,
        renewed_at: None,
        limit: None,
        mode: None,
        holders: u32::from(fence.is_some()),
        permits: Vec::new(),
        lock_delay_ms: None,
    })
}

/// A store of one resource for a hub: its state, and how often a group read it.
fn fake_store() -> (Arc<Mutex<Inspection>>, Arc<AtomicUsize>, Read) {
    let state = Arc::new(Mutex::new(snapshot("1.0", None, 0).inspection));
    let reads = Arc::new(AtomicUsize::new(0));
    let (s, r) = (Arc::clone(&state), Arc::clone(&reads));
    let read: Read = Arc::new(move |_| {
        r.fetch_add(1, Ordering::SeqCst);
        let now = s
            .lock()
            .map(|g| g.clone())
            .map_err(|_| Failure::Unavailable { retry_after_ms: 1 });
        Box::pin(async move { now })
    });
    (state, reads, read)
}

fn resource() -> ResourceId {
    ResourceId {
        purpose: crate::domain::Purpose::parse("p").expect("purpose"),
        digest: crate::domain::ResourceDigest::of_raw_id("r"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_read_per_change_fans_out_to_every_watcher() {
    let hub = WatchHub::default();
    let (state, reads, read) = fake_store();
    let stop = CancellationToken::new();
    let r = resource();
    let mut watchers: Vec<Watcher> = (0..100)
        .map(|_| {
            hub.join(&r, 1000, || Arc::clone(&read), &stop)
                .expect("admitted")
        })
        .collect();
    for w in &mut watchers {
        assert_eq!(w.current().await.expect("read").version(), "1.0");
    }
    assert_eq!(reads.load(Ordering::SeqCst), 1, "one read for 100 watchers");
    *state.lock().expect("lock") = snapshot("2.1", Some(5), 30_000).inspection;
    hub.changed(&r.tag(), Some(Change::Acquired));
    for w in &mut watchers {
        let (change, s) = w.next().await.expect("change");
        assert_eq!((change, s.version()), (Change::Acquired, "2.1"));
    }
    assert_eq!(
        reads.load(Ordering::SeqCst),
        2,
        "one more read for the change"
    );
    assert!(
        hub.join(&r, 100, || Arc::clone(&read), &stop).is_none(),
        "cap"
    );
    assert_eq!(hub.watchers(), 100);
    drop(watchers);
    assert_eq!(
        (hub.watchers(), hub.groups()),
        (0, 0),
        "nothing left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_of_many_leaving_watchers_removes_the_group() {
    let hub = WatchHub::default();
    let (_, _, read) = fake_store();
    let stop = CancellationToken::new();
    let r = resource();
    for _ in 0..200 {
        let watchers: Vec<Watcher> = (0..4)
            .map(|_| {
                hub.join(&r, 100, || Arc::clone(&read), &stop)
                    .expect("admitted")
            })
            .collect();
        assert_eq!(hub.groups(), 1);
        std::thread::scope(|s| {
            for w in watchers {
                s.spawn(move || drop(w));
            }
        });
        assert_eq!((hub.watchers(), hub.groups()), (0, 0), "group left behind");
    }
}

#[test]
fn versions_order_by_changes_then_falling_live_count() {
    assert!(newer("5.1", "4.1"));
    assert!(newer("5.0", "5.1"));
    assert!(!newer("5.1", "5.0"));
    assert!(!newer("5.1", "5.1"));
    assert!(!newer("4.0", "5.1"));
    assert!(newer("x", "5.1"));
    assert!(!newer("x", "x"));
}

#[test]
fn changes_follow_from_the_two_states() {
    let free = snapshot("4.0", None, 0);
    let held = snapshot("5.1", Some(7), 30_000);
    assert_eq!(classify(&free, &held, 0), Change::Acquired);
    assert_eq!(
        classify(&held, &snapshot("7.1", Some(9), 30_000), 0),
        Change::Acquired
    );
    assert_eq!(
        classify(&held, &snapshot("6.1", Some(7), 30_000), 0),
        Change::HolderChanged
    );
    // Gone long before its time, the count moved: a release.
    assert_eq!(
        classify(&held, &snapshot("6.0", None, 0), 0),
        Change::Released
    );
    // Gone with the count unmoved, well before its time: a release
    // (the embedded store counts no change for it).
    assert_eq!(
        classify(&held, &snapshot("5.0", None, 0), 0),
        Change::Released
    );
    // Gone when its time was up: an expiry, unless a release was heard.
    let ending = snapshot("5.1", Some(7), 0);
    assert_eq!(
        classify(&ending, &snapshot("5.0", None, 0), 0),
        Change::Expired
    );
    assert_eq!(
        classify(
            &ending,
            &snapshot("5.0", None, 0),
            hint_bit(Some(Change::Released))
        ),
        Change::Released
    );
}

/// A socket for [`Watcher::attach`]: takes at most `room` more bytes
/// (`usize::MAX`: no bound), keeps what it took, and counts every write
/// tried on `tries`.
struct FakeSocket {
    took: Mutex<Vec<u8>>,
    room: Mutex<usize>,
    tries: watch::Sender<usize>,
}

impl FakeSocket {
    fn new(room: usize, tries: &watch::Sender<usize>) -> Arc<Self> {
        Arc::new(Self {
            took: Mutex::new(Vec::new()),
            room: Mutex::new(room),
            tries: tries.clone(),
        })
    }

    fn took(&self) -> String {
        String::from_utf8(self.took.lock().expect("lock").clone()).expect("UTF-8")
    }

    fn make_room(&self, room: usize) {
        *self.room.lock().expect("lock") = room;
    }
}

impl Socket for FakeSocket {
    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut room = self.room.lock().expect("lock");
        let n = bytes.len().min(*room);
        *room -= n;
        self.took
            .lock()
            .expect("lock")
            .extend_from_slice(&bytes[..n]);
        self.tries.send_modify(|t| *t += 1);
        if n == 0 {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

fn encode(change: Change, s: &Snapshot) -> bytes::Bytes {
    bytes::Bytes::from(format!("{} {}\n", change.as_str(), s.version()))
}

/// Whether `sink` was woken (takes the wake-up).
fn woken(sink: &Sink) -> bool {
    use futures_util::FutureExt as _;
    sink.behind.notified().now_or_never().is_some()
}

/// Until `tries` has counted `n` writes tried (bounded).
async fn until_tries(tries: &watch::Sender<usize>, n: usize) {
    let mut rx = tries.subscribe();
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|t| *t >= n))
        .await
        .expect("the group did not write within 10 s")
        .expect("tries sender");
}

/// Sets the store's state to `version` (held with `fence`, or free) and
/// tells the hub.
fn change(hub: &WatchHub, state: &Mutex<Inspection>, version: &str, fence: Option<u64>) {
    *state.lock().expect("lock") = snapshot(version, fence, 30_000).inspection;
    hub.changed(&resource().tag(), None);
}

// More watchers than one task writes (`sink::PER_TASK`): the fan-out is
// split over tasks, on two worker threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_writes_attached_sockets_itself_without_waking_their_tasks() {
    const N: usize = 2_100;
    let hub = WatchHub::default();
    let (state, _, read) = fake_store();
    let stop = CancellationToken::new();
    let (tries, _) = watch::channel(0);
    let mut streams = Vec::new();
    for _ in 0..N {
        let mut w = hub
            .join(&resource(), N, || Arc::clone(&read), &stop)
            .expect("admitted");
        w.current().await.expect("read");
        let socket = FakeSocket::new(usize::MAX, &tries);
        let sink = w.attach(socket.clone(), encode, None);
        // Attaching wakes the task once, to catch up: nothing to write.
        assert!(woken(&sink));
        assert_eq!(w.flush(), Flush::CaughtUp);
        streams.push((w, sink, socket));
    }
    change(&hub, &state, "2.1", Some(5));
    until_tries(&tries, N).await;
    for (w, sink, socket) in &mut streams {
        assert_eq!(socket.took(), "acquired 2.1\n");
        assert!(
            !woken(sink),
            "a task was woken for a change the group wrote"
        );
        assert_eq!(w.flush(), Flush::CaughtUp);
    }
    change(&hub, &state, "3.0", None);
    until_tries(&tries, 2 * N).await;
    for (_, sink, socket) in &streams {
        assert_eq!(socket.took(), "acquired 2.1\nreleased 3.0\n");
        assert!(!woken(sink));
    }
    drop(streams);
    assert_eq!((hub.watchers(), hub.groups()), (0, 0));
}

/// A watcher of a fresh hub's resource, attached to a socket with `room`
/// bytes, `left` events allowed, caught up; the store's state and the
/// count of writes tried.
async fn one_attached(
    room: usize,
    left: Option<u32>,
) -> (
    WatchHub,
    Arc<Mutex<Inspection>>,
    watch::Sender<usize>,
    (Watcher, Arc<Sink>, Arc<FakeSocket>),
) {
    let hub = WatchHub::default();
    let (state, _, read) = fake_store();
    let (tries, _) = watch::channel(0);
    let mut w = hub
        .join(
            &resource(),
            10,
            || Arc::clone(&read),
            &CancellationToken::new(),
        )
        .expect("admitted");
    w.current().await.expect("read");
    let socket = FakeSocket::new(room, &tries);
    let sink = w.attach(socket.clone(), encode, left);
    // Attaching wakes the task once, to catch up: nothing to write.
    assert!(woken(&sink));
    assert_eq!(w.flush(), Flush::CaughtUp);
    (hub, state, tries, (w, sink, socket))
}

#[tokio::test]
async fn a_full_socket_leaves_the_rest_to_its_task_whole_and_in_order() {
    let (hub, state, tries, (mut w, sink, socket)) = one_attached(4, None).await;

    // The socket takes 4 bytes of the event: the task is woken for the rest.
    change(&hub, &state, "2.1", Some(5));
    until_tries(&tries, 1).await;
    assert!(woken(&sink));
    assert_eq!(socket.took(), "acqu");
    assert_eq!(w.flush(), Flush::Full);
    // Two more changes while it is full: the group writes nothing (it
    // would cut into the event), and leaves both to the task.
    socket.make_room(0);
    change(&hub, &state, "3.0", None);
    tokio::time::timeout(Duration::from_secs(10), sink.behind.notified())
        .await
        .expect("woken for the first change");
    assert_eq!(socket.took(), "acqu");
    change(&hub, &state, "4.1", Some(8));
    tokio::time::timeout(Duration::from_secs(10), sink.behind.notified())
        .await
        .expect("woken for the second change");
    socket.make_room(usize::MAX);
    assert_eq!(w.flush(), Flush::CaughtUp);
    // The first event whole, then the latest state, as a change from the
    // one the watcher saw last.
    assert_eq!(socket.took(), "acquired 2.1\nacquired 4.1\n");
}

#[tokio::test]
async fn max_events_stop_the_group_writing_and_end_the_stream() {
    let (hub, state, tries, (mut w, sink, socket)) = one_attached(usize::MAX, Some(1)).await;
    change(&hub, &state, "2.1", Some(5));
    until_tries(&tries, 1).await;
    // The last event it may send: its task is woken to end the stream.
    assert!(woken(&sink));
    assert_eq!(w.flush(), Flush::Done);
    change(&hub, &state, "3.0", None);
    tokio::time::timeout(Duration::from_secs(10), sink.behind.notified())
        .await
        .expect("woken, not written to");
    assert_eq!(w.flush(), Flush::Done);
    assert_eq!(socket.took(), "acquired 2.1\n");
    assert_eq!(w.close(), None);
}
