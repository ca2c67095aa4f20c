//! The integration tests, one binary (one link of the crate, one build of
//! the harness): a module per concern. They talk to real `redis-server`
//! processes the harness starts on free loopback ports, and to the real
//! service (in process, or its binary). `common/` is the harness.

#[macro_use]
mod common;

mod api_surface;
mod callers_leave;
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_break;
#[cfg(feature = "cli")]
mod cli_session;
#[cfg(feature = "cli")]
mod cli_tls;
#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
mod conformance;
mod console;
mod contract;
mod contract_waiters;
#[cfg(feature = "client")]
mod election;
mod fairness;
mod handoff;
mod harness_selftest;
mod history;
mod history_api;
mod honesty;
mod http_diff;
mod instances;
mod keep_alive;
mod list;
mod logs;
mod max_hold;
#[cfg(feature = "client")]
mod mixed_history;
mod operator;
mod parsers_prop;
mod permits;
mod purpose_watch;
mod redis_failures;
mod refusals;
mod roles;
mod scripts;
mod seq_lifetime;
#[cfg(feature = "client")]
mod session_client;
mod session_kill;
mod session_leave;
mod sessions;
mod soak;
mod store_keys;
mod tls;
mod topologies;
#[cfg(feature = "otel")]
mod traces;
mod upgrade;
mod waits;
mod watch;
mod watch_direct;
