//! Session holders in the checked histories (issue 42, docs/design.md
//! §18): clients that hold leases through a session, beside the lease
//! clients and under the same faults. Each makes a session (an attempt's
//! owner token is its secret), acquires the plain lease (resource 0) and a
//! permit of the counting lease (resource 1) on it, sometimes waiting,
//! renews the session a few times, sometimes releases one lease alone, and
//! then either ends the session (and inspects each lease with its own
//! attempt: an ended session's leases must be free at once) or lets it
//! expire.
//!
//! What the checker sees: an acquire on the session as an acquire (its
//! `remainingMs` the session's); a session renew as a renew of each lease
//! it holds on the session, sent and answered when the session renew was,
//! `renewed` with the session's `remainingMs` unless the answer lists the
//! lease as `lost` (then `lost`); a session end as a release of each,
//! `released` when the end was answered `ended`. So a lease's belief is
//! the session's validity counted from the renew's send, and safety,
//! fencing, honesty, typed answers, liveness (an expired or ended session's
//! leases go to the next waiter) and `check_session_ends` judge them.

use super::*;

/// Session holders beside the lease clients.
pub(super) const CLIENTS: usize = 3;

/// One leg of a lease on the session.
struct Held {
    resource: usize,
    op: String,
    token: Option<u64>,
}

/// An answer to a session call (`POST`, `PATCH`, `DELETE /sessions…`).
struct SessionAnswer {
    send: Duration,
    reply: Duration,
    status: u16,
    problem_json: bool,
    retry_after: bool,
    body: Value,
    transport_error: Option<String>,
}

impl SessionAnswer {
    fn outcome(&self) -> &str {
        if self.transport_error.is_some() {
            return "transport_error";
        }
        self.body["outcome"].as_str().unwrap_or("<none>")
    }
}

async fn session_call(
    rec: &Recorder,
    rb: reqwest::RequestBuilder,
    body: Option<Value>,
) -> SessionAnswer {
    let rb = match body {
        Some(b) => rb.json(&b),
        None => rb,
    };
    let send = rec.now();
    let result = async {
        let resp = rb.send().await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await?;
        Ok::<_, reqwest::Error>((status, headers, text))
    }
    .await;
    let reply = rec.now();
    match result {
        Ok((status, headers, text)) => SessionAnswer {
            send,
            reply,
            status,
            problem_json: headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/problem+json")),
            retry_after: headers.contains_key("retry-after"),
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
            transport_error: None,
        },
        Err(e) => SessionAnswer {
            send,
            reply,
            status: 0,
            problem_json: false,
            retry_after: false,
            body: Value::Null,
            transport_error: Some(e.to_string()),
        },
    }
}

/// Records a session call's answer as one `verb` per lease in `held`
/// (`outcome_of` names each lease's outcome).
fn record_per_lease(
    rec: &Recorder,
    base: &Event,
    verb: Verb,
    answer: &SessionAnswer,
    held: &[Held],
    outcome_of: impl Fn(&Held) -> String,
) {
    let remaining = answer.body["session"]["remainingMs"].as_u64();
    let mut events = rec.events.lock().expect("events");
    for h in held {
        let outcome = outcome_of(h);
        let granted = verb == Verb::Renew && outcome == "renewed";
        // A lease a renewed session lists as lost: that lease's renew
        // answer is `404 lost` (the session's own answer is a 200).
        let listed_lost = answer.status == 200 && outcome == "lost";
        events.push(Event {
            verb: Some(verb),
            resource: h.resource,
            attempt: h.op.clone(),
            send: answer.send,
            reply: answer.reply,
            status: if listed_lost { 404 } else { answer.status },
            problem_json: answer.problem_json || listed_lost,
            retry_after: answer.retry_after,
            fencing_token: if granted { h.token } else { None },
            remaining_ms: if granted { remaining } else { None },
            // A session call names no lease's operation: its uncertain
            // answer is recorded as each lease's.
            operation_id: (outcome == "indeterminate").then(|| h.op.clone()),
            transport_error: answer.transport_error.clone(),
            outcome,
            ..base.clone()
        });
    }
}

