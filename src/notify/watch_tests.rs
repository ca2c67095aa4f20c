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
