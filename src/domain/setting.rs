//! [`ConfigError`]: a setting that is wrong, named by the variable an
//! operator sets; every layer that reads settings (TLS files, the store's
//! URLs, the API keys file) reports with it.

/// A setting that is wrong; the message names it and never quotes secrets.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {setting} {reason}")]
pub struct ConfigError {
    /// The variable.
    pub setting: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    /// A new error.
    pub fn new(setting: &'static str, reason: impl Into<String>) -> Self {
        Self {
            setting,
            reason: reason.into(),
        }
    }
}
