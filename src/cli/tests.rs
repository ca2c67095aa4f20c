//! Unit tests of the client subcommands' shared parsing (durations, resources).
use super::*;
use std::time::Duration;

use super::common::resource;

#[test]
fn durations_parse_with_units() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    for bad in [
        "",
        "30",
        "s",
        "-1s",
        "1.5s",
        "3 s",
        "10d",
        "99999999999999999999h",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn a_bad_purpose_is_a_usage_error() {
    let exit = resource("Not A Purpose", "x").expect_err("rejected");
    assert_eq!(exit.code, EXIT_USAGE);
    assert!(resource("invoice-export", "customer-42").is_ok());
}
