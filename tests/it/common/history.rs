//! Checked histories (issue #13): the events a recorder saw, and pure
//! checks over them.
//!
//! An [`Event`] is one HTTP request and its answer, stamped with the send and
//! reply instants on one monotonic clock (offsets from the run's start). The
//! checker never looks at the store: it judges only what callers were told.
//!
//! * [`check_safety`]: at no instant do more attempts believe they hold a
//!   resource than its `limit` allows (1: a plain lease), and never a shared
//!   and an exclusive holder at once;
//! * [`check_fencing`]: fencing tokens are distinct per acquisition and grow
//!   in real-time order; replays and renews carry their acquisition's token;
//! * [`check_honesty`]: an attempt whose every acquire was answered
//!   `unavailable`/`overloaded` ("not applied") never holds the lease;
//! * [`check_typed`]: every answer is a documented (verb, status, outcome);
//! * [`check_recovery`]: after each fault window, a grant within a bound;
//! * [`check_liveness`]: a waiter answered `contended` never waited through
//!   a span, longer than the dead-entry horizon plus a margin, in which the
//!   resource was free and no other waiter could be ahead.
//!
//! A call its caller left in flight (connection closed before the answer)
//! is an event with `aborted` set: it grants no belief, is not "not
//! applied" (honesty), counts as an unanswered acquire (fencing), is not
//! typed, and may hold until it could no longer apply (liveness).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

/// The lease verbs (and `POST /attempts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `POST /attempts`.
    Attempt,
    /// `PUT` acquire.
    Acquire,
    /// `PATCH` renew.
    Renew,
    /// `DELETE` release.
    Release,
    /// `GET` inspect.
    Inspect,
    /// `POST …/break` (an operator; every permit of the resource).
    Break,
}

/// One request and its answer.
#[derive(Clone, Debug, Default)]
pub struct Event {
    /// Position in the history.
    pub id: usize,
    /// Which recorder task sent it.
    pub client: usize,
    /// Which instance it went to.
    pub app: usize,
    /// Which resource (index into the run's resources).
    pub resource: usize,
    /// The attempt's operation id (unique per attempt).
    pub attempt: String,
    /// The verb.
    pub verb: Option<Verb>,
    /// Sent at (offset from the run's start).
    pub send: Duration,
    /// Answer fully read at.
    pub reply: Duration,
    /// HTTP status; 0 on a transport error.
    pub status: u16,
    /// The `outcome` member.
    pub outcome: String,
    /// `lease.fencingToken` (or inspect's `fencingToken`).
    pub fencing_token: Option<u64>,
    /// `lease.remainingMs` (or inspect's `remainingMs`).
    pub remaining_ms: Option<u64>,
    /// The TTL asked for (acquire, renew).
    pub ttl_ms: Option<u64>,
    /// The wait asked for (acquire).
    pub wait_ms: Option<u64>,
    /// The limit asked for (acquire; `None`: 1).
    pub limit: Option<u64>,
    /// Asked for shared mode (acquire).
    pub shared: bool,
    /// The hold bound asked for (acquire's `maxHoldMs`).
    pub max_hold_ms: Option<u64>,
    /// Inspect's `heldBy`.
    pub held_by: Option<String>,
    /// `operationId` of an `indeterminate` answer.
    pub operation_id: Option<String>,
    /// Content type is `application/problem+json`.
    pub problem_json: bool,
    /// A `Retry-After` header was present.
    pub retry_after: bool,
    /// Our own client failed (connect, timeout, unreadable body).
    pub transport_error: Option<String>,
    /// The caller closed its connection before an answer came (outcome
    /// `aborted`, status 0): like `indeterminate`, it does not know whether
    /// the call applied, and it retries with the same attempt.
    pub aborted: bool,
    /// `lease.replication.acknowledged` (with replica acks on).
    pub acknowledged: Option<u64>,
    /// A `contended` answer's `reason` (`queued`, `lock_delay`; none: held)
    /// and `retryAfterMs`.
    pub reason: Option<String>,
    /// `retryAfterMs` of a refusal.
    pub retry_after_ms: Option<u64>,
    /// The session the lease is on (docs/design.md §18): its acquire and
    /// release went to `/sessions/{id}/leases/…`; a session renew is
    /// recorded as a renew of each of its leases (`remainingMs`: the
    /// session's, so a belief lasts the session's validity from the
    /// renew's send), a session end as a release of each.
    pub session: Option<String>,
}

impl Event {
    fn verb(&self) -> Verb {
        self.verb.unwrap_or(Verb::Attempt)
    }

