//! Certificate and client CA files replaced while serving: no restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use serde_json::json;

use super::support::{client_config, der, flags, lease_cycle, request, served_leaf, TlsApp};
use crate::common::app::unique;
use crate::common::redis::TlsMaterial;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_client_ca_applies_without_a_restart() {
    let tls = TlsMaterial::generate();
    let client_ca = tls.dir.join("client-ca.pem");
    std::fs::copy(&tls.ca_cert, &client_ca).expect("copy");
    let ca = client_ca.to_str().expect("utf-8").to_owned();
    let mut extra = flags(&tls.server_cert, &tls.server_key);
    extra.extend(["--tls-client-ca-file", &ca]);
    let app = TlsApp::start(&extra).await;
    let known = client_config(&tls.ca_cert, Some((&tls.client_cert, &tls.client_key)));
    let accepted = || async {
        request(&known, app.addr, "GET", "/livez", &[], None)
            .await
            .is_ok_and(|r| r.status == 200)
    };
    assert!(accepted().await, "the client CA at start");

    // Another CA replaces the file: the client is refused from some
    // handshake on; the file back, accepted again.
    for (ca_file, want) in [(&tls.other_ca_cert, false), (&tls.ca_cert, true)] {
        std::fs::copy(ca_file, tls.dir.join("client-ca.pem.new")).expect("copy");
        std::fs::rename(tls.dir.join("client-ca.pem.new"), &client_ca).expect("rename");
        let deadline = Instant::now() + Duration::from_secs(30);
        while accepted().await != want {
            assert!(
                Instant::now() < deadline,
                "client CA change not applied within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    app.shutdown().await;
}

/// Polls handshakes until the server presents `want` (bounded); every
/// handshake on the way must succeed with `old` or `want`: a rotation
/// never interrupts serving.
async fn until_served(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    old: &[u8],
    want: &[u8],
) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut handshakes = 0;
    loop {
        let leaf = served_leaf(config, addr)
            .await
            .expect("every handshake succeeds");
        handshakes += 1;
        if leaf == want {
            return handshakes;
        }
        assert_eq!(leaf, old, "neither the old nor the new certificate");
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart() {
    use std::os::unix::fs::symlink;
    let tls = TlsMaterial::generate();
    let (cert_b, key_b) = tls.issue_server_cert("rotated-b", false);
    let (cert_c, key_c) = tls.issue_server_cert("rotated-c", false);

    // A Kubernetes Secret volume: tls.crt -> ..data/tls.crt, ..data -> a
    // timestamped directory; an update writes a new directory and renames
    // a new ..data symlink over the old one.
    let volume = tls.dir.join("secret-volume");
    let version = |name: &str, cert: &Path, key: &Path| -> PathBuf {
        let dir = volume.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::copy(cert, dir.join("tls.crt")).expect("copy cert");
        std::fs::copy(key, dir.join("tls.key")).expect("copy key");
        dir
    };
    version("..2026_12_03_a", &tls.server_cert, &tls.server_key);
    symlink("..2026_12_03_a", volume.join("..data")).expect("symlink");
    symlink("..data/tls.crt", volume.join("tls.crt")).expect("symlink");
    symlink("..data/tls.key", volume.join("tls.key")).expect("symlink");
    let (cert, key) = (volume.join("tls.crt"), volume.join("tls.key"));

    let app = TlsApp::start(&flags(&cert, &key)).await;
    let client = client_config(&tls.ca_cert, None);
    let der_a = der(&tls.server_cert);
    assert_eq!(
        served_leaf(&client, app.addr).await.expect("handshake"),
        der_a
    );
    // A connection opened before the rotation keeps working after it.
    let op = unique("op-");
    let before = request(
        &client,
        app.addr,
        "POST",
        "/attempts",
        &[],
        Some(json!({ "operationId": op })),
    )
    .await
    .expect("attempt");
    assert_eq!(before.status, 201);

    // Rotation 1: the Secret volume swaps its ..data symlink.
    version("..2026_12_03_b", &cert_b, &key_b);
    symlink("..2026_12_03_b", volume.join("..data_tmp")).expect("symlink");
    let swapped = Instant::now();
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("swap");
    let der_b = der(&cert_b);
    let n = until_served(&client, app.addr, &der_a, &der_b).await;
    println!(
        "symlink swap served after {} ms ({n} handshakes; reload interval 100 ms)",
        swapped.elapsed().as_millis()
    );
    assert_eq!(
        served_leaf(&client, app.metrics_addr)
            .await
            .expect("handshake"),
        der_b
    );
    lease_cycle(&client, app.addr).await;

    // Rotation 2, file by file (cert-manager's way elsewhere: rename over
    // each file), through a broken state: garbage in the certificate, then
    // the new certificate with the old key. Serving never stops; the old
    // certificate stays until the pair is whole.
    let target = volume.join("..2026_12_03_b");
    std::fs::write(
        target.join("tls.crt.new"),
        b"-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .expect("write");
    std::fs::rename(target.join("tls.crt.new"), target.join("tls.crt")).expect("rename");
    assert_eq!(
        served_leaf(&client, app.addr).await.expect("still served"),
        der_b
    );
    std::fs::copy(&cert_c, target.join("tls.crt.new")).expect("copy");
    std::fs::rename(target.join("tls.crt.new"), target.join("tls.crt")).expect("rename");
    assert_eq!(
        served_leaf(&client, app.addr).await.expect("still served"),
        der_b
    );
    std::fs::copy(&key_c, target.join("tls.key.new")).expect("copy");
    let replaced = Instant::now();
    std::fs::rename(target.join("tls.key.new"), target.join("tls.key")).expect("rename");
    let n = until_served(&client, app.addr, &der_b, &der(&cert_c)).await;
    println!(
        "file rename served after {} ms ({n} handshakes)",
        replaced.elapsed().as_millis()
    );
    lease_cycle(&client, app.addr).await;
    app.shutdown().await;
}
