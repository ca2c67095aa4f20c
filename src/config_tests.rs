//! Unit tests of the settings: parsing, validation, topology checks.
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
    assert!(both.validate().is_ok());
    assert!(both.tls_files().is_some());
    assert!(parse(&[]).tls_files().is_none());
}
