//! A clap error about a value that came from a `LEASEHOLD_*` variable, told
//! in the variable's name.

/// A clap error about a value that came from a `LEASEHOLD_*` variable rather
/// than the command line, told in the variable's name (clap names the flag,
/// which the operator never typed). `None`: not such an error.
pub fn env_value_error(err: &clap::Error, command: &clap::Command) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        err.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--max-ttl-ms <MS>"
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let flag = format!("--{long}");
    if std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}="))) {
        return None;
    }
    fn env_of(command: &clap::Command, long: &str) -> Option<String> {
        command
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_env())
            .and_then(|v| v.to_str())
            .map(str::to_owned)
            .or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
    }
    let var = env_of(command, long)?;
    let value = std::env::var(&var).ok()?;
    // clap's first line: "error: invalid value 'abc' for '--x <X>': <why>".
    let rendered = err.to_string();
    let first = rendered.lines().next().unwrap_or("");
    let why = first
        .split_once(&format!("'{arg}': "))
        .map_or("not a valid value", |(_, why)| why);
    Some(format!(
        "error: {var}={value:?} is not a valid value: {why} (the environment variable behind {flag})"
    ))
}
