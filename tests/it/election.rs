//! Leader election with the Rust client (`--features client`): candidates
//! spread over two leasehold instances on one real `redis-server`, an
//! observer that never campaigns, a leader that dies without releasing, one
//! that resigns, a proclaim, and a campaign whose acquire answer is lost.
//!
//! Every wait is for an event (with a generous bound that only fails the
//! test); nothing sleeps to synchronise. Each leadership term is recorded
//! (start, end of the time it may act, fencing token) and the history is
//! checked: no two terms overlap, and fencing tokens grow.

#[allow(unused_imports)]
use crate::common;

use std::time::Duration;

use common::app::{args, unique, Backend, TestApp};
use common::fault_proxy::FaultProxy;
use common::redis::RedisServer;
use leasehold::client::{
    Client, ClientSettings, Election, ElectionError, ElectionEvent, ElectionSettings, Leader,
    Leadership, Observer, StopReason,
};
use leasehold::domain::{HolderLabel, Purpose, ResourceDigest, ResourceId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_millis(600);
/// The bound on any one wait for an event; reaching it fails the test.
const PATIENCE: Duration = Duration::from_secs(10);
const MS: Duration = Duration::from_millis(1);

/// The tests of this file run one at a time: the hand-over bounds (50 ms
/// after a cancel) are about the service and the client, not about sharing
/// two cores with another test's Redis and services.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn settings() -> ElectionSettings {
    ElectionSettings {
        wait: Duration::from_secs(5),
        retry_period: 100 * MS,
        ..ElectionSettings::new(TTL)
    }
}

fn resource() -> ResourceId {
    ResourceId {
        purpose: Purpose::parse("scheduler").expect("purpose"),
        digest: ResourceDigest::of_raw_id(&unique("leader-")),
    }
}

fn label(s: &str) -> HolderLabel {
    HolderLabel::parse(s).expect("holder label")
}

fn client(base: &str) -> Client {
    Client::new(ClientSettings::new(base)).expect("client")
}

/// What a participant was told, or noticed, stamped on arrival.
#[derive(Debug, Clone)]
enum Note {
    Event(ElectionEvent),
    /// The term's token fired; `valid_until` read at that moment.
    TermOver {
        fencing_token: u64,
        valid_until: Instant,
    },
}

#[derive(Debug, Clone)]
struct Told {
    who: usize,
    at: Instant,
    note: Note,
}

/// Forwards a participant's events into the test's one inbox, and notes
/// when each of its terms' token fires.
fn forward<T: Send + 'static>(
    who: usize,
    mut events: mpsc::Receiver<T>,
    wrap: fn(T) -> ElectionEvent,
    inbox: mpsc::UnboundedSender<Told>,
) {
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let event = wrap(event);
            if let ElectionEvent::StartedLeading(term) = &event {
                let (term, inbox) = (term.clone(), inbox.clone());
                tokio::spawn(async move {
                    term.token().cancelled().await;
                    let at = Instant::now();
                    let _ = inbox.send(Told {
                        who,
                        at,
                        note: Note::TermOver {
                            fencing_token: term.fencing_token(),
                            valid_until: term.valid_until(),
                        },
                    });
                });
            }
            let _ = inbox.send(Told {
                who,
                at: Instant::now(),
                note: Note::Event(event),
            });
        }
    });
}

/// Everything every participant was told, in arrival order.
struct Inbox {
    rx: mpsc::UnboundedReceiver<Told>,
    log: Vec<Told>,
}

