//! Startup: the settings turned into a running service. [`run`] takes an
//! already-bound listener and a shutdown future (tests start many instances
//! on port 0 in one process); [`build_store`] picks and connects the store;
//! [`shutdown_signal`] is SIGTERM or Ctrl-C.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigError, ServeArgs};
use crate::domain::Bounds;
use crate::http::auth::ApiKeys;
use crate::notify::WaitRegistry;
use crate::service::{LeaseService, ServiceSettings};
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisSettings, RedisStore, ReplicaAcks, TlsFiles, Topology};
use crate::store::Store;
use crate::{http, telemetry};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener failed.
    #[error("listener failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads the first line of a secret file. A file that does not exist means
/// "no secret" (Kubernetes mounts an optional Secret that way), with a warning;
/// any other read error is a configuration error.
fn read_secret_file(
    setting: &'static str,
    path: &std::path::Path,
) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            text.lines().next().unwrap_or("").trim_end().to_owned(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(
                setting,
                "secret file not found; connecting without a password"
            );
            Ok(None)
        }
        Err(e) => Err(ConfigError::new(
            setting,
            format!("cannot be read: {}", e.kind()),
        )),
    }
}

/// Builds the store the settings ask for.
pub fn build_store(args: &ServeArgs, waiters: Arc<WaitRegistry>) -> Result<Store, ConfigError> {
    let nodes = config::non_empty(&args.redis_cluster_nodes);
    let sentinels = config::non_empty(&args.redis_sentinels);
    let topology = match (&args.redis_url, nodes.is_empty(), sentinels.is_empty()) {
        (Some(url), _, _) => Topology::Standalone { url: url.clone() },
        (None, false, _) => Topology::Cluster {
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
        },
        (None, true, false) => Topology::Sentinel {
            sentinels: sentinels.iter().map(|s| s.to_string()).collect(),
            master: args.redis_sentinel_master.clone().unwrap_or_default(),
        },
        (None, true, true) => {
            return Ok(Store::Memory(Arc::new(MemoryStore::new(
                args.memory_max_leases,
                waiters,
            ))))
        }
    };
    let password = args
        .redis_password_file
        .as_deref()
        .map(|p| read_secret_file("LEASEHOLD_REDIS_PASSWORD_FILE", p))
        .transpose()?
        .flatten();
    let settings = RedisSettings {
        topology,
        username: args.redis_username.clone(),
        password,
        tls: TlsFiles {
            ca_file: args.redis_ca_file.clone(),
            client_cert: args.redis_client_cert.clone(),
            client_key: args.redis_client_key.clone(),
        },
        replica_acks: (args.redis_min_replicas > 0).then(|| ReplicaAcks {
            min_replicas: args.redis_min_replicas,
            timeout: Duration::from_millis(args.redis_replica_timeout_ms),
        }),
        namespace: args.namespace.clone(),
        command_timeout: args.command_timeout(),
        pool_size: args.pool_size,
    };
    let store = RedisStore::new(&settings, waiters)
        .map_err(|e| ConfigError::new(e.setting(), e.to_string()))?;
    Ok(Store::Redis(Arc::new(store)))
}

/// Serves the API on `listener` until `shutdown` completes, then stops
/// accepting, ends every wait (answered `contended`), lets in-flight
/// requests finish, and returns within the configured grace period.
pub async fn run(
    listener: TcpListener,
    args: ServeArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    args.validate()?;
    let metrics_listener = match args.metrics_listen {
        Some(addr) => Some(TcpListener::bind(addr).await?),
        None => None,
    };
    run_with(listener, metrics_listener, args, shutdown).await
}

