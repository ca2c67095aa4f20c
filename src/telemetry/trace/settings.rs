//! The exporter's settings, read from the standard OpenTelemetry variables:
//!
//! | variable | use |
//! | --- | --- |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the full URL spans are POSTed to |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | base URL; spans go to `{it}/v1/traces` |
//! | `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, `OTEL_EXPORTER_OTLP_HEADERS` | `k=v,k2=v2` (values percent-decoded), sent with every export |
//! | `OTEL_SERVICE_NAME` | the `service.name` resource attribute (default `leasehold`) |
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | no traces even with an endpoint |
//!
//! Neither endpoint set: no exporter, no task, no span. Only `http://`
//! endpoints: this exporter speaks OTLP/HTTP with the JSON encoding and has
//! no TLS client; an `https://` endpoint is refused at startup rather than
//! silently sent in clear.

/// Where and how spans are exported.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// `host` (a name or an address; IPv6 without brackets).
    pub host: String,
    /// TCP port (80 when the URL names none).
    pub port: u16,
    /// Request target: `/v1/traces` or the traces endpoint's own path.
    pub path: String,
    /// The `Host` header's value.
    pub authority: String,
    /// Extra headers for the collector (often credentials: never logged).
    pub headers: Vec<(String, String)>,
    /// `service.name`.
    pub service_name: String,
}

impl std::fmt::Debug for Settings {
    /// Without the headers' values: they are often credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("authority", &self.authority)
            .field("path", &self.path)
            .field("headers", &self.headers.len())
            .field("service_name", &self.service_name)
            .finish()
    }
}

/// A variable whose value cannot be used; startup stops naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The variable.
    pub variable: &'static str,
    /// What is wrong (never the value: headers may hold credentials).
    pub problem: String,
}

impl Settings {
    /// The settings from the process environment; `Ok(None)` when traces
    /// are off (no endpoint, or disabled).
    pub fn from_env() -> Result<Option<Settings>, SettingError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings from `lookup` (a variable's value, if set).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, SettingError> {
        let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none")
        {
            return Ok(None);
        }
        let (variable, url, append) = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url, false),
            (None, Some(url)) => ("OTEL_EXPORTER_OTLP_ENDPOINT", url, true),
            (None, None) => return Ok(None),
        };
        let fail = |variable: &'static str, problem: &str| SettingError {
            variable,
            problem: problem.to_owned(),
        };
        let url = url.trim();
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(fail(
                variable,
                "is https://, which this exporter does not speak (OTLP/HTTP JSON over plain \
                 http only); point it at a local collector or sidecar over http://",
            ));
        } else {
            return Err(fail(variable, "must be an http:// URL"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = split_authority(authority)
            .ok_or_else(|| fail(variable, "names no valid host[:port]"))?;
        let path = if append {
            format!("{}/v1/traces", path.trim_end_matches('/'))
        } else if path.is_empty() {
            "/".to_owned()
        } else {
            path.to_owned()
        };
        let headers = match set("OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
            Some(text) => parse_headers(&text)
                .ok_or_else(|| fail("OTEL_EXPORTER_OTLP_TRACES_HEADERS", HEADERS_FORMAT))?,
            None => match set("OTEL_EXPORTER_OTLP_HEADERS") {
                Some(text) => parse_headers(&text)
                    .ok_or_else(|| fail("OTEL_EXPORTER_OTLP_HEADERS", HEADERS_FORMAT))?,
                None => Vec::new(),
            },
        };
        Ok(Some(Settings {
            host,
            port,
            path,
            authority: authority.to_owned(),
            headers,
            service_name: set("OTEL_SERVICE_NAME")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|| "leasehold".to_owned()),
        }))
    }
}

const HEADERS_FORMAT: &str =
    "must be comma-separated key=value pairs (values percent-encoded), each a valid HTTP header";

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_authority(authority: &str) -> Option<(String, u16)> {
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let port = match &rest[end + 1..] {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (&rest[..end], port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0)?,
        None => 80,
    };
    Some((host.to_owned(), port))
}

/// `k=v,k2=v2` as the OTLP exporter spec writes it, values percent-decoded.
fn parse_headers(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (key, value) = pair.split_once('=')?;
        let key = key.trim().to_ascii_lowercase();
        let value = percent_decode(value.trim())?;
        axum::http::HeaderName::from_bytes(key.as_bytes()).ok()?;
        axum::http::HeaderValue::from_str(&value).ok()?;
        out.push((key, value));
    }
    Some(out)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<Settings>, SettingError> {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn no_endpoint_means_no_traces() {
        assert_eq!(from(&[]), Ok(None));
        assert_eq!(from(&[("OTEL_SERVICE_NAME", "x")]), Ok(None));
        let disabled = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(from(&disabled), Ok(None));
    }

    #[test]
    fn the_base_endpoint_gets_v1_traces_and_the_traces_one_is_taken_whole() {
        let s = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")])
            .expect("valid")
            .expect("on");
        assert_eq!(
            (s.host.as_str(), s.port, s.path.as_str()),
            ("collector", 4318, "/v1/traces")
        );
        assert_eq!(s.service_name, "leasehold");
        let s = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:1"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://[::1]/custom/path",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20abc, x-tenant=a",
            ),
            ("OTEL_SERVICE_NAME", "locks-eu"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(
            (s.host.as_str(), s.port, s.path.as_str()),
            ("::1", 80, "/custom/path")
        );
        assert_eq!(s.authority, "[::1]");
        assert_eq!(
            s.headers[0],
            ("authorization".to_owned(), "Bearer abc".to_owned())
        );
        assert_eq!(s.headers[1], ("x-tenant".to_owned(), "a".to_owned()));
        assert_eq!(s.service_name, "locks-eu");
        assert!(
            !format!("{s:?}").contains("abc"),
            "Debug shows no header value"
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:port"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://:80/v1/traces"),
        ] {
            assert_eq!(
                from(&[(var, value)]).map(|_| ()).map_err(|e| e.variable),
                Err(var)
            );
        }
        let bad_headers = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"),
        ];
        assert_eq!(
            from(&bad_headers).map(|_| ()).map_err(|e| e.variable),
            Err("OTEL_EXPORTER_OTLP_HEADERS")
        );
    }
}