impl Inbox {
    fn new() -> (Self, mpsc::UnboundedSender<Told>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                rx,
                log: Vec::new(),
            },
            tx,
        )
    }

    /// The first note from index `from` on that `pred` accepts, waiting
    /// for it when it has not arrived yet.
    async fn until(&mut self, from: usize, what: &str, pred: impl Fn(&Told) -> bool) -> Told {
        if let Some(found) = self.log.iter().skip(from).find(|t| pred(t)) {
            return found.clone();
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let next = tokio::time::timeout_at(deadline, self.rx.recv()).await;
            let told = match next {
                Ok(Some(told)) => told,
                Ok(None) => panic!("every participant is gone; waited for {what}"),
                Err(_) => panic!("{what}: not within {PATIENCE:?}; seen: {:#?}", self.log),
            };
            self.log.push(told.clone());
            if pred(&told) {
                return told;
            }
        }
    }

    /// The next term to start with a fencing token above `above`.
    async fn started(&mut self, above: u64) -> (usize, Instant, Leadership) {
        let told = self
            .until(0, "a new leader", |t| {
                matches!(&t.note, Note::Event(ElectionEvent::StartedLeading(l)) if l.fencing_token() > above)
            })
            .await;
        match told.note {
            Note::Event(ElectionEvent::StartedLeading(l)) => (told.who, told.at, l),
            _ => unreachable!("matched above"),
        }
    }

    /// Waits until each of `who` was told that `leader` leads.
    async fn everyone_sees(&mut self, who: &[usize], leader: &Leader) {
        for &w in who {
            self.until(0, &format!("participant {w} told of {leader:?}"), |t| {
                t.who == w
                    && matches!(&t.note, Note::Event(ElectionEvent::NewLeader(l)) if l == leader)
            })
            .await;
        }
    }

    /// The fencing tokens of the leaders `who` was told of, in order,
    /// repeats and "nobody" left out.
    fn leaders_seen_by(&self, who: usize) -> Vec<u64> {
        let mut seen: Vec<u64> = Vec::new();
        for t in self.log.iter().filter(|t| t.who == who) {
            if let Note::Event(ElectionEvent::NewLeader(Leader {
                fencing_token: Some(f),
                ..
            })) = &t.note
            {
                if seen.last() != Some(f) {
                    seen.push(*f);
                }
            }
        }
        seen
    }

    /// When `fencing_token`'s term token fired, and the validity end then.
    fn term_over(&self, fencing_token: u64) -> Option<(Instant, Instant)> {
        self.log.iter().find_map(|t| match t.note {
            Note::TermOver {
                fencing_token: f,
                valid_until,
            } if f == fencing_token => Some((t.at, valid_until)),
            _ => None,
        })
    }
}

struct Candidate {
    election: Election,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), ElectionError>>,
}

fn candidate(
    who: usize,
    base: &str,
    resource: &ResourceId,
    settings: ElectionSettings,
    inbox: &mpsc::UnboundedSender<Told>,
) -> Candidate {
    let (election, events) = Election::new(
        client(base),
        resource.clone(),
        label(&format!("candidate-{who}")),
        settings,
    );
    forward(who, events, |e| e, inbox.clone());
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (election, cancel) = (election.clone(), cancel.clone());
        async move { election.campaign(cancel).await }
    });
    Candidate {
        election,
        cancel,
        task,
    }
}

fn leader_of(term: &Leadership) -> Leader {
    Leader {
        holder: Some(term.holder().to_owned()),
        fencing_token: Some(term.fencing_token()),
    }
}

/// One term in the history: from its start to the end of the time its
/// holder may have acted.
#[derive(Debug)]
struct Term {
    who: usize,
    fencing_token: u64,
    start: Instant,
    end: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_on_crash_and_on_resign_and_never_overlaps() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let redis = RedisServer::start();
    let backend = Backend::Redis(redis.url());
    let namespace = unique("election");
    let a = TestApp::spawn_with(args(&backend, &["--namespace", &namespace])).await;
    let b = TestApp::spawn_with(args(&backend, &["--namespace", &namespace])).await;
    let resource = resource();
    let (mut inbox, tx) = Inbox::new();

    // Candidates 0 and 2 on instance a, candidate 1 and the observer on b.
    let mut candidates: Vec<Candidate> = [&a.base, &b.base, &a.base]
        .iter()
        .enumerate()
        .map(|(who, base)| candidate(who, base, &resource, settings(), &tx))
        .collect();
    const OBSERVER: usize = 3;
    let (observer, leaders) = Observer::new(client(&b.base), resource.clone(), settings());
    forward(OBSERVER, leaders, ElectionEvent::NewLeader, tx.clone());
    let stop_observing = CancellationToken::new();
    let observing = tokio::spawn({
        let stop = stop_observing.clone();
        async move { observer.observe(stop).await }
    });

    // 1. Someone wins; all four hear of it.
    let (first_who, _, first) = inbox.started(0).await;
    inbox
        .everyone_sees(&[0, 1, 2, OBSERVER], &leader_of(&first))
        .await;

    // 2. The leader's process dies: its campaign is dropped mid-term, so
    //    nothing renews or releases. The others take over at the expiry.
    let killed_at = Instant::now();
    candidates[first_who].task.abort();
    let aborted = (&mut candidates[first_who].task).await;
    assert!(aborted.is_err_and(|e| e.is_cancelled()));
    let first_valid_until = first.valid_until();
    let (second_who, _, second) = inbox.started(first.fencing_token()).await;
    assert_ne!(second_who, first_who);
    let takeover = second.started_at() - killed_at;
    assert!(
        takeover <= TTL + 100 * MS,
        "new leader {takeover:?} after the old one died (TTL {TTL:?})"
    );
    let alive: Vec<usize> = (0..3).filter(|&w| w != first_who).collect();
    let mut told: Vec<usize> = alive.clone();
    told.push(OBSERVER);
    inbox.everyone_sees(&told, &leader_of(&second)).await;