    /// An answer that grants (or confirms) the lease to the attempt.
    pub fn grants(&self) -> bool {
        matches!(
            (self.verb(), self.outcome.as_str()),
            (Verb::Acquire, "acquired" | "replayed_same_operation") | (Verb::Renew, "renewed")
        )
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} c{} app{} r{} {} {:?} sent {:.1} ms, answered {:.1} ms: {} {}",
            self.id,
            self.client,
            self.app,
            self.resource,
            self.attempt,
            self.verb(),
            ms(self.send),
            ms(self.reply),
            self.status,
            self.outcome
        )?;
        if let Some(t) = self.fencing_token {
            write!(f, " token={t}")?;
        }
        if let Some(r) = self.remaining_ms {
            write!(f, " remainingMs={r}")?;
        }
        if let Some(t) = self.ttl_ms {
            write!(f, " ttlMs={t}")?;
        }
        if let Some(w) = self.wait_ms {
            write!(f, " waitMs={w}")?;
        }
        if let Some(h) = &self.held_by {
            write!(f, " heldBy={h}")?;
        }
        if let Some(r) = &self.reason {
            write!(f, " reason={r}")?;
        }
        if let Some(r) = self.retry_after_ms {
            write!(f, " retryAfterMs={r}")?;
        }
        if let Some(e) = &self.transport_error {
            write!(f, " transport error: {e}")?;
        }
        if self.aborted {
            write!(f, " (the caller left: connection closed in flight)")?;
        }
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One broken rule and the events that show it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// `safety`, `fencing`, `honesty`, `typed` or `recovery`.
    pub check: &'static str,
    /// What is wrong.
    pub what: String,
    /// The events involved.
    pub events: Vec<Event>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "[{}] {}", self.check, self.what)?;
        for e in &self.events {
            writeln!(f, "    {e}")?;
        }
        Ok(())
    }
}

/// A span of the run in which a fault was injected.
#[derive(Clone, Debug)]
pub struct FaultWindow {
    /// The fault's name.
    pub name: String,
    /// Injected at.
    pub start: Duration,
    /// Removed at.
    pub end: Duration,
    /// The store lost its data in this window (restart empty): safety is
    /// not claimed across it.
    pub data_loss: bool,
    /// The store definitely refused writes for the whole window (OOM,
    /// NOREPLICAS) while answering: see [`check_refusals`].
    pub definite_refusal: bool,
    /// The fault was one master's of several (a Cluster): a call whose
    /// keys span masters (a session's renew or end) may be applied on the
    /// others and refused on this one, so `indeterminate` is its honest
    /// answer there.
    pub on_one_master: bool,
}

/// An interval in which `attempt` may believe it holds `resource`.
#[derive(Clone, Debug)]
pub struct Belief {
    /// The granting event.
    pub event: Event,
    /// From the reply ...
    pub start: Duration,
    /// ... until send + remainingMs − drift, cut at the attempt's next
    /// renew or release on the resource.
    pub end: Duration,
}

/// The belief intervals of a history: see [`check_safety`].
pub fn beliefs(events: &[Event], drift: Duration) -> Vec<Belief> {
    // Requests of one attempt on one resource, by send instant.
    let mut by_attempt: HashMap<(&str, usize), Vec<&Event>> = HashMap::new();
    for e in events {
        if matches!(e.verb(), Verb::Acquire | Verb::Renew | Verb::Release) {
            by_attempt
                .entry((e.attempt.as_str(), e.resource))
                .or_default()
                .push(e);
        }
    }
    let mut out = Vec::new();
    for list in by_attempt.values_mut() {
        list.sort_by_key(|e| e.send);
        for (i, e) in list.iter().enumerate() {
            if !e.grants() {
                continue;
            }
            let Some(remaining) = e.remaining_ms else {
                continue;
            };
            let mut end = (e.send + Duration::from_millis(remaining)).saturating_sub(drift);
            if let Some(cut) = list[i + 1..]
                .iter()
                .find(|n| matches!(n.verb(), Verb::Renew | Verb::Release))
            {
                end = end.min(cut.send);
            }
            if end > e.reply {
                out.push(Belief {
                    event: (*e).clone(),
                    start: e.reply,
                    end,
                });
            }
        }
    }
    out.sort_by_key(|b| (b.event.resource, b.start));
    out
}

/// Safety: at no instant do more different attempts believe they hold one
/// resource than the limit they acquired it with (1 for a plain lease), and
/// never a shared and an exclusive one at once, except across a window in
/// which the store lost its data.
pub fn check_safety(events: &[Event], drift: Duration, faults: &[FaultWindow]) -> Vec<Violation> {
    let all = beliefs(events, drift);
    // The limit and mode of each attempt's acquisitions, from its acquires.
    let mut shape: HashMap<(&str, usize), (u64, bool)> = HashMap::new();
    for e in events.iter().filter(|e| e.verb() == Verb::Acquire) {
        shape.insert(
            (e.attempt.as_str(), e.resource),
            (e.limit.unwrap_or(1), e.shared),
        );
    }
    let shape_of = |b: &Belief| {
        shape
            .get(&(b.event.attempt.as_str(), b.event.resource))
            .copied()
            .unwrap_or((1, false))
    };
    // Breaks that may have applied (see `broken_between`), found once.
    let breaks: Vec<&Event> = events
        .iter()
        .filter(|k| {
            k.verb() == Verb::Break
                && !matches!(k.outcome.as_str(), "nothing_to_break" | "overloaded")
        })
        .collect();
    let mut out = Vec::new();
    for (i, b) in all.iter().enumerate() {
        // Every belief of another attempt on the resource that is still on
        // when `b` starts (`all` is sorted by resource, then start).
        let mut overlapping: Vec<&Belief> = all[..i]
            .iter()
            .filter(|a| {
                a.event.resource == b.event.resource
                    && a.end > b.start
                    && a.event.attempt != b.event.attempt
            })
            .collect();
        overlapping.retain(|a| {
            !faults
                .iter()
                .any(|f| f.data_loss && f.end >= a.event.send && f.start <= b.start)
        });
        // An operator's break may end `a` without its knowledge: `a` still
        // believes until its next renew or its local validity, and the next
        // holder may acquire meanwhile. That overlap is the break's (fencing
        // protects, and `check_breaks` judges that `a` is never renewed
        // after it); it is not a safety violation. Either way round: `b`'s
        // grant may precede the break and its answer come after `a`'s (a
        // waited acquire answered late), `a` granted once the break freed
        // the resource.
        overlapping.retain(|a| !broken_between(&breaks, a, b) && !broken_between(&breaks, b, a));
        if overlapping.is_empty() {
            continue;
        }
        let (limit, shared) = shape_of(b);
        let mixed: Vec<&&Belief> = overlapping
            .iter()
            .filter(|a| shape_of(a).1 != shared)
            .collect();
        let mut holders: Vec<&str> = overlapping
            .iter()
            .filter(|a| !shape_of(a).1)
            .map(|a| a.event.attempt.as_str())
            .collect();
        holders.sort_unstable();
        holders.dedup();
        let over = !shared && holders.len() as u64 + 1 > limit;
        if mixed.is_empty() && !over {
            continue;
        }
        let what = if !mixed.is_empty() {
            format!(
                "a shared and an exclusive holder believed they held resource {} at once \
                 (from {:.1} ms)",
                b.event.resource,
                ms(b.start)
            )
        } else if limit == 1 {
            let a = overlapping[0];
            format!(
                "two attempts believed they held resource {} at once for {:.1} ms \
                 (from {:.1} ms to {:.1} ms)",
                b.event.resource,
                ms(a.end.min(b.end) - b.start),
                ms(b.start),
                ms(a.end.min(b.end)),
            )
        } else {
            format!(
                "{} attempts believed they held resource {} (limit {limit}) at once at {:.1} ms",
                holders.len() + 1,
                b.event.resource,
                ms(b.start)
            )
        };
        let mut involved: Vec<Event> = overlapping.iter().map(|a| a.event.clone()).collect();
        involved.push(b.event.clone());
        out.push(Violation {
            check: "safety",
            what,
            events: involved,
        });
    }
    out
}

