//! The telemetry settings group: log format and metric labels (the metrics
//! listener is in the HTTP group).

use clap::Args;

use crate::telemetry::LogFormat;

/// What the logs and metrics look like.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Distinct purposes shown as metric labels; the rest are `other`.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_PURPOSE_LABELS",
        default_value_t = 50,
        display_order = 300
    )]
    pub max_purpose_labels: usize,
    /// Log format.
    #[arg(
        long,
        env = "LEASEHOLD_LOG_FORMAT",
        value_enum,
        default_value = "text",
        display_order = 340
    )]
    pub log_format: LogFormat,
}