    // 3. The new leader is cancelled: it releases, and the last candidate
    //    leads at once.
    let cancelled_at = Instant::now();
    candidates[second_who].cancel.cancel();
    let (third_who, _, third) = inbox.started(second.fencing_token()).await;
    let handover = third.started_at() - cancelled_at;
    eprintln!("takeover after a crash: {takeover:?}; handover after cancel: {handover:?}");
    assert!(handover <= 50 * MS, "next leader {handover:?} after cancel");
    let last: usize = alive
        .iter()
        .copied()
        .find(|&w| w != second_who)
        .expect("one left");
    assert_eq!(third_who, last);
    let returned = timeout(PATIENCE, &mut candidates[second_who].task)
        .await
        .expect("the cancelled campaign returns")
        .expect("campaign task");
    assert_eq!(returned, Ok(()));
    inbox
        .until(0, "the cancelled leader's StoppedLeading", |t| {
            t.who == second_who
                && matches!(&t.note, Note::Event(ElectionEvent::StoppedLeading { fencing_token, reason })
                    if *fencing_token == second.fencing_token() && *reason == StopReason::Resigned)
        })
        .await;
    inbox
        .everyone_sees(&[last, OBSERVER], &leader_of(&third))
        .await;

    // 4. The last one resigns; nobody leads, and the observer hears so.
    let mark = inbox.log.len();
    candidates[last].election.resign().await;
    assert!(!candidates[last].election.is_leader());
    let returned = timeout(PATIENCE, &mut candidates[last].task)
        .await
        .expect("the resigned campaign returns")
        .expect("campaign task");
    assert_eq!(returned, Ok(()));
    inbox
        .until(mark, "the observer told nobody leads", |t| {
            t.who == OBSERVER
                && matches!(&t.note, Note::Event(ElectionEvent::NewLeader(l)) if *l == Leader::NONE)
        })
        .await;
    inbox
        .until(0, "the last term's token fired", |t| {
            matches!(t.note, Note::TermOver { fencing_token, .. } if fencing_token == third.fencing_token())
        })
        .await;
    stop_observing.cancel();
    timeout(PATIENCE, observing)
        .await
        .expect("observer stops")
        .expect("observer task");

