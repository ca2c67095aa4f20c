//! The bound checks every settings group shares, each error naming the
//! variable the operator set.

use crate::domain::ConfigError;

/// The first of `settings` (variable, value) that is 0: "must be greater than 0".
pub(super) fn positive(settings: &[(&'static str, u64)]) -> Result<(), ConfigError> {
    match settings.iter().find(|(_, value)| *value == 0) {
        Some((name, _)) => Err(ConfigError::new(name, "must be greater than 0")),
        None => Ok(()),
    }
}

/// The first of `settings` (variable, value, largest allowed, note after the
/// bound) over its bound: "must be at most {max}{note}".
pub(super) fn at_most(settings: &[(&'static str, u64, u64, &str)]) -> Result<(), ConfigError> {
    for &(name, value, max, note) in settings {
        if value > max {
            return Err(ConfigError::new(
                name,
                format!("must be at most {max}{note}"),
            ));
        }
    }
    Ok(())
}
