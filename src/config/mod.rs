//! Settings: the command line and its `LEASEHOLD_*` variables, one group per
//! component, checked once into a [`ValidConfig`]. Declares and re-exports.
//!
//! | file | group |
//! | --- | --- |
//! | `cli.rs` | the subcommands; `leasehold healthcheck`'s settings |
//! | `serve.rs` | [`ServeArgs`] (the groups below, flattened) → [`ValidConfig`] |
//! | `http.rs` | [`HttpArgs`]: listeners, connections, threads, shutdown; [`TlsArgs`] (HTTPS) |
//! | `store.rs` | [`StoreArgs`]: Redis topology, credentials, replicas, namespace, pool, the embedded store; [`RedisTlsArgs`] |
//! | `limits.rs` | [`LimitsArgs`]: TTL, waits, watches, admission, retry hints |
//! | `auth.rs` | [`AuthArgs`]: API keys |
//! | `telemetry.rs` | [`TelemetryArgs`]: log format, metric labels |
//! | `check.rs` | the shared bound checks, naming the variable |
//! | `env.rs` | clap errors about a variable's value, told in its name |
//!
//! To add a setting: a field in its group's struct (doc comment = help
//! text; `env = "LEASEHOLD_…"`; `display_order` places it in `--help`), its
//! bounds in that group's `validate`, its use where `startup.rs` builds the
//! component from the group, a row in `docs/configuration.md`, and the new
//! help text in `serve_help*.txt` (the tests compare them).

mod auth;
mod check;
mod cli;
mod env;
mod http;
mod limits;
mod serve;
mod store;
mod telemetry;

pub use self::auth::AuthArgs;
pub use self::cli::{Cli, Command, HealthcheckArgs};
pub use self::env::env_value_error;
pub use self::http::{HttpArgs, TlsArgs};
pub use self::limits::LimitsArgs;
pub use self::serve::{ServeArgs, ValidConfig};
pub use self::store::{RedisTlsArgs, StoreArgs};
pub use self::telemetry::TelemetryArgs;
pub use crate::domain::ConfigError;

#[cfg(test)]
mod tests;