    // The history: the dead leader may have acted until its validity ran
    // out; the others until their term's token fired.
    let mut history = vec![Term {
        who: first_who,
        fencing_token: first.fencing_token(),
        start: first.started_at(),
        end: first_valid_until,
    }];
    for (who, term) in [(second_who, &second), (third_who, &third)] {
        let (over_at, valid_until) = inbox.term_over(term.fencing_token()).expect("term over");
        assert!(
            over_at <= valid_until,
            "term {} token fired {:?} after its validity ended",
            term.fencing_token(),
            over_at - valid_until
        );
        history.push(Term {
            who,
            fencing_token: term.fencing_token(),
            start: term.started_at(),
            end: over_at,
        });
    }
    // The dead leader's token fired when its process died, before its
    // validity ended.
    let (over_at, valid_until) = inbox.term_over(first.fencing_token()).expect("term over");
    assert!(over_at <= valid_until);
    for pair in history.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        assert!(
            old.end <= new.start,
            "terms overlap: {old:?} ends after {new:?} starts"
        );
        assert!(
            old.fencing_token < new.fencing_token,
            "{old:?} then {new:?}"
        );
        assert_ne!(old.who, new.who, "a candidate led twice in a row");
    }

    // Everyone heard of every leader while it followed.
    let tokens: Vec<u64> = history.iter().map(|t| t.fencing_token).collect();
    assert_eq!(inbox.leaders_seen_by(OBSERVER), tokens);
    assert_eq!(inbox.leaders_seen_by(last), tokens);
    assert_eq!(inbox.leaders_seen_by(second_who), tokens[..2]);
    assert_eq!(inbox.leaders_seen_by(first_who), tokens[..1]);

    a.shutdown().await;
    b.shutdown().await;
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proclaim_changes_the_label_and_keeps_the_fencing_token() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let app = TestApp::spawn(&Backend::Memory).await;
    let resource = resource();
    let (mut inbox, tx) = Inbox::new();
    let leader = candidate(0, &app.base, &resource, settings(), &tx);
    let (observer, leaders) = Observer::new(client(&app.base), resource.clone(), settings());
    forward(9, leaders, ElectionEvent::NewLeader, tx.clone());
    let stop_observing = CancellationToken::new();
    tokio::spawn({
        let stop = stop_observing.clone();
        async move { observer.observe(stop).await }
    });
    let (_, _, term) = inbox.started(0).await;
    inbox.everyone_sees(&[0, 9], &leader_of(&term)).await;

    // A second candidate waits; it cannot proclaim.
    let waiting = candidate(1, &app.base, &resource, settings(), &tx);
    inbox.everyone_sees(&[1], &leader_of(&term)).await;
    assert_eq!(
        waiting.election.proclaim(label("usurper")).await,
        Err(ElectionError::NotLeader)
    );

    leader
        .election
        .proclaim(label("candidate-0-renamed"))
        .await
        .expect("proclaim");
    assert_eq!(leader.election.holder().as_str(), "candidate-0-renamed");
    let renamed = Leader {
        holder: Some("candidate-0-renamed".to_owned()),
        fencing_token: Some(term.fencing_token()),
    };
    inbox.everyone_sees(&[0, 1, 9], &renamed).await;
    assert_eq!(leader.election.leader().await.expect("leader"), renamed);
    assert!(term.is_leading(), "a proclaim does not end the term");

    for c in [&leader, &waiting] {
        c.cancel.cancel();
    }
    for c in [leader, waiting] {
        let returned = timeout(PATIENCE, c.task)
            .await
            .expect("campaign returns")
            .expect("campaign task");
        assert_eq!(returned, Ok(()));
    }
    stop_observing.cancel();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_answer_is_retried_with_the_same_attempt() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // The acquire script runs on Redis but its connection is reset before
    // the reply: the service answers `indeterminate`. Retrying with the
    // same attempt is answered `replayed_same_operation` at once; a fresh
    // attempt would be `contended` by its own orphan until the TTL ran out.
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.addr()).await;
    let app = TestApp::spawn(&Backend::Redis(proxy.url())).await;
    let resource = resource();
    let (mut inbox, tx) = Inbox::new();
    let ttl = Duration::from_secs(20);
    let quiet = ElectionSettings {
        // Only the campaign's acquires cross the proxy.
        follow: false,
        ttl,
        ..settings()
    };
    proxy.reset_next_script();
    let started = Instant::now();
    let c = candidate(0, &app.base, &resource, quiet, &tx);
    let (_, at, term) = inbox.started(0).await;
    assert_eq!(proxy.resets(), 1, "the first acquire's reply was lost");
    assert!(
        at - started < ttl / 4,
        "leading took {:?}: the retry did not replay",
        at - started
    );
    let inspected = client(&app.base)
        .inspect(&resource, None)
        .await
        .expect("inspect");
    assert_eq!(inspected.fencing_token, Some(term.fencing_token()));
    assert_eq!(
        inspected.holder.as_ref().map(|h| h.as_str()),
        Some("candidate-0")
    );

    c.cancel.cancel();
    let returned = timeout(PATIENCE, c.task)
        .await
        .expect("campaign returns")
        .expect("campaign task");
    assert_eq!(returned, Ok(()));
    let after = client(&app.base)
        .inspect(&resource, None)
        .await
        .expect("inspect");
    assert!(!after.held, "cancel released the lease");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_store_stops_before_its_validity_ends() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // Redis freezes mid-term: the renew hangs (the service's command
    // timeout is 2 s, far beyond the 600 ms TTL). The term's token must fire
    // while the lease is still locally valid, leading_margin before the end.
    let redis = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(redis.url())).await;
    let resource = resource();
    let (mut inbox, tx) = Inbox::new();
    let quiet = ElectionSettings {
        follow: false,
        ..settings()
    };
    let margin = quiet.leading_margin;
    let c = candidate(0, &app.base, &resource, quiet, &tx);
    let (_, _, term) = inbox.started(0).await;
    tokio::task::block_in_place(|| redis.freeze());
    let over = inbox
        .until(0, "the cut-off term's token fired", |t| {
            matches!(t.note, Note::TermOver { fencing_token, .. } if fencing_token == term.fencing_token())
        })
        .await;
    let Note::TermOver { valid_until, .. } = over.note else {
        unreachable!("matched above")
    };
    assert!(
        over.at <= valid_until,
        "token fired {:?} after the validity ended",
        over.at - valid_until
    );
    assert!(
        valid_until - over.at >= margin / 2,
        "token fired only {:?} before the validity ended (margin {margin:?})",
        valid_until - over.at
    );
    tokio::task::block_in_place(|| redis.thaw());
    inbox
        .until(0, "StoppedLeading after the cut-off", |t| {
            matches!(&t.note, Note::Event(ElectionEvent::StoppedLeading { fencing_token, reason })
                if *fencing_token == term.fencing_token() && *reason == StopReason::Expiring)
        })
        .await;
    c.cancel.cancel();
    let returned = timeout(PATIENCE, c.task)
        .await
        .expect("campaign returns")
        .expect("campaign task");
    assert_eq!(returned, Ok(()));
    app.shutdown().await;
}
