//! Shows that each piece of the real-Redis harness (tests/it/common/redis.rs)
//! does what it claims, against real redis-server processes, without any of
//! the service's own code.

#[allow(unused_imports)]
use crate::common;

use std::time::Duration;

use common::redis::{
    require_binary, RedisCluster, RedisSentinelSet, RedisServer, ReplyDropProxy, TlsMaterial,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One RESP command over `stream`, returning the first reply line.
async fn resp(stream: &mut TcpStream, args: &[&str]) -> String {
    send(stream, args).await;
    read_line(stream).await
}

async fn send(stream: &mut TcpStream, args: &[&str]) {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(req.as_bytes()).await.expect("write");
}

async fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        let n = stream.read(&mut byte).await.expect("read");
        assert_ne!(
            n,
            0,
            "connection closed; got {:?} so far",
            String::from_utf8_lossy(&line)
        );
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).trim_end().to_string()
}

#[test]
#[should_panic(expected = "not found: install it with `apt-get install redis-server`")]
fn a_missing_binary_panics_with_an_install_hint() {
    require_binary("redis-server-that-does-not-exist", "redis-server");
}

#[test]
#[should_panic(expected = "Bad directive or wrong number of arguments")]
fn a_server_that_cannot_start_panics_with_its_log() {
    RedisServer::start_with(&["--no-such-directive", "1"]);
}

#[test]
fn standalone_start_kill_restart_and_cleanup() {
    let mut server = RedisServer::start();
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cli(&["GET", "k"]), "v");
    assert_eq!(
        server.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
    assert_eq!(server.cli(&["CONFIG", "GET", "save"]), "save");
    let err = server.cli_result(&["NOSUCHCOMMAND"]).unwrap_err();
    assert!(err.contains("unknown command"), "{err}");

    server.kill();
    assert!(!server.is_running());
    assert!(
        std::net::TcpStream::connect(server.addr()).is_err(),
        "killed server still accepts"
    );

    server.restart();
    assert_eq!(server.port(), port, "restart keeps the port");
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["EXISTS", "k"]), "0", "restart starts empty");

    let dir = server.dir().to_path_buf();
    assert!(dir.join("redis.log").is_file());
    drop(server);
    assert!(!dir.exists(), "temp dir removed on drop");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn start_with_requirepass_refuses_anonymous_clients() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    assert_eq!(
        server.cli(&["PING"]),
        "PONG",
        "cli() uses the --requirepass"
    );
    let err = server.cli_unauthenticated(&["PING"]).unwrap_err();
    assert!(err.contains("NOAUTH"), "{err}");
}