/// Whether a break of `a`'s resource may have applied after `a`'s grant
/// and before `b`'s: one answered `broken`, or one whose answer leaves it
/// open (`unavailable` after an uncertain reply, a transport error).
/// `breaks` holds the history's break events that may have applied.
fn broken_between(breaks: &[&Event], a: &Belief, b: &Belief) -> bool {
    breaks
        .iter()
        .any(|k| k.resource == a.event.resource && k.reply > a.event.send && k.send < b.event.reply)
}

/// Breaks (issue 24): a holder whose permit a break removed is never
/// `renewed` afterwards. For every break answered `broken` (every permit of
/// its resource), an attempt granted the resource before the break was
/// sent, and not acquiring it again since, must not be answered `renewed`
/// to a renew sent after the break's answer: its belief ends at that renew
/// (`lost`, `reason: revoked`) or at its local validity. Also, a renew
/// answered `lost` with `reason: revoked` names an attempt some break could
/// have broken.
pub fn check_breaks(events: &[Event]) -> Vec<Violation> {
    let mut out = Vec::new();
    let breaks: Vec<&Event> = events
        .iter()
        .filter(|k| k.verb() == Verb::Break && k.outcome == "broken")
        .collect();
    // Each (attempt, resource)'s own events: a break then looks at those
    // alone (scanning the whole history per attempt and break took minutes
    // on the fault runs' ~11 000 requests).
    let mut own: BTreeMap<(&str, usize), Vec<&Event>> = BTreeMap::new();
    for e in events {
        own.entry((e.attempt.as_str(), e.resource))
            .or_default()
            .push(e);
    }
    for k in &breaks {
        for ((attempt, resource), mine) in &own {
            if *resource != k.resource || !mine.iter().any(|g| g.grants() && g.reply < k.send) {
                continue;
            }
            let again = |before: Duration| {
                mine.iter()
                    .any(|e| e.verb() == Verb::Acquire && e.reply > k.send && e.send < before)
            };
            if let Some(r) = mine.iter().find(|r| {
                r.verb() == Verb::Renew
                    && r.outcome == "renewed"
                    && r.send > k.reply
                    && !again(r.send)
            }) {
                out.push(Violation {
                    check: "breaks",
                    what: format!("attempt {attempt} was renewed after a break removed its permit"),
                    events: vec![(*k).clone(), (*r).clone()],
                });
            }
        }
    }
    for r in events.iter().filter(|r| {
        r.verb() == Verb::Renew && r.outcome == "lost" && r.reason.as_deref() == Some("revoked")
    }) {
        let explained = breaks
            .iter()
            .any(|k| k.resource == r.resource && k.send < r.reply);
        if !explained {
            out.push(Violation {
                check: "breaks",
                what: "a renew answered lost/revoked with no break before it".into(),
                events: vec![r.clone()],
            });
        }
    }
    out
}

