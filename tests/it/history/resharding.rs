//! The checked history on a Redis Cluster while slots move (issue 39, item
//! 11): the slot of every resource of the run is migrated to another master,
//! twice, as `redis-cli --cluster reshard` does it (`CLUSTER SETSLOT …
//! IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its
//! keys a few at a time, then `SETSLOT … NODE` on every master), while the
//! recorder's clients run every verb, waits and breaks on two instances.
//! Every key a script touches is in its `KEYS`, so Redis redirects
//! (`ASK`) or refuses (`TRYAGAIN`) a call before the script runs: the
//! checker finds no two holders, no token going back, `unavailable` only
//! where nothing was applied, and waits answered within the bound outside
//! the windows.

use super::*;

/// How long a slot stays open (MIGRATING/IMPORTING) around its keys'
/// moves, so that calls meet each state.
const OPEN: Duration = Duration::from_millis(400);

/// Moves the slot of `tag_key` from its master to the next one. Blocking
/// (redis-cli); returns when every master names the new owner.
fn move_slot(cluster: &RedisCluster, tag_key: &str) {
    let slot = cluster.slot_for_key(tag_key).to_string();
    let source = cluster.node_for_key(tag_key);
    let masters = cluster.masters();
    let at = masters
        .iter()
        .position(|m| m.port() == source.port())
        .expect("the source is a master");
    let target = masters[(at + 1) % masters.len()];
    let (source_id, target_id) = (
        source.cli(&["CLUSTER", "MYID"]),
        target.cli(&["CLUSTER", "MYID"]),
    );
    target.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
    source.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
    std::thread::sleep(OPEN);
    let port = target.port().to_string();
    // A few keys at a time: in between, a resource's keys are split
    // between the two nodes (TRYAGAIN for a script naming both halves).
    // Bounded: the source holds a few keys per resource of the slot.
    for _ in 0..1_000 {
        let keys = source.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "2"]);
        let keys: Vec<&str> = keys
            .lines()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .collect();
        if keys.is_empty() {
            break;
        }
        let mut migrate = vec![
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "REPLACE",
            "KEYS",
        ];
        migrate.extend(keys.iter().copied());
        // NOKEY: they expired meanwhile.
        if let Err(e) = source.cli_result(&migrate) {
            assert!(e.contains("NOKEY"), "MIGRATE {keys:?}: {e}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(OPEN);
    for node in masters {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_cluster_while_slots_migrate() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let seeds = cluster.seed_urls().join(",");
    let ns = unique("h");
    let extra = ["--namespace", ns.as_str(), "--redis-cluster-nodes", &seeds];
    let a = TestApp::spawn_with(history_args(&Backend::Memory, &extra)).await;
    let b = TestApp::spawn_with(history_args(&Backend::Memory, &extra)).await;
    let run = Running::start(&[&a, &b]);
    let started = Instant::now();
    let mut windows = Vec::new();
    tokio::time::sleep(GAP).await;
    let digests = run.rec.digests.clone();
    let mut round = 0;
    loop {
        for d in &digests {
            let key = slot_key(d);
            let start = run.now();
            tokio::task::block_in_place(|| move_slot(&cluster, &key));
            windows.push(FaultWindow {
                name: "resharding".to_owned(),
                start,
                end: run.now(),
                data_loss: false,
                definite_refusal: false,
                on_one_master: false,
            });
            tokio::time::sleep(GAP).await;
        }
        round += 1;
        if round >= 2 && started.elapsed() >= min_run() {
            break;
        }
    }
    run.until_recovered(windows.last().map_or(Duration::ZERO, |w| w.end))
        .await;
    let events = run.finish().await;
    let refused = events.iter().filter(|e| e.outcome == "unavailable").count();
    println!(
        "history [cluster, resharding]: {} slot moves; {refused} calls answered unavailable",
        windows.len()
    );
    judge(
        "cluster, resharding",
        &events,
        &windows,
        Checks {
            safety: true,
            honesty: true,
            liveness: Some(LIVENESS),
        },
    );
}

/// `errorstat_TRYAGAIN` summed over `nodes`: the calls Redis refused with
/// TRYAGAIN (INFO errorstats; absent until the first).
fn try_again_count(nodes: &[&RedisServer]) -> u64 {
    nodes
        .iter()
        .map(|n| {
            n.cli(&["INFO", "errorstats"])
                .lines()
                .find_map(|l| l.trim().strip_prefix("errorstat_TRYAGAIN:count="))
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// `MIGRATE`s every key of `slot` still on `source` to `target` (`NOKEY`:
/// they expired meanwhile).
fn migrate_keys(source: &RedisServer, target: &RedisServer, slot: &str, count: &str) {
    let port = target.port().to_string();
    let keys = source.cli(&["CLUSTER", "GETKEYSINSLOT", slot, count]);
    let keys: Vec<&str> = keys
        .lines()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    assert!(!keys.is_empty(), "no key of slot {slot} left to migrate");
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(keys.iter().copied());
    if let Err(e) = source.cli_result(&migrate) {
        assert!(e.contains("NOKEY"), "MIGRATE {keys:?}: {e}");
    }
}

/// A call that meets its resource's keys split between the two nodes of a
/// half-migrated slot is refused TRYAGAIN before its script runs; the store
/// retries it a few times with a short backoff (src/store/redis/cluster.rs,
/// `MAX_TRY_AGAIN`) instead of answering `unavailable`. Here the renew is
/// sent while one key of the lease has moved and the others have not; once
/// Redis has refused it TRYAGAIN (counted in INFO errorstats), the rest of
/// the keys move and the slot's new owner is set: the renew is answered
/// `renewed`, the same fencing token. (The renew changes the holder label:
/// renew.lua names every key of the lease, where the slim renew of a plain
/// lease, lua/plain_renew.lua, names only the record.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_tryagain_is_retried_until_the_slot_settles() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let seeds = cluster.seed_urls().join(",");
    let ns = unique("t");
    // The retries last for the first half of the command timeout: 10 s
    // here (about the 100 tries `MAX_TRY_AGAIN` allows), so that finishing
    // the migration below (five redis-cli processes on a loaded machine)
    // cannot outlast them. (The history runs' 500 ms did: the renew was
    // answered `unavailable` in a full-suite run; and so did 5 s, while
    // the machine also compiled.)
    let extra = [
        "--namespace",
        ns.as_str(),
        "--redis-cluster-nodes",
        &seeds,
        "--command-timeout-ms",
        "20000",
    ];
    let app = Arc::new(TestApp::spawn_with(args(&Backend::Memory, &extra)).await);
    let d = digest();
    let a = app.attempt().await;
    let got = app.acquire(P, &d, &a, 60_000).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    let token = got.fencing_token();

    let key = slot_key(&d);
    let slot = cluster.slot_for_key(&key).to_string();
    let source = cluster.node_for_key(&key);
    let masters = cluster.masters();
    let target = *masters
        .iter()
        .find(|m| m.port() != source.port())
        .expect("another master");
    let held: u64 = source
        .cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot])
        .parse()
        .expect("COUNTKEYSINSLOT");
    assert!(held >= 2, "the lease has {held} keys: nothing to split");
    let (source_id, target_id) = (
        source.cli(&["CLUSTER", "MYID"]),
        target.cli(&["CLUSTER", "MYID"]),
    );
    target.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
    source.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
    migrate_keys(source, target, &slot, "1");
    let before = try_again_count(&masters);

    let renew = {
        let (app, d, a) = (Arc::clone(&app), d.clone(), a.clone());
        let relabel = serde_json::json!({ "ttlMs": 60_000, "holder": "resharded" });
        tokio::spawn(async move { app.renew_body(P, &d, &a, &relabel).await })
    };
    // Bounded: the renew is refused TRYAGAIN within its first attempts.
    let waited = Instant::now();
    while tokio::task::block_in_place(|| try_again_count(&masters)) == before {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "Redis never refused the renew TRYAGAIN"
        );
        assert!(!renew.is_finished(), "the renew ended without a TRYAGAIN");
        tokio::task::yield_now().await;
    }
    tokio::task::block_in_place(|| {
        migrate_keys(source, target, &slot, "100");
        for node in &masters {
            node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        }
    });
    let renewed = renew.await.expect("the renew task");
    assert_eq!(
        renewed.outcome(),
        "renewed",
        "a TRYAGAIN is retried, not answered: {:?}",
        renewed.body
    );
    assert_eq!(renewed.fencing_token(), token);
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
}