#[tokio::test]
async fn freeze_holds_replies_until_thaw() {
    let server = RedisServer::start();
    let mut conn = TcpStream::connect(server.addr()).await.unwrap();
    assert_eq!(resp(&mut conn, &["PING"]).await, "+PONG");

    server.freeze();
    assert!(server.is_frozen());
    send(&mut conn, &["INCR", "n"]).await;
    // A bounded wait for something that must NOT happen while frozen.
    let early = tokio::time::timeout(Duration::from_millis(300), read_line(&mut conn)).await;
    assert!(early.is_err(), "a frozen server replied: {early:?}");

    server.thaw();
    let reply = tokio::time::timeout(Duration::from_secs(5), read_line(&mut conn)).await;
    assert_eq!(reply.expect("reply after thaw"), ":1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_executes_commands_but_drops_their_replies() {
    let server = RedisServer::start();
    let proxy = ReplyDropProxy::start(server.addr()).await;
    assert_eq!(proxy.url(), format!("redis://{}", proxy.addr()));

    let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(resp(&mut conn, &["INCR", "n"]).await, ":1");
    assert_eq!(proxy.bytes_dropped(), 0);

    proxy.drop_replies(true);
    send(&mut conn, &["INCR", "n"]).await;
    proxy.wait_for_dropped(4, Duration::from_secs(5)).await; // ":2\r\n"
    assert_eq!(proxy.bytes_dropped(), 4);
    assert_eq!(
        server.cli(&["GET", "n"]),
        "2",
        "the command ran although its reply was lost"
    );

    proxy.drop_replies(false);
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(resp(&mut fresh, &["GET", "n"]).await, "$1");

    let addr = proxy.addr();
    drop(proxy);
    // After drop, existing connections are closed and nothing listens.
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    // The listener closes as the aborted task is dropped, which may finish
    // just after `drop` returns: a connection is refused or closed unused.
    if let Ok(mut late) = TcpStream::connect(addr).await {
        let read = tokio::time::timeout(Duration::from_secs(5), late.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    }
}

#[test]
fn cluster_routes_keys_and_fails_over() {
    let cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.nodes.len(), 6);
    assert_eq!(cluster.seed_urls().len(), 6);
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    for node in &cluster.nodes {
        assert!(node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
    }

    let key = "leasehold:lease:v2:{invoice-export:abc}";
    let owner = cluster.node_for_key(key);
    assert_eq!(owner.cli(&["SET", key, "x"]), "OK");
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port() != owner.port())
        .unwrap();
    let moved = other.cli_result(&["GET", key]).unwrap_err();
    assert!(
        moved.contains("MOVED") && moved.contains(&owner.port().to_string()),
        "{moved}"
    );

    // Promote the replica of the key's master: the key moves with it.
    let replica_idx = cluster
        .replicas()
        .iter()
        .position(|r| {
            let info = r.cli(&["INFO", "replication"]);
            info.contains(&format!("master_port:{}", owner.port()))
        })
        .expect("the key's master has a replica");
    let promoted_port = cluster.replicas()[replica_idx].port();
    cluster.failover_replica(replica_idx);
    let new_owner = cluster.node_for_key(key);
    assert_eq!(new_owner.port(), promoted_port);
    assert_eq!(
        new_owner.cli(&["GET", key]),
        "x",
        "replicated before the handover"
    );
    assert_eq!(cluster.masters().len(), 3);
    let old_master_port = owner.port();
    assert!(
        cluster
            .replicas()
            .iter()
            .any(|r| r.port() == old_master_port),
        "old master demoted"
    );

    // Kill the key's master: its replica (the old master) takes over on its own.
    let mut cluster = cluster;
    let promoted = cluster
        .nodes
        .iter()
        .position(|n| n.port() == promoted_port)
        .unwrap();
    cluster.nodes[promoted].kill();
    let survivor = cluster.wait_for_new_node_for_key(key, promoted_port);
    assert_eq!(survivor.port(), old_master_port);
    assert_eq!(survivor.cli(&["GET", key]), "x");
}

#[test]
fn sentinel_reports_master_and_fails_over() {
    let set = RedisSentinelSet::start(2, 3);
    assert_eq!(set.master_name(), "mymaster");
    assert_eq!(set.sentinel_urls().len(), 3);
    assert_eq!(set.current_master_port(), set.master.port());
    assert_eq!(set.master.cli(&["SET", "k", "v"]), "OK");
    for s in &set.sentinels {
        assert_eq!(s.cli(&["PING"]), "PONG");
    }

    let new_port = set.failover();
    assert_ne!(new_port, set.master.port());
    assert!(set.replicas.iter().any(|r| r.port() == new_port));
    let new_master = set.current_master();
    assert_eq!(new_master.port(), new_port);
    assert_eq!(new_master.cli(&["ROLE"]).lines().next(), Some("master"));
    assert_eq!(new_master.cli(&["GET", "k"]), "v");
    for s in &set.sentinels {
        let addr = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"]);
        assert_eq!(addr, format!("127.0.0.1\n{new_port}"));
    }
}

#[test]
fn tls_server_checks_both_sides() {
    let tls = TlsMaterial::generate();
    for f in [
        &tls.ca_cert,
        &tls.server_cert,
        &tls.server_key,
        &tls.client_cert,
        &tls.client_key,
        &tls.other_ca_cert,
    ] {
        assert!(f.is_file(), "{} missing", f.display());
    }
    let server = RedisServer::start_tls(&tls, true);
    assert_eq!(
        server.tls_url(),
        format!("rediss://127.0.0.1:{}", server.port())
    );
    assert_eq!(server.cli(&["PING"]), "PONG");

    let cli = |extra: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .args([
                "-e",
                "-h",
                "127.0.0.1",
                "-p",
                &server.port().to_string(),
                "--tls",
            ])
            .args(extra)
            .arg("PING")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    };
    let path = |p: &std::path::Path| p.display().to_string();
    let (ca, cert, key) = (
        path(&tls.ca_cert),
        path(&tls.client_cert),
        path(&tls.client_key),
    );
    // The server's certificate verifies against our CA, by IP and by name.
    assert_eq!(
        cli(&["--cacert", &ca, "--cert", &cert, "--key", &key]),
        (true, "PONG".into())
    );
    assert_eq!(
        cli(&[
            "--sni",
            "localhost",
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key
        ]),
        (true, "PONG".into())
    );
    // A CA that did not sign the server's certificate is refused.
    let other = path(&tls.other_ca_cert);
    assert!(!cli(&["--cacert", &other, "--cert", &cert, "--key", &key]).0);
    // require_client_cert: no client certificate, no session.
    assert!(!cli(&["--cacert", &ca]).0);
    // Plain TCP to a TLS port gets no Redis reply.
    let plain = std::process::Command::new("redis-cli")
        .args([
            "-e",
            "-h",
            "127.0.0.1",
            "-p",
            &server.port().to_string(),
            "PING",
        ])
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&plain.stdout).trim(), "PONG");

    let optional = RedisServer::start_tls(&tls, false);
    let out = std::process::Command::new("redis-cli")
        .args([
            "-e",
            "-h",
            "127.0.0.1",
            "-p",
            &optional.port().to_string(),
            "--tls",
            "--cacert",
            &ca,
            "PING",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
}

#[test]
fn acl_user_gets_only_what_a_lease_service_needs() {
    let server = RedisServer::start_acl("leasehold", "lease-pw");
    let as_user = |args: &[&str]| server.cli_as("leasehold", "lease-pw", args);

    assert_eq!(as_user(&["PING"]).unwrap(), "PONG");
    assert_eq!(as_user(&["SET", "a", "1", "PX", "1000"]).unwrap(), "OK");
    assert_eq!(
        as_user(&["EVAL", "return redis.call('GET', KEYS[1])", "1", "a"]).unwrap(),
        "1"
    );
    let sha = as_user(&["SCRIPT", "LOAD", "return 7"]).unwrap();
    assert_eq!(as_user(&["EVALSHA", &sha, "0"]).unwrap(), "7");
    assert!(as_user(&["TIME"]).is_ok());
    assert!(as_user(&["INFO", "server"])
        .unwrap()
        .contains("redis_version"));
    assert_eq!(as_user(&["CLIENT", "SETNAME", "leasehold"]).unwrap(), "OK");
    assert_eq!(as_user(&["PUBLISH", "ch", "x"]).unwrap(), "0");

    for refused in [
        &["CONFIG", "GET", "maxmemory"][..],
        &["FLUSHALL"],
        &["KEYS", "*"],
        &["ACL", "LIST"],
        &["CLIENT", "LIST"],
        &["SCRIPT", "FLUSH"],
        &["FUNCTION", "FLUSH"],
        &["FLUSHDB"],
        &["CLIENT", "KILL", "ID", "1"],
        &["SHUTDOWN", "NOSAVE"],
    ] {
        let err = as_user(refused).unwrap_err();
        assert!(err.contains("NOPERM"), "{refused:?} not refused: {err}");
    }
    let wrong = server.cli_as("leasehold", "wrong", &["PING"]).unwrap_err();
    assert!(wrong.contains("WRONGPASS"), "{wrong}");
    let anon = server.cli_unauthenticated(&["PING"]).unwrap_err();
    assert!(anon.contains("NOAUTH"), "{anon}");
    // The harness's own cli() is the admin and may do anything.
    assert_eq!(server.cli(&["CONFIG", "GET", "maxmemory"]), "maxmemory\n0");
}

#[test]
fn sentinel_fails_over_on_its_own_when_the_master_dies() {
    let mut set = RedisSentinelSet::start(1, 3);
    let old = set.current_master_port();
    set.master.kill();
    let new_port = set.wait_for_new_master(old);
    assert_eq!(new_port, set.replicas[0].port());
    assert_eq!(set.current_master().cli(&["SET", "k", "v"]), "OK");
}