/// Fencing: per resource, `acquired` tokens are distinct and increase in
/// real-time order (an acquisition answered before another was sent has the
/// smaller token); a token belongs to one attempt; a replay or renew carries
/// the token of the attempt's last acquisition unless an acquire of that
/// attempt went unanswered (indeterminate) in between.
pub fn check_fencing(events: &[Event]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_resource: BTreeMap<usize, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.grants()) {
        by_resource.entry(e.resource).or_default().push(e);
    }
    for grants in by_resource.values() {
        let mut owner: HashMap<u64, &Event> = HashMap::new();
        for e in grants {
            let Some(token) = e.fencing_token else {
                continue; // typed reports the missing token
            };
            match owner.get(&token) {
                Some(first) if first.attempt != e.attempt => out.push(Violation {
                    check: "fencing",
                    what: format!("token {token} was handed to two attempts"),
                    events: vec![(*first).clone(), (*e).clone()],
                }),
                Some(first) if e.outcome == "acquired" && first.outcome == "acquired" => {
                    out.push(Violation {
                        check: "fencing",
                        what: format!("token {token} issued by two acquisitions"),
                        events: vec![(*first).clone(), (*e).clone()],
                    })
                }
                Some(_) => {}
                None => {
                    owner.insert(token, e);
                }
            }
        }
        let mut acquired: Vec<&Event> = grants
            .iter()
            .copied()
            .filter(|e| e.outcome == "acquired" && e.fencing_token.is_some())
            .collect();
        acquired.sort_by_key(|e| e.reply);
        for (i, a) in acquired.iter().enumerate() {
            // Only a later-sent acquisition can be ordered after `a`.
            for b in acquired.iter().filter(|b| b.send > a.reply) {
                if b.fencing_token <= a.fencing_token {
                    out.push(Violation {
                        check: "fencing",
                        what: "an acquisition answered before another was sent has a \
                               token not smaller than it"
                            .into(),
                        events: vec![(*a).clone(), (*b).clone()],
                    });
                }
            }
            let _ = i;
        }
    }
    // Replays and renews carry their acquisition's token.
    let mut by_attempt: HashMap<(&str, usize), Vec<&Event>> = HashMap::new();
    for e in events
        .iter()
        .filter(|e| e.verb() == Verb::Acquire || e.grants())
    {
        by_attempt
            .entry((e.attempt.as_str(), e.resource))
            .or_default()
            .push(e);
    }
    for list in by_attempt.values_mut() {
        list.sort_by_key(|e| e.send);
        let mut known: Option<&Event> = None;
        let mut unanswered_since = false;
        for e in list.iter() {
            if e.grants() && e.outcome != "acquired" {
                if let (Some(k), false) = (known, unanswered_since) {
                    if k.fencing_token != e.fencing_token {
                        out.push(Violation {
                            check: "fencing",
                            what: format!(
                                "{} carries a token other than its acquisition's",
                                e.outcome
                            ),
                            events: vec![k.clone(), (*e).clone()],
                        });
                    }
                }
            }
            if e.grants() {
                known = Some(e);
                unanswered_since = false;
            } else if e.verb() == Verb::Acquire
                && (e.outcome == "indeterminate" || e.transport_error.is_some() || e.aborted)
            {
                unanswered_since = true;
            }
        }
    }
    out
}

/// Honesty: an attempt none of whose acquires sent so far could have applied
/// (each answered `unavailable` or `overloaded`) is never told it holds the
/// lease: no replay, renew, `released` or inspect `heldBy: caller`.
pub fn check_honesty(events: &[Event]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_attempt: HashMap<(&str, usize), Vec<&Event>> = HashMap::new();
    for e in events {
        by_attempt
            .entry((e.attempt.as_str(), e.resource))
            .or_default()
            .push(e);
    }
    for list in by_attempt.values_mut() {
        list.sort_by_key(|e| e.send);
        for (i, e) in list.iter().enumerate() {
            let claims_held = matches!(
                (e.verb(), e.outcome.as_str()),
                (Verb::Acquire, "replayed_same_operation")
                    | (Verb::Renew, "renewed")
                    | (Verb::Release, "released")
            ) || (e.verb() == Verb::Inspect
                && e.held_by.as_deref() == Some("caller"));
            if !claims_held {
                continue;
            }
            let acquires: Vec<&Event> = list[..i]
                .iter()
                .copied()
                .filter(|p| p.verb() == Verb::Acquire && p.send < e.send)
                .collect();
            let refused = |p: &&Event| {
                p.transport_error.is_none()
                    && !p.aborted
                    && matches!(p.outcome.as_str(), "unavailable" | "overloaded")
            };
            if acquires.iter().all(refused) {
                let mut shown: Vec<Event> = acquires.iter().map(|p| (*p).clone()).collect();
                shown.push((*e).clone());
                out.push(Violation {
                    check: "honesty",
                    what: if acquires.is_empty() {
                        format!(
                            "{} answering the attempt's first request that could \
                             acquire: the answer belongs to another request",
                            e.outcome
                        )
                    } else {
                        format!(
                            "{} for an attempt whose every acquire was answered \
                             'not applied'",
                            e.outcome
                        )
                    },
                    events: shown,
                });
            }
        }
    }
    out
}

/// The documented (verb, status, outcome) triples, docs/design.md §2 and
/// `src/domain/outcome.rs`; any lease verb may also meet
/// `503 unavailable`, `503 overloaded` and `504 indeterminate`.
pub fn documented(verb: Verb, status: u16, outcome: &str) -> bool {
    let shared = matches!(
        (status, outcome),
        (503, "unavailable") | (503, "overloaded") | (504, "indeterminate")
    );
    let own = match verb {
        Verb::Attempt => matches!((status, outcome), (201, "attempt_created")),
        Verb::Acquire => matches!(
            (status, outcome),
            (201, "acquired")
                | (200, "replayed_same_operation")
                | (409, "owner_operation_conflict")
                | (409, "contended")
                | (409, "limit_mismatch")
        ),
        Verb::Renew => matches!(
            (status, outcome),
            (200, "renewed") | (404, "lost") | (409, "lost")
        ),
        Verb::Release => matches!(
            (status, outcome),
            (200, "released") | (200, "already_absent") | (409, "not_owner")
        ),
        Verb::Inspect => matches!((status, outcome), (200, "inspected")),
        Verb::Break => matches!(
            (status, outcome),
            (200, "broken") | (404, "nothing_to_break")
        ),
    };
    own || (verb != Verb::Attempt && shared)
}

