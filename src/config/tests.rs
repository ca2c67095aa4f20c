//! Unit tests of the settings: parsing, validation, topology checks, and
//! the operator-facing surface (help text, documented variables).
use clap::Parser;

use super::*;

fn parse(extra: &[&str]) -> ServeArgs {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        args: ServeArgs,
    }
    let argv = std::iter::once("leasehold").chain(extra.iter().copied());
    Only::try_parse_from(argv).expect("parses").args
}

#[test]
fn connection_bounds_are_validated_naming_the_setting() {
    assert!(parse(&[]).validate().is_ok());
    for (flag, value, setting) in [
        ("--max-connections", "0", "LEASEHOLD_MAX_CONNECTIONS"),
        ("--max-connections", "1000001", "LEASEHOLD_MAX_CONNECTIONS"),
        ("--idle-timeout-ms", "0", "LEASEHOLD_IDLE_TIMEOUT_MS"),
        ("--idle-timeout-ms", "3600001", "LEASEHOLD_IDLE_TIMEOUT_MS"),
    ] {
        let err = parse(&[flag, value]).validate().expect_err(value);
        assert_eq!(err.setting, setting, "{flag} {value}");
    }
    assert!(parse(&["--max-connections", "1", "--idle-timeout-ms", "1"])
        .validate()
        .is_ok());
}

#[test]
fn tls_files_come_in_pairs_naming_the_missing_setting() {
    for (extra, setting) in [
        (&["--tls-cert-file", "c.pem"][..], "LEASEHOLD_TLS_KEY_FILE"),
        (&["--tls-key-file", "k.pem"][..], "LEASEHOLD_TLS_CERT_FILE"),
        (
            &["--tls-client-ca-file", "ca.pem"][..],
            "LEASEHOLD_TLS_CLIENT_CA_FILE",
        ),
        (
            &["--tls-reload-interval-ms", "0"][..],
            "LEASEHOLD_TLS_RELOAD_INTERVAL_MS",
        ),
    ] {
        let err = parse(extra).validate().expect_err(setting);
        assert_eq!(err.setting, setting, "{extra:?}");
    }
    let both = parse(&["--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"]);
    assert!(both.http.tls.cert_and_key().is_some());
    assert!(both.validate().is_ok());
    assert!(parse(&[]).http.tls.cert_and_key().is_none());
}

/// `leasehold <subcommand> --help` (`long`) or `-h` as the binary prints it, with any
/// `LEASEHOLD_*` value the test's environment happens to hold blanked.
fn help_of(subcommand: &str, long: bool) -> String {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    cli.build();
    let command = cli.find_subcommand_mut(subcommand).expect("subcommand");
    let text = if long {
        command.render_long_help()
    } else {
        command.render_help()
    }
    .to_string();
    text.lines()
        .map(|line| match line.trim_start().strip_prefix("[env: ") {
            Some(rest) if rest.contains('=') => {
                let name = rest.split('=').next().unwrap_or("");
                format!(
                    "{}[env: {name}=]",
                    &line[..line.len() - line.trim_start().len()]
                )
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_help_text_is_unchanged() {
    // Every flag, variable, default and description, in order: a change
    // here is a change operators see (and docs/configuration.md lists).
    assert_eq!(
        help_of("serve", true).trim_end(),
        include_str!("serve_help.txt").trim_end()
    );
    assert_eq!(
        help_of("serve", false).trim_end(),
        include_str!("serve_help_short.txt").trim_end()
    );
    assert_eq!(
        help_of("healthcheck", false).trim_end(),
        include_str!("healthcheck_help.txt").trim_end()
    );
}

/// Every `LEASEHOLD_*` variable `leasehold serve` reads, hidden ones included.
fn serve_env_names() -> std::collections::BTreeSet<String> {
    use clap::CommandFactory;
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").expect("serve");
    serve
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_documented_variable_is_read_and_every_variable_documented() {
    let read = serve_env_names();
    let docs = [
        include_str!("../../docs/configuration.md"),
        include_str!("../../docs/topologies.md"),
    ];
    let mut documented = std::collections::BTreeSet::new();
    for text in docs {
        for (at, _) in text.match_indices("LEASEHOLD_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            documented.insert(name);
        }
    }
    let unread: Vec<_> = documented.difference(&read).collect();
    assert!(unread.is_empty(), "documented but not read: {unread:?}");
    // The one internal (hidden) setting is for tests only.
    let undocumented: Vec<_> = read
        .difference(&documented)
        .filter(|n| *n != "LEASEHOLD_SSE_KEEPALIVE_MS")
        .collect();
    assert!(
        undocumented.is_empty(),
        "read but not documented: {undocumented:?}"
    );
    assert_eq!(read.len(), 43, "{read:?}");
}
