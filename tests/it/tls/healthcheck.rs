//! `leasehold healthcheck` against an HTTPS listener.

use std::path::Path;

use super::support::{flags, TlsApp, PROMPT};
use crate::common::app::{Backend, TestApp};
use crate::common::redis::TlsMaterial;

/// Runs `leasehold healthcheck` with only these `LEASEHOLD_*` variables.
async fn healthcheck(env: &[(&str, String)], extra: &[&str]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.arg("healthcheck").args(extra);
    for (name, _) in std::env::vars() {
        if name.starts_with("LEASEHOLD_") {
            cmd.env_remove(name);
        }
    }
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = tokio::time::timeout(PROMPT, cmd.output())
        .await
        .expect("healthcheck ends in time")
        .expect("run leasehold healthcheck");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_probes_https_pinned_to_the_served_certificate() {
    let tls = TlsMaterial::generate();
    // A serving certificate that may also act as a client: the healthcheck
    // presents it when client certificates are required.
    let (cert, key) = tls.issue_server_cert("dual-use", true);
    let app = TlsApp::start(&flags(&cert, &key)).await;
    let path = |p: &Path| p.display().to_string();
    let base = [
        ("LEASEHOLD_LISTEN", app.addr.to_string()),
        ("LEASEHOLD_TLS_CERT_FILE", path(&cert)),
        ("LEASEHOLD_TLS_KEY_FILE", path(&key)),
    ];
    let (ok, stderr) = healthcheck(&base, &[]).await;
    assert!(ok, "the default https:// probe passes: {stderr}");

    // Another certificate than the one served: refused.
    let wrong = [
        ("LEASEHOLD_LISTEN", app.addr.to_string()),
        ("LEASEHOLD_TLS_CERT_FILE", path(&tls.server_cert)),
    ];
    let (ok, stderr) = healthcheck(&wrong, &[]).await;
    assert!(!ok, "a different pinned certificate must fail");
    assert!(stderr.contains("https://"), "{stderr}");

    // Plain http to the TLS port fails.
    let url = format!("http://{}/readyz", app.addr);
    let (ok, _) = healthcheck(&[], &["--url", &url]).await;
    assert!(!ok, "plain http to the TLS port must fail");
    app.shutdown().await;

    // Client certificates required: the probe presents the service's own.
    let ca = tls.ca_cert.to_str().expect("utf-8").to_owned();
    let mut extra = flags(&cert, &key);
    extra.extend(["--tls-client-ca-file", &ca]);
    let app = TlsApp::start(&extra).await;
    let mut env = vec![
        ("LEASEHOLD_LISTEN", app.addr.to_string()),
        ("LEASEHOLD_TLS_CERT_FILE", path(&cert)),
        ("LEASEHOLD_TLS_KEY_FILE", path(&key)),
    ];
    let (ok, stderr) = healthcheck(&env, &[]).await;
    assert!(
        !ok,
        "without LEASEHOLD_TLS_CLIENT_CA_FILE it sends no certificate: {stderr}"
    );
    env.push(("LEASEHOLD_TLS_CLIENT_CA_FILE", path(&tls.ca_cert)));
    let (ok, stderr) = healthcheck(&env, &[]).await;
    assert!(ok, "with a client certificate: {stderr}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_still_probes_plain_http() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let (ok, stderr) = healthcheck(&[("LEASEHOLD_LISTEN", app.addr.to_string())], &[]).await;
    assert!(ok, "the default http:// probe passes: {stderr}");
    let url = format!("http://{}/no-such-page", app.addr);
    let (ok, stderr) = healthcheck(&[], &["--url", &url]).await;
    assert!(!ok, "a 404 is not healthy");
    assert!(stderr.contains("2xx"), "{stderr}");
    app.shutdown().await;
}