/// Typed: every answer is documented for its verb, non-2xx answers are
/// problem+json, 503s carry `Retry-After`, grants carry a token and
/// remainingMs, `indeterminate` names the attempt's operation; our own
/// transport errors count as failures.
pub fn check_typed(events: &[Event]) -> Vec<Violation> {
    let mut out = Vec::new();
    for e in events {
        let mut bad = Vec::new();
        if e.aborted {
            // The caller left before any answer: nothing to type.
            continue;
        }
        if let Some(err) = &e.transport_error {
            bad.push(format!("the recorder's request failed: {err}"));
        } else {
            // An acquire on a session may also hear that the session is
            // gone, full or not the token's (docs/design.md §18).
            let on_session = e.session.is_some()
                && e.verb() == Verb::Acquire
                && matches!(
                    (e.status, e.outcome.as_str()),
                    (404, "lost") | (409, "session_full") | (409, "not_owner")
                );
            if !documented(e.verb(), e.status, &e.outcome) && !on_session {
                bad.push(format!(
                    "{} {} is not a documented answer to {:?}",
                    e.status,
                    e.outcome,
                    e.verb()
                ));
            }
            if e.status >= 300 && !e.problem_json {
                bad.push("non-2xx answer is not application/problem+json".into());
            }
            if e.status == 503 && !e.retry_after {
                bad.push("503 without Retry-After".into());
            }
            if e.grants() && (e.fencing_token.is_none() || e.remaining_ms.is_none()) {
                bad.push("grant without fencingToken/remainingMs".into());
            }
            // A break names no attempt: its operation id is `break`.
            let named = if e.verb() == Verb::Break {
                "break"
            } else {
                e.attempt.as_str()
            };
            if e.outcome == "indeterminate" && e.operation_id.as_deref() != Some(named) {
                bad.push("indeterminate without the attempt's operationId".into());
            }
        }
        if !bad.is_empty() {
            out.push(Violation {
                check: "typed",
                what: bad.join("; "),
                events: vec![e.clone()],
            });
        }
    }
    out
}

/// Refusals (docs/design.md §8): while the store definitely refuses writes and
/// still answers (OOM, NOREPLICAS), a request sent and answered inside the
/// window is never `indeterminate`: Redis said no, so the answer is
/// `unavailable` (or an outcome that needed no write). On a Cluster with
/// one master refusing, a session's call is exempt: its keys span masters.
pub fn check_refusals(events: &[Event], faults: &[FaultWindow]) -> Vec<Violation> {
    let mut out = Vec::new();
    for f in faults.iter().filter(|f| f.definite_refusal) {
        let wrong: Vec<Event> = events
            .iter()
            .filter(|e| e.send >= f.start && e.reply <= f.end && e.outcome == "indeterminate")
            .filter(|e| !(f.on_one_master && e.session.is_some()))
            .cloned()
            .collect();
        if !wrong.is_empty() {
            out.push(Violation {
                check: "refusal",
                what: format!(
                    "{} answers inside '{}' were 'indeterminate' although the store \
                     definitely refused (first 5 shown)",
                    wrong.len(),
                    f.name
                ),
                events: wrong.into_iter().take(5).collect(),
            });
        }
    }
    out
}

/// Liveness settings: see [`check_liveness`].
#[derive(Clone, Copy, Debug)]
pub struct Liveness {
    /// How long a resource may stay free, with no live waiter that could be
    /// ahead, while a waiter waits for it: the dead-entry horizon plus a
    /// margin.
    pub bound: Duration,
    /// How long after its reply (or its wait's deadline, or the end of a
    /// fault window it overlapped) an uncertain call may still apply: the
    /// command timeout.
    pub apply_slack: Duration,
}

/// An uncertain call: it may have applied, nobody told the caller.
fn uncertain(e: &Event) -> bool {
    e.aborted || e.transport_error.is_some() || e.outcome == "indeterminate"
}

/// The latest instant an uncertain call may still apply: its reply or its
/// wait's deadline, pushed to the end of any fault window it overlapped (a
/// frozen store runs what it was sent when thawed), plus `slack`.
fn latest_apply(e: &Event, faults: &[FaultWindow], slack: Duration) -> Duration {
    let mut latest = e
        .reply
        .max(e.send + Duration::from_millis(e.wait_ms.unwrap_or(0)));
    for f in faults {
        if f.start <= latest && f.end >= e.send {
            latest = latest.max(f.end);
        }
    }
    latest + slack
}

