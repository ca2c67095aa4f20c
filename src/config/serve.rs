//! `leasehold serve`'s settings: the component groups flattened into one
//! command line ([`ServeArgs`]), and [`ValidConfig`], what their one
//! validation gives.

use std::ops::Deref;

use clap::{Args, Parser};

use super::auth::AuthArgs;
use super::http::HttpArgs;
use super::limits::LimitsArgs;
use super::store::StoreArgs;
use super::telemetry::TelemetryArgs;
use crate::domain::ConfigError;

/// Settings of `leasehold serve`; every flag has a `LEASEHOLD_*` variable.
/// One group per component; `display_order` keeps `--help` in the order it
/// has always had.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Listeners, connections, HTTPS.
    #[command(flatten)]
    pub http: HttpArgs,
    /// The store: Redis or embedded.
    #[command(flatten)]
    pub store: StoreArgs,
    /// TTL, waits, watches, admission.
    #[command(flatten)]
    pub limits: LimitsArgs,
    /// API keys.
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Logs and metric labels.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

impl ServeArgs {
    /// The settings from the environment alone (what `leasehold` with no subcommand uses).
    pub fn from_env() -> Result<Self, clap::Error> {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            args: ServeArgs,
        }
        Only::try_parse_from(["leasehold"]).map(|o| o.args)
    }

    /// Checks every setting, naming the one that is wrong: the only way to
    /// a [`ValidConfig`], which is what the service starts from.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        self.store.validate()?;
        self.limits.validate()?;
        self.http.validate()?;
        Ok(ValidConfig(self))
    }
}

/// Settings that passed [`ServeArgs::validate`]; read them through `Deref`.
#[derive(Debug, Clone)]
pub struct ValidConfig(ServeArgs);

impl Deref for ValidConfig {
    type Target = ServeArgs;

    fn deref(&self) -> &ServeArgs {
        &self.0
    }
}
