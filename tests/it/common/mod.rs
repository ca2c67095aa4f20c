//! Shared helpers for the integration tests.
//!
//! Every test binary compiles this module and uses only part of it.
#![allow(dead_code)]

/// Runs each named `async fn(Backend)` as two tests: `memory::name` on the
/// embedded store and `redis::name` on a fresh real `redis-server`.
#[allow(unused_macros)]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(crate::common::app::Backend::Memory).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = crate::common::redis::RedisServer::start();
                    super::$name(crate::common::app::Backend::Redis(server.url())).await;
                    drop(server);
                }
            )*
        }
    };
}

pub mod app;
pub mod cli;
pub mod fault_proxy;
pub mod history;
pub mod http_proxy;
pub mod redis;
pub mod residue;
pub mod rng;

/// With the `client` feature, reqwest is built with `rustls-no-provider`
/// (no aws-lc), so a plain `reqwest::Client::new()` in a test panics unless
/// a process-wide rustls provider is installed. leasehold's own `Client`
/// does not need this; the tests' raw reqwest clients do. Called by
/// `app::unique` and `app::args`, which every test reaches first.
pub fn install_tls_provider() {
    // An error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
