//! How to reach a Redis node: one template (credentials, protocol, TLS
//! trust) turned into a [`Client`] for whichever `host:port` the topology
//! names: the configured URL, a cluster node from `CLUSTER SLOTS` or a
//! MOVED reply, the master a sentinel points at.

use std::path::Path;

use redis::{
    Client, ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
    TlsCertificates,
};

use super::settings::RedisSetupError;

/// TLS settings shared by every node of the topology.
#[derive(Clone)]
pub enum Tls {
    /// `redis://`.
    Plain,
    /// `rediss://`: trust `certs.root_cert` (else the system roots), present
    /// `certs.client_tls` when set.
    Verified(Option<TlsCertificates>),
}

/// Credentials, protocol and TLS for the nodes of one topology.
#[derive(Clone)]
pub struct NodeTemplate {
    redis: RedisConnectionInfo,
    tls: Tls,
}

impl NodeTemplate {
    /// A template with these connection settings.
    pub fn new(redis: RedisConnectionInfo, tls: Tls) -> Self {
        Self { redis, tls }
    }

    /// The template with RESP3 (the push channel flags dead connections).
    pub fn resp3(&self) -> Self {
        Self {
            redis: self.redis.clone().set_protocol(ProtocolVersion::RESP3),
            tls: self.tls.clone(),
        }
    }

    /// A client for `host:port`.
    pub fn client(&self, host: &str, port: u16) -> redis::RedisResult<Client> {
        let addr = match &self.tls {
            Tls::Plain => ConnectionAddr::Tcp(host.to_owned(), port),
            Tls::Verified(_) => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            },
        };
        let info = addr
            .into_connection_info()?
            .set_redis_settings(self.redis.clone());
        match &self.tls {
            Tls::Verified(Some(certs)) => Client::build_with_tls(info, certs.clone()),
            _ => Client::open(info),
        }
    }

    /// A client for `host:port` given as one string (`CLUSTER SLOTS`, MOVED).
    pub fn client_for(&self, addr: &str) -> redis::RedisResult<Client> {
        let (host, port) = split_addr(addr).ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad node address"))
        })?;
        self.client(host, port)
    }
}

/// `host:port` → (host, port); IPv6 hosts may come bracketed or bare.
pub fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// A parsed `redis://` / `rediss://` URL: where it points and its
/// connection settings (user, password, db). Never printed.
pub struct ParsedUrl {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// `rediss://`.
    pub tls: bool,
    /// User, password, db from the URL.
    pub redis: RedisConnectionInfo,
}

/// Parses a TCP Redis URL; `setting` names it in the error.
pub fn parse_url(url: &str, setting: &'static str) -> Result<ParsedUrl, RedisSetupError> {
    let info = url
        .trim()
        .into_connection_info()
        .map_err(|_| RedisSetupError::BadUrl { setting })?;
    let (host, port, tls) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => (host.clone(), *port, false),
        ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port, true),
        _ => return Err(RedisSetupError::BadUrl { setting }),
    };
    Ok(ParsedUrl {
        host,
        port,
        tls,
        redis: info.redis_settings().clone(),
    })
}

/// Reads the TLS files into redis-rs' form. `None` when no file is given
/// (the system trust store is used).
pub fn load_certificates(
    ca_file: Option<&Path>,
    client_cert: Option<&Path>,
    client_key: Option<&Path>,
) -> Result<Option<TlsCertificates>, RedisSetupError> {
    let read = |setting: &'static str, path: &Path| {
        std::fs::read(path).map_err(|e| RedisSetupError::File {
            setting,
            kind: e.kind(),
        })
    };
    let root_cert = ca_file
        .map(|p| read("LEASEHOLD_REDIS_CA_FILE", p))
        .transpose()?;
    let client_tls = match (client_cert, client_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("LEASEHOLD_REDIS_CLIENT_CERT", cert)?,
            client_key: read("LEASEHOLD_REDIS_CLIENT_KEY", key)?,
        }),
        _ => None,
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    let certs = TlsCertificates {
        client_tls,
        root_cert,
    };
    // Parse once now so a bad PEM is a start-up error, not a failing request.
    let probe = ConnectionAddr::TcpTls {
        host: "localhost".into(),
        port: 6379,
        insecure: false,
        tls_params: None,
    };
    Client::build_with_tls(probe, certs.clone()).map_err(|_| RedisSetupError::Pem {
        setting: if certs.client_tls.is_some() {
            "LEASEHOLD_REDIS_CA_FILE / LEASEHOLD_REDIS_CLIENT_CERT / LEASEHOLD_REDIS_CLIENT_KEY"
        } else {
            "LEASEHOLD_REDIS_CA_FILE"
        },
    })?;
    Ok(Some(certs))
}