/// Like [`run`], with an already-bound metrics listener (`None`: `/metrics`
/// on the API listener).
pub async fn run_with(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    args: ServeArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    args.validate()?;
    // First: metric handles created from here on (and cached) are live ones.
    let metrics = telemetry::install_metrics();
    let api_keys = match &args.api_keys_file {
        None => ApiKeys::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::new(
                    "LEASEHOLD_API_KEYS_FILE",
                    format!("cannot be read: {}", e.kind()),
                )
            })?;
            ApiKeys::parse(&text)
                .map_err(|e| ConfigError::new("LEASEHOLD_API_KEYS_FILE", e.to_string()))?
        }
    };
    if !api_keys.enabled() {
        if args.api_keys_required {
            return Err(ConfigError::new(
                "LEASEHOLD_API_KEYS_REQUIRED",
                "is true but no LEASEHOLD_API_KEYS_FILE is set".to_owned(),
            )
            .into());
        }
        tracing::warn!(
            "NO API KEYS: the API is open to anyone who can reach it (every purpose, every \
             verb, /metrics). Set LEASEHOLD_API_KEYS_FILE, and LEASEHOLD_API_KEYS_REQUIRED=true \
             to refuse to start without it."
        );
    }
    // HTTPS: every file read and checked now, so a bad one stops the start
    // naming its setting; from here on a bad replacement only logs a warning.
    let tls = args
        .tls_files()
        .map(|files| http::tls::ServerTls::load(&files))
        .transpose()?;
    let token = CancellationToken::new();
    let waiters = Arc::new(WaitRegistry::new(args.max_waiters));
    let store = build_store(&args, Arc::clone(&waiters))?;
    store.start_background(token.clone());
    let service = LeaseService::new(
        store,
        ServiceSettings {
            bounds: Bounds::new(args.drift_budget_ms, args.max_ttl_ms, args.max_wait_ms),
            retry_after_ms: args.retry_after_ms,
            unavailable_retry_after_ms: 1000,
            max_in_flight: args.max_in_flight,
            max_purpose_labels: args.max_purpose_labels,
            labelled_purposes: api_keys.named_purposes(),
            release_abandoned: args.release_abandoned,
        },
        waiters,
        token.clone(),
    );
    let app = Arc::new(http::App {
        service,
        body_limit: args.body_limit_bytes,
        metrics,
        api_keys,
        request_timeout: Duration::from_millis(args.max_wait_ms)
            + 3 * args.command_timeout()
            + Duration::from_secs(1),
        http_meters: telemetry::Handles::new(),
        watch: http::watch::WatchSettings {
            max_watchers: args.max_watchers,
            keepalive: Duration::from_millis(args.sse_keepalive_ms),
        },
    });
    // Histogram samples are buffered until a scrape or an upkeep drains them:
    // without a scraper they would grow memory by every request. Drain them
    // every few seconds whether or not anyone scrapes.
    {
        let handle = app.metrics.clone();
        let stop = token.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => handle.run_upkeep(),
                }
            }
        });
    }
    let acceptor = tls.map(|tls| {
        http::tls::spawn_reloader(
            tls.reloader,
            Duration::from_millis(args.tls_reload_interval_ms),
            token.clone(),
        );
        tls.acceptor
    });
    let router = http::service(Arc::clone(&app), metrics_listener.is_none());
    let limits = http::server::Limits {
        max_connections: args.max_connections,
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
    };
    if let Some(listener) = metrics_listener {
        let metrics = http::metrics_router(Arc::clone(&app));
        let stop = token.clone();
        let tls = acceptor.clone();
        tokio::spawn(async move {
            http::server::serve(listener, metrics, limits, tls, async move {
                stop.cancelled().await;
            })
            .await;
        });
    }
    tracing::info!(
        addr = %listener
            .local_addr()
            .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string()),
        tls = acceptor.is_some(),
        "leasehold listening"
    );
    let stop = token.clone();
    let server = http::server::serve(listener, router, limits, acceptor, async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections; ending waits");
        stop.cancel();
    });
    let mut server = tokio::spawn(server);
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    tokio::select! {
        result = &mut server => {
            token.cancel();
            if let Err(e) = result {
                tracing::error!(error = %e, "server task failed");
            }
        }
        _ = async { token.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_ms = args.shutdown_grace_ms, "grace period over; dropping remaining connections");
            server.abort();
        }
    }
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