/// One session holder's loop until the recorder stops.
pub(super) async fn client(rec: Arc<Recorder>, id: usize) {
    let mut rng = Rng::new();
    let apps = rec.bases.len() as u64;
    pause(rng.below(300)).await;
    while !rec.stop.load(Ordering::SeqCst) {
        let app = |rng: &mut Rng| rng.below(apps) as usize;
        let op = unique("sop-");
        let made = rec
            .call(
                Event {
                    client: id,
                    attempt: op.clone(),
                    verb: Some(Verb::Attempt),
                    app: app(&mut rng),
                    ..Event::default()
                },
                None,
                Some(json!({ "operationId": op })),
                None,
            )
            .await;
        let Some(secret) = made.held_by else {
            pause(50).await;
            continue;
        };
        // The session, retried with the same attempt while uncertain.
        let ttl = 1_000 + rng.below(1_000);
        let mut session = None;
        for _ in 0..3 {
            let base = &rec.bases[app(&mut rng)];
            let rb = rec
                .http
                .post(format!("{base}/sessions"))
                .header("Lease-Owner-Token", &secret)
                .header("Lease-Operation-Id", &op);
            let a = session_call(&rec, rb, Some(json!({ "ttlMs": ttl }))).await;
            match a.outcome() {
                "session_created" | "replayed_same_operation" => {
                    session = a.body["session"]["id"].as_str().map(str::to_owned);
                    break;
                }
                "indeterminate" | "transport_error" => pause(20).await,
                _ => {
                    pause(50).await;
                    break;
                }
            }
        }
        let Some(sid) = session else {
            continue;
        };
        let base = Event {
            client: id,
            session: Some(sid.clone()),
            ..Event::default()
        };
        // Its leases: the plain lease and a permit of the counting lease.
        let mut held: Vec<Held> = Vec::new();
        for resource in [0, 1] {
            let lease_op = unique("slop-");
            let wait = rng.chance(40).then(|| rng.below(800));
            let limit = (resource == 1).then_some(COUNTED);
            let mut body = json!({});
            if let Some(w) = wait {
                body["waitMs"] = json!(w);
            }
            if let Some(l) = limit {
                body["limit"] = json!(l);
            }
            for _ in 0..3 {
                let e = Event {
                    verb: Some(Verb::Acquire),
                    app: app(&mut rng),
                    resource,
                    attempt: lease_op.clone(),
                    ttl_ms: Some(ttl),
                    wait_ms: wait,
                    limit,
                    ..base.clone()
                };
                let a = rec.call(e, Some(&secret), Some(body.clone()), None).await;
                match a.outcome.as_str() {
                    "acquired" | "replayed_same_operation" => {
                        let token = rec
                            .events
                            .lock()
                            .expect("events")
                            .iter()
                            .rev()
                            .find(|e| e.attempt == lease_op && e.grants())
                            .and_then(|e| e.fencing_token);
                        held.push(Held {
                            resource,
                            op: lease_op.clone(),
                            token,
                        });
                        break;
                    }
                    "indeterminate" | "transport_error" => pause(20).await,
                    _ => break,
                }
            }
        }
        // Renew the session a few times (its TTL each), each within a
        // third of it; a lease the answer lists as lost is dropped.
        let renews = rng.below(4);
        let mut live = true;
        for _ in 0..renews {
            pause(rng.below(ttl / 3)).await;
            let base_url = &rec.bases[app(&mut rng)];
            let rb = rec
                .http
                .patch(format!("{base_url}/sessions/{sid}"))
                .header("Lease-Owner-Token", &secret);
            let a = session_call(&rec, rb, Some(json!({ "ttlMs": ttl }))).await;
            let outcome = a.outcome().to_owned();
            let lost: Vec<(String, String)> = a.body["lost"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .map(|x| {
                            (
                                x["purpose"].as_str().unwrap_or("").to_owned(),
                                x["digest"].as_str().unwrap_or("").to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let is_lost = |h: &Held| {
                lost.iter()
                    .any(|(p, d)| p == P && *d == rec.digests[h.resource])
            };
            let renew = Event {
                app: 0,
                ttl_ms: Some(ttl),
                ..base.clone()
            };
            record_per_lease(&rec, &renew, Verb::Renew, &a, &held, |h| {
                match outcome.as_str() {
                    "renewed" if is_lost(h) => "lost".to_owned(),
                    o => o.to_owned(),
                }
            });
            match outcome.as_str() {
                "renewed" => held.retain(|h| !is_lost(h)),
                "lost" | "not_owner" => {
                    live = false;
                    break;
                }
                // Uncertain or refused: the next renew may still come in time.
                _ => {}
            }
        }
        if !live {
            continue;
        }
        // Sometimes one lease goes alone (released and detached).
        if held.len() == 2 && rng.chance(25) {
            let h = held.remove(0);
            let e = Event {
                verb: Some(Verb::Release),
                app: app(&mut rng),
                resource: h.resource,
                attempt: h.op.clone(),
                ..base.clone()
            };
            rec.call(e, Some(&secret), None, None).await;
        }
        if rng.chance(50) {
            // Let it expire: no renew, no end; its leases end with it.
            pause(ttl + 100).await;
            continue;
        }
        // End it: each lease released; once answered `ended`, none is
        // still ours.
        for _ in 0..3 {
            let base_url = &rec.bases[app(&mut rng)];
            let rb = rec
                .http
                .delete(format!("{base_url}/sessions/{sid}"))
                .header("Lease-Owner-Token", &secret);
            let a = session_call(&rec, rb, None).await;
            let outcome = a.outcome().to_owned();
            record_per_lease(&rec, &base, Verb::Release, &a, &held, |_| {
                match outcome.as_str() {
                    "ended" => "released".to_owned(),
                    o => o.to_owned(),
                }
            });
            match outcome.as_str() {
                "ended" => {
                    for h in &held {
                        let e = Event {
                            verb: Some(Verb::Inspect),
                            app: app(&mut rng),
                            resource: h.resource,
                            attempt: h.op.clone(),
                            session: None,
                            ..base.clone()
                        };
                        rec.call(e, Some(&secret), None, None).await;
                    }
                    break;
                }
                "indeterminate" | "unavailable" | "overloaded" | "transport_error" => {
                    pause(20).await;
                }
                _ => break,
            }
        }
    }
}

/// The sessions' part of a history, as a line; panics when no session
/// lease was acquired, or none renewed through its session or released
/// (the run would then prove nothing about sessions).
pub(super) fn judge(store: &str, events: &[Event]) {
    let on_session = |verb: Verb, outcome: &str| {
        events
            .iter()
            .filter(|e| e.session.is_some() && e.verb == Some(verb) && e.outcome == outcome)
            .count()
    };
    let (acquired, renewed, lost, ended) = (
        on_session(Verb::Acquire, "acquired"),
        on_session(Verb::Renew, "renewed"),
        on_session(Verb::Renew, "lost"),
        on_session(Verb::Release, "released"),
    );
    println!(
        "history [{store}]: session leases: {acquired} acquired, {renewed} renewed through \
         their session, {lost} heard lost, {ended} released by their session's end or alone"
    );
    // The short runs under heavy faults (replica acks, Sentinel) see a
    // handful of session cycles: at least one lease renewed or ended.
    assert!(
        acquired > 0 && renewed + ended > 0,
        "history [{store}]: the session holders never held, renewed and ended leases \
         ({acquired} acquired, {renewed} renewed, {ended} released): the run proves nothing \
         about sessions"
    );
}