/// Bounded holds (issue 24): an attempt that acquired with `maxHoldMs` is
/// never granted time past its bound, and `lost` with `reason: max_hold`
/// comes only to such an attempt, once its bound may have passed. The
/// store's `acquiredAt` lies between the attempt's first acquire send and
/// its first grant's reply, and a grant's store instant between the send
/// and reply of its request; so a grant must end by (first grant's reply +
/// bound), judged from its send (`send + remainingMs`), and a `max_hold`
/// answer must come after (first acquire's send + bound). A millisecond of
/// rounding is allowed each way.
pub fn check_max_hold(events: &[Event]) -> Vec<Violation> {
    const SLACK: Duration = Duration::from_millis(2);
    let mut own: BTreeMap<(&str, usize), Vec<&Event>> = BTreeMap::new();
    for e in events {
        if matches!(e.verb(), Verb::Acquire | Verb::Renew) {
            own.entry((e.attempt.as_str(), e.resource))
                .or_default()
                .push(e);
        }
    }
    let mut out = Vec::new();
    for ((attempt, _), mine) in &mut own {
        mine.sort_by_key(|e| e.send);
        let bound = mine
            .iter()
            .find_map(|e| e.max_hold_ms.filter(|_| e.verb() == Verb::Acquire))
            .map(Duration::from_millis);
        let first_send = mine
            .iter()
            .find(|e| e.verb() == Verb::Acquire)
            .map(|e| e.send);
        let first_grant = mine
            .iter()
            .find(|e| e.verb() == Verb::Acquire && e.grants())
            .map(|e| e.reply);
        for e in mine.iter() {
            if e.verb() == Verb::Renew
                && e.outcome == "lost"
                && e.reason.as_deref() == Some("max_hold")
            {
                let possible = match (bound, first_send) {
                    (Some(b), Some(sent)) => e.reply + SLACK >= sent + b,
                    _ => false,
                };
                if !possible {
                    out.push(Violation {
                        check: "max_hold",
                        what: format!(
                            "attempt {attempt} was told lost/max_hold before its bound could pass (or it had none)"
                        ),
                        events: vec![(*e).clone()],
                    });
                }
            }
            if let (true, Some(b), Some(granted), Some(left)) =
                (e.grants(), bound, first_grant, e.remaining_ms)
            {
                if e.send + Duration::from_millis(left) > granted + b + SLACK {
                    out.push(Violation {
                        check: "max_hold",
                        what: format!("attempt {attempt} was granted time past its maxHoldMs"),
                        events: vec![(*e).clone()],
                    });
                }
            }
        }
    }
    out
}

/// When an attempt may *possibly* hold a resource (the store's view, as far
/// as the history can bound it; wider than a belief): from the send of any
/// grant or uncertain acquire/renew until its expiry (a grant: reply +
/// remainingMs; an uncertain call: [`latest_apply`] + its TTL). A grant's
/// interval ends at the reply of a later `released`/`already_absent`/
/// `not_owner` of the attempt; an uncertain call's never does (it may apply
/// after the release).
fn possible_holds<'a>(
    events: &'a [Event],
    resource: usize,
    faults: &[FaultWindow],
    slack: Duration,
) -> Vec<(&'a str, Duration, Duration, bool)> {
    let mut by_attempt: HashMap<&str, Vec<&Event>> = HashMap::new();
    for e in events.iter().filter(|e| e.resource == resource) {
        by_attempt.entry(e.attempt.as_str()).or_default().push(e);
    }
    let mut out = Vec::new();
    for (attempt, list) in by_attempt.iter_mut() {
        list.sort_by_key(|e| e.send);
        let shared = list.iter().any(|e| e.verb() == Verb::Acquire && e.shared);
        let releases: Vec<&&Event> = list
            .iter()
            .filter(|e| {
                e.verb() == Verb::Release
                    && !uncertain(e)
                    && matches!(
                        e.outcome.as_str(),
                        "released" | "already_absent" | "not_owner"
                    )
            })
            .collect();
        for e in list.iter() {
            if !matches!(e.verb(), Verb::Acquire | Verb::Renew) {
                continue;
            }
            if e.grants() {
                let Some(remaining) = e.remaining_ms else {
                    continue;
                };
                let mut end = e.reply + Duration::from_millis(remaining + 5);
                if let Some(r) = releases.iter().find(|r| r.send >= e.reply) {
                    end = end.min(r.reply);
                }
                out.push((*attempt, e.send, end, shared));
            } else if uncertain(e) {
                let ttl = Duration::from_millis(e.ttl_ms.unwrap_or(0));
                out.push((
                    *attempt,
                    e.send,
                    latest_apply(e, faults, slack) + ttl,
                    shared,
                ));
            }
        }
    }
    out
}

/// The spans in which holders leave no room for a waiter of this shape:
/// for an exclusive one with `limit`, `limit` exclusive holders or any shared
/// one; for a shared one, any exclusive holder. Holds of one attempt are
/// merged first, so an attempt counts once.
fn busy_spans(
    events: &[Event],
    resource: usize,
    faults: &[FaultWindow],
    slack: Duration,
    limit: u64,
    shared: bool,
) -> Vec<(Duration, Duration)> {
    // +1/-1 steps of the exclusive and shared holder counts; holds of one
    // attempt may overlap, so they are merged first (it counts once).
    let mut per_attempt: HashMap<&str, Vec<(Duration, Duration, bool)>> = HashMap::new();
    for (attempt, start, end, s) in possible_holds(events, resource, faults, slack) {
        per_attempt
            .entry(attempt)
            .or_default()
            .push((start, end, s));
    }
    let mut steps: Vec<(Duration, i64, bool)> = Vec::new();
    for mut holds in per_attempt.into_values() {
        holds.sort_by_key(|h| h.0);
        let mut merged: Vec<(Duration, Duration, bool)> = Vec::new();
        for h in holds {
            match merged.last_mut() {
                Some(last) if h.0 <= last.1 => last.1 = last.1.max(h.1),
                _ => merged.push(h),
            }
        }
        for (start, end, s) in merged {
            steps.push((start, 1, s));
            steps.push((end, -1, s));
        }
    }
    // Ends before starts at one instant: a hand-over is not an overlap.
    steps.sort_by_key(|s| (s.0, s.1));
    let (mut x, mut sh) = (0i64, 0i64);
    let mut out = Vec::new();
    let mut since: Option<Duration> = None;
    for (at, step, s) in steps {
        if s {
            sh += step;
        } else {
            x += step;
        }
        let busy = if shared {
            x > 0
        } else {
            sh > 0 || x >= i64::try_from(limit).unwrap_or(i64::MAX)
        };
        match (busy, since) {
            (true, None) => since = Some(at),
            (false, Some(from)) => {
                out.push((from, at));
                since = None;
            }
            _ => {}
        }
    }
    if let Some(from) = since {
        out.push((from, Duration::MAX));
    }
    out
}

