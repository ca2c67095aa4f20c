//! The Lua scripts Redis runs are the assembled ones (issue 40): each
//! entry of `lua/` with its includes spliced in at compile time
//! (`src/store/redis/lua.rs`), hashed as assembled. Against a real
//! `redis-server`: the SHA-1 the service sends with EVALSHA is the one
//! Redis reports for the assembled text, and what the service loads on
//! NOSCRIPT is that text, byte for byte.

use leasehold::store::redis::lua;

use crate::common::app::{digest, Backend, TestApp};
use crate::common::redis::RedisServer;

/// The SHA-1 the service computes for `text` (`evalsha.rs`: redis-rs's).
fn sha(text: &str) -> String {
    redis::Script::new(text).get_hash().to_owned()
}

#[test]
fn every_assembled_script_loads_under_the_sha_the_service_sends() {
    let server = RedisServer::start();
    for script in lua::ALL {
        let loaded = server.cli(&["SCRIPT", "LOAD", script.assembled]);
        assert_eq!(loaded, sha(script.assembled), "lua/{}.lua", script.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_service_loads_is_the_assembled_text() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    server.cli(&["SCRIPT", "FLUSH"]);
    const P: &str = "ledger";
    let d = digest();
    let a = app.attempt().await;
    assert_eq!(app.acquire(P, &d, &a, 30_000).await.outcome(), "acquired");
    assert_eq!(app.renew(P, &d, &a, 30_000).await.outcome(), "renewed");
    app.inspect(P, &d, None).await;
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    // A bounded hold: the slim scripts leave its renew and release to the
    // general ones, and a replay is always the general acquire's.
    let (d2, b) = (digest(), app.attempt().await);
    let bounded = serde_json::json!({ "ttlMs": 30_000, "maxHoldMs": 60_000 });
    assert_eq!(
        app.acquire_body(P, &d2, &b, &bounded).await.outcome(),
        "acquired"
    );
    assert_eq!(
        app.acquire_body(P, &d2, &b, &bounded).await.outcome(),
        "replayed_same_operation"
    );
    assert_eq!(app.renew(P, &d2, &b, 30_000).await.outcome(), "renewed");
    assert_eq!(app.release(P, &d2, &b).await.outcome(), "released");
    for script in [lua::ACQUIRE, lua::RENEW, lua::INSPECT, lua::RELEASE] {
        assert!(
            script.entry != script.assembled,
            "lua/{}.lua includes nothing",
            script.name
        );
    }
    for script in [
        lua::ACQUIRE,
        lua::RENEW,
        lua::INSPECT,
        lua::RELEASE,
        lua::PLAIN_ACQUIRE,
        lua::PLAIN_RENEW,
        lua::PLAIN_RELEASE,
    ] {
        let exists = |text: &str| server.cli(&["SCRIPT", "EXISTS", &sha(text)]);
        assert_eq!(
            exists(script.assembled),
            "1",
            "lua/{}.lua not loaded as assembled",
            script.name
        );
        // (the slim scripts include nothing: as written is as assembled)
        if script.entry != script.assembled {
            assert_eq!(
                exists(script.entry),
                "0",
                "lua/{}.lua loaded unassembled",
                script.name
            );
        }
    }
}
