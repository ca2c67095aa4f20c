//! Unit tests of the purpose hub's ids and event data.
use super::*;
use crate::notify::with_digest;

#[test]
fn ids_round_trip_and_foreign_ones_are_refused() {
    assert_eq!(
        parse_id(&event_id(0xdead_beef, 42)),
        Some((0xdead_beef, 42))
    );
    for bad in ["", "12.1", "deadbeef", "deadbeef-", "xyzxyzxy-1", "beef-1"] {
        assert_eq!(parse_id(bad), None, "{bad}");
    }
}

#[test]
fn the_digest_comes_first_in_the_data() {
    let digest = ResourceDigest::of_raw_id("x");
    let data = with_digest(&digest, r#"{"outcome":"inspected","held":false}"#);
    let value: serde_json::Value = serde_json::from_str(&data).expect("json");
    assert_eq!(value["digest"], digest.as_str());
    assert_eq!(value["held"], false);
}

#[test]
fn the_seen_purposes_keep_the_newest_when_full() {
    let hub = PurposeHub::default();
    let purpose = |i: usize| Purpose::parse(&format!("p-{i}")).expect("purpose");
    for i in 0..=SEEN_PURPOSES {
        hub.seen(&purpose(i));
    }
    hub.seen(&purpose(SEEN_PURPOSES)); // seen again: no change
    let seen = hub.seen_purposes();
    assert_eq!(seen.len(), SEEN_PURPOSES);
    assert!(!seen.contains(&"p-0".to_owned()), "the oldest is forgotten");
    assert!(
        seen.contains(&format!("p-{SEEN_PURPOSES}")),
        "the newest is kept"
    );
    assert!(seen.contains(&"p-1".to_owned()));
}

/// A purpose of `live` held leases whose reads are counted; while
/// `renewing` is set, each read finds its lease renewed since the last (a
/// later `renewedAt`).
fn counted_io(
    reads: &Arc<std::sync::atomic::AtomicUsize>,
    live: usize,
    renewing: &Arc<AtomicBool>,
) -> PurposeIo {
    let (r, renewing) = (Arc::clone(reads), Arc::clone(renewing));
    let read: super::super::watch::Read = Arc::new(move |_| {
        let n = r.fetch_add(1, Ordering::SeqCst) as u64;
        let moved = renewing.load(Ordering::SeqCst);
        let renewed_at = Some(crate::domain::StoreTime(if moved {
            1_000_000 + n
        } else {
            1
        }));
        Box::pin(async move {
            Ok(crate::domain::Inspection {
                held: true,
                version: "1.1".to_owned(),
                remaining_ms: Some(600_000),
                fencing_token: Some(1),
                held_by: None,
                holder: None,
                ttl_ms: Some(600_000),
                acquired_at: None,
                renewed_at,
                limit: None,
                mode: None,
                holders: 1,
                permits: Vec::new(),
                lock_delay_ms: None,
            })
        })
    });
    PurposeIo {
        read,
        live: Arc::new(move |_| {
            Box::pin(async move {
                Ok((0..live)
                    .map(|i| ResourceDigest::of_raw_id(&i.to_string()))
                    .collect())
            })
        }),
        mark: Arc::new(|_| Box::pin(async { Ok(Duration::ZERO) })),
    }
}

/// Review finding 3b (issue 39): every purpose stream that opens asks for
/// a full re-read of the purpose (its snapshot is fresh), and a steady
/// trickle of opens cost one each. Opens within [`RELIST_GAP`] now share
/// one: 40 streams opening 25 ms apart (1 s) cost at most one re-read per
/// gap (5, plus the first load), not 40.
#[tokio::test(start_paused = true)]
async fn streams_opening_in_a_trickle_share_the_purposes_re_reads() {
    use super::super::purpose_group::RELIST_GAP;
    use super::super::watch::WatchHub;
    const OPENS: u64 = 40;
    const APART: Duration = Duration::from_millis(25);
    let (hub, watch) = (PurposeHub::default(), WatchHub::default());
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let purpose = Purpose::parse("trickle").expect("purpose");
    let mut started = Vec::new();
    for _ in 0..OPENS {
        let admitted = watch.admit(1000).expect("admitted");
        let mut watcher = hub.join(
            &purpose,
            || counted_io(&reads, 8, &Arc::new(AtomicBool::new(false))),
            &stop,
            admitted,
        );
        started.push(tokio::spawn(async move {
            let start = watcher.start(None).await.expect("started");
            assert!(
                matches!(&start, Start::Snapshot { leases, .. } if leases.len() == 8),
                "{start:?}"
            );
            watcher
        }));
        tokio::time::sleep(APART).await;
    }
    let mut watchers = Vec::new();
    for s in started {
        watchers.push(s.await.expect("watcher"));
    }
    let passes = reads.load(Ordering::SeqCst) / 8;
    let window = APART.as_millis() * u128::from(OPENS);
    let bound = usize::try_from(window / RELIST_GAP.as_millis()).expect("small") + 2;
    assert!(
        passes <= bound,
        "{passes} full re-reads for {OPENS} streams opened over {window} ms (at most {bound})"
    );
    assert!(
        passes >= 2,
        "the opens were served by fresh reads: {passes}"
    );
    stop.cancel();
    drop(watchers);
}

/// Review finding 3c (issue 39): `renewed` events were bounded per lease
/// (one a second), not per purpose: a purpose of 1 000 renewing leases
/// sent 1 000 a second to every stream. Now at most
/// [`RENEWALS_PER_GAP`] a window per purpose, the rest owed to the next
/// windows (the longest owed first), with as many reads of them.
#[tokio::test(start_paused = true)]
async fn a_purpose_of_many_renewing_leases_sends_a_bounded_number_of_renewals() {
    use super::super::purpose_event::PurposeChange;
    use super::super::purpose_group::{RENEWALS_PER_GAP, RENEWAL_GAP};
    use super::super::watch::WatchHub;
    const LIVE: usize = 1_000;
    const WINDOWS: u32 = 3;
    let (hub, watch) = (PurposeHub::default(), WatchHub::default());
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let purpose = Purpose::parse("renewing").expect("purpose");
    let admitted = watch.admit(10).expect("admitted");
    let renewing = Arc::new(AtomicBool::new(false));
    let mut watcher = hub.join(
        &purpose,
        || counted_io(&reads, LIVE, &renewing),
        &stop,
        admitted,
    );
    let start = watcher.start(None).await.expect("started");
    assert!(matches!(&start, Start::Snapshot { leases, .. } if leases.len() == LIVE));
    renewing.store(true, Ordering::SeqCst);
    // Every lease renewed through this instance at once.
    for i in 0..LIVE {
        hub.renewed(&ResourceId {
            purpose: purpose.clone(),
            digest: ResourceDigest::of_raw_id(&i.to_string()),
        });
    }
    let began = (tokio::time::Instant::now(), reads.load(Ordering::SeqCst));
    let mut per_window = vec![0usize; WINDOWS as usize];
    let end = began.0 + RENEWAL_GAP * WINDOWS;
    loop {
        tokio::select! {
            next = watcher.next() => match next {
                Some(Next::Event(e)) if matches!(e.change, PurposeChange::Renewed) => {
                    let at = began.0.elapsed().as_millis() / RENEWAL_GAP.as_millis();
                    per_window[usize::try_from(at).expect("small")] += 1;
                }
                Some(Next::Event(_)) => {}
                other => panic!("the stream: {other:?}"),
            },
            () = tokio::time::sleep_until(end) => break,
        }
    }
    for (w, sent) in per_window.iter().enumerate() {
        assert!(
            *sent <= RENEWALS_PER_GAP,
            "window {w}: {sent} renewed events (at most {RENEWALS_PER_GAP}): {per_window:?}"
        );
        assert!(
            *sent > 0,
            "window {w}: renewals owed were never sent: {per_window:?}"
        );
    }
    // The renewals read LIVE leases once; after that only the owed ones,
    // a window's budget at a time.
    let read = reads.load(Ordering::SeqCst) - began.1;
    let bound = LIVE + RENEWALS_PER_GAP * WINDOWS as usize;
    assert!(
        read <= bound,
        "{read} reads in {WINDOWS} windows (at most {bound})"
    );
    stop.cancel();
}