/// Liveness (docs/design.md §12, §14): once a resource is free and nobody
/// holds a place ahead, a live waiter acquires within the dead-entry horizon.
/// Judged on every waiting acquire answered `contended` (at its deadline):
/// during its wait, the resource must never have been free, with no other
/// waiter in flight (one that could hold a place ahead: any other waiting
/// acquire of the resource, from its send to its reply, or, if its caller
/// left, to its deadline plus the slack) and outside every fault window, for
/// longer than `bound`. "Free" is judged against every *possible* holder
/// ([`possible_holds`]): uncertain calls count as holding until they could
/// no longer apply, so the check errs towards "busy", never towards a false
/// alarm. (Dead places of waiters that ended are the ones the bound allows
/// for: they must stop blocking within the horizon.)
pub fn check_liveness(events: &[Event], faults: &[FaultWindow], l: Liveness) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut cache: HashMap<(usize, u64, bool), Vec<(Duration, Duration)>> = HashMap::new();
    for w in events.iter().filter(|w| {
        w.verb() == Verb::Acquire
            && !w.aborted
            && w.status == 409
            && w.outcome == "contended"
            && w.wait_ms
                .is_some_and(|ms| Duration::from_millis(ms) > l.bound)
            && w.reply.saturating_sub(w.send) > l.bound
    }) {
        let limit = w.limit.unwrap_or(1);
        let busy = cache
            .entry((w.resource, limit, w.shared))
            .or_insert_with(|| {
                busy_spans(events, w.resource, faults, l.apply_slack, limit, w.shared)
            });
        let mut blocked: Vec<(Duration, Duration)> = busy
            .iter()
            .copied()
            .filter(|(a, b)| *b > w.send && *a < w.reply)
            .collect();
        for o in events.iter().filter(|o| {
            o.id != w.id
                && o.resource == w.resource
                && o.verb() == Verb::Acquire
                && o.wait_ms.is_some_and(|ms| ms > 0)
        }) {
            let end = if o.aborted {
                latest_apply(o, faults, l.apply_slack)
            } else {
                o.reply
            };
            if end > w.send && o.send < w.reply {
                blocked.push((o.send, end));
            }
        }
        for f in faults {
            if f.end > w.send && f.start < w.reply {
                blocked.push((f.start, f.end));
            }
        }
        blocked.sort_by_key(|b| b.0);
        // The longest span of [send, reply] that nothing blocks.
        let (mut cursor, mut longest, mut from) = (w.send, Duration::ZERO, w.send);
        for (a, b) in blocked {
            if a > cursor && a - cursor > longest {
                longest = a - cursor;
                from = cursor;
            }
            cursor = cursor.max(b);
        }
        if w.reply > cursor && w.reply - cursor > longest {
            longest = w.reply - cursor;
            from = cursor;
        }
        if longest > l.bound {
            // The requests about the resource around the free span (the
            // last 40 sent before it ended).
            let mut shown: Vec<Event> = events
                .iter()
                .filter(|e| {
                    e.resource == w.resource
                        && e.id != w.id
                        && e.verb() != Verb::Attempt
                        && e.reply + Duration::from_secs(2) >= from
                        && e.send <= from + longest
                })
                .cloned()
                .collect();
            shown.drain(..shown.len().saturating_sub(40));
            shown.push(w.clone());
            out.push(Violation {
                check: "liveness",
                what: format!(
                    "resource {} was free, with no waiter in flight that could be ahead, \
                     for {:.1} ms (from {:.1} ms; bound {:?}) while #{} waited, and it \
                     was answered contended",
                    w.resource,
                    ms(longest),
                    ms(from),
                    l.bound,
                    w.id
                ),
                events: shown,
            });
        }
    }
    out
}

/// The waits [`check_liveness`] judged (answered `contended` after a wait
/// longer than the bound) and the longest free span any of them saw.
pub fn liveness_judged(events: &[Event], l: Liveness) -> usize {
    events
        .iter()
        .filter(|w| {
            w.verb() == Verb::Acquire
                && !w.aborted
                && w.outcome == "contended"
                && w.wait_ms
                    .is_some_and(|ms| Duration::from_millis(ms) > l.bound)
                && w.reply.saturating_sub(w.send) > l.bound
        })
        .count()
}

/// Time from each window's end to the reply of the first `acquired` sent
/// after it (`None`: none before the history ends).
pub fn recovery_times(events: &[Event], faults: &[FaultWindow]) -> Vec<Option<Duration>> {
    faults
        .iter()
        .map(|f| {
            events
                .iter()
                .filter(|e| e.outcome == "acquired" && e.send >= f.end)
                .map(|e| e.reply - f.end)
                .min()
        })
        .collect()
}

