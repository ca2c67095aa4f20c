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
pub mod fault_proxy;
pub mod history;
pub mod redis;
