//! The API keys settings group (the file is read and checked at start, in
//! `startup.rs`).

use std::path::PathBuf;

use clap::Args;

/// Who may call the API.
#[derive(Debug, Clone, Args)]
pub struct AuthArgs {
    /// File of API keys, `<key> <purpose>[,<purpose>...]` or `<key> *` per line; unset: open API.
    #[arg(long, env = "LEASEHOLD_API_KEYS_FILE", display_order = 320)]
    pub api_keys_file: Option<PathBuf>,
    /// Refuse to start without API keys (no open API by accident).
    #[arg(long, env = "LEASEHOLD_API_KEYS_REQUIRED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL", display_order = 330)]
    pub api_keys_required: bool,
}