/// Recovery: after each fault window, an `acquired` within `bound`.
pub fn check_recovery(events: &[Event], faults: &[FaultWindow], bound: Duration) -> Vec<Violation> {
    faults
        .iter()
        .zip(recovery_times(events, faults))
        .filter(|(_, t)| !matches!(t, Some(t) if *t <= bound))
        .map(|(f, t)| Violation {
            check: "recovery",
            what: format!(
                "after fault '{}' (ended at {:.1} ms) the first acquire answered 'acquired' \
                 came {} (bound {bound:?})",
                f.name,
                ms(f.end),
                t.map_or("never".to_owned(), |t| format!("after {t:?}")),
            ),
            events: Vec::new(),
        })
        .collect()
}

/// Sessions (docs/design.md §18): once a session's end was answered
/// (its leases recorded `released`), an inspect of one of its leases with
/// the lease's own attempt never finds the caller still holding it: an
/// ended session's leases are free for the next waiter at once, not at
/// their TTL.
pub fn check_session_ends(events: &[Event]) -> Vec<Violation> {
    let mut ended: HashMap<(&str, usize), &Event> = HashMap::new();
    for e in events
        .iter()
        .filter(|e| e.session.is_some() && e.verb() == Verb::Release && e.outcome == "released")
    {
        ended.entry((e.attempt.as_str(), e.resource)).or_insert(e);
    }
    events
        .iter()
        .filter(|e| e.verb() == Verb::Inspect && e.held_by.as_deref() == Some("caller"))
        .filter_map(|e| {
            let end = ended.get(&(e.attempt.as_str(), e.resource))?;
            (e.send >= end.reply).then(|| Violation {
                check: "session",
                what: "a lease of a session whose end was answered is still held by it".into(),
                events: vec![(*end).clone(), e.clone()],
            })
        })
        .collect()
}

/// Which checks to run (Sentinel and restart-empty runs claim fewer).
#[derive(Clone, Copy, Debug)]
pub struct Checks {
    /// Run [`check_safety`].
    pub safety: bool,
    /// Run [`check_honesty`].
    pub honesty: bool,
    /// Run [`check_liveness`] with these settings.
    pub liveness: Option<Liveness>,
}

/// Every selected check; fencing, typed, refusals and recovery always run.
pub fn check_all(
    events: &[Event],
    faults: &[FaultWindow],
    drift: Duration,
    recovery_bound: Duration,
    checks: Checks,
) -> Vec<Violation> {
    let mut out = Vec::new();
    if checks.safety {
        out.extend(check_safety(events, drift, faults));
        out.extend(check_session_ends(events));
        out.extend(check_breaks(events));
        out.extend(check_max_hold(events));
    }
    out.extend(check_fencing(events));
    if checks.honesty {
        out.extend(check_honesty(events));
    }
    out.extend(check_typed(events));
    out.extend(check_refusals(events, faults));
    out.extend(check_recovery(events, faults, recovery_bound));
    if let Some(l) = checks.liveness {
        out.extend(check_liveness(events, faults, l));
    }
    out
}

/// Counts per outcome, and per fault window (requests sent inside it) with
/// its recovery time, as printable lines.
pub fn summary(events: &[Event], faults: &[FaultWindow]) -> String {
    let count = |it: &mut dyn Iterator<Item = &Event>| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for e in it {
            let key = match &e.transport_error {
                Some(_) => "transport_error".to_owned(),
                None => e.outcome.clone(),
            };
            *m.entry(key).or_default() += 1;
        }
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = format!("{} requests: {}\n", events.len(), count(&mut events.iter()));
    for (f, t) in faults.iter().zip(recovery_times(events, faults)) {
        let inside = &mut events
            .iter()
            .filter(|e| e.send >= f.start && e.send < f.end);
        s.push_str(&format!(
            "  {:<22} {:>7.0}..{:>7.0} ms ({:>5.0} ms): {} | first acquired after: {}\n",
            f.name,
            ms(f.start),
            ms(f.end),
            ms(f.end - f.start),
            count(inside),
            t.map_or("never".to_owned(), |t| format!("{:.0} ms", ms(t))),
        ));
    }
    s
}

/// Violations counted by check and by the fault window they follow (the
/// last window that began before the latest answer involved), as printable
/// lines: which fault breaks which rule.
pub fn violations_by_fault(violations: &[Violation], faults: &[FaultWindow]) -> String {
    let mut table: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for v in violations {
        let latest = v.events.iter().map(|e| e.reply).max();
        let index = match (v.check, latest) {
            // A recovery violation names its window in its text.
            ("recovery", _) | (_, None) => faults
                .iter()
                .position(|f| {
                    v.what
                        .contains(&format!("'{}' (ended at {:.1} ms)", f.name, ms(f.end)))
                })
                .map_or(0, |i| i + 1),
            (_, Some(at)) => faults
                .iter()
                .rposition(|f| f.start <= at)
                .map_or(0, |i| i + 1),
        };
        *table.entry((index, v.check)).or_default() += 1;
    }
    let mut s = String::new();
    for ((index, check), n) in table {
        let name = match index {
            0 => "before any fault".to_owned(),
            i => format!(
                "after '{}' ({:.0}..{:.0} ms)",
                faults[i - 1].name,
                ms(faults[i - 1].start),
                ms(faults[i - 1].end)
            ),
        };
        s.push_str(&format!("  {name:<45} {check:<9} {n}\n"));
    }
    s
}
