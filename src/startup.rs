//! Startup: validated settings turned into a running service, each
//! component built from its own settings group. [`run`] takes an
//! already-bound listener and a shutdown future (tests start many instances
//! on port 0 in one process); [`build_store`] picks and connects the store;
//! [`shutdown_signal`] is SIGTERM or Ctrl-C.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::{
    AuthArgs, ConfigError, HttpArgs, LimitsArgs, StoreArgs, TelemetryArgs, TlsArgs, ValidConfig,
};
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

/// Builds the store the store settings ask for.
pub fn build_store(args: &StoreArgs, waiters: Arc<WaitRegistry>) -> Result<Store, ConfigError> {
    let nodes = args.cluster_nodes();
    let sentinels = args.sentinels();
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
                args.history_bound(),
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
            ca_file: args.tls.redis_ca_file.clone(),
            client_cert: args.tls.redis_client_cert.clone(),
            client_key: args.tls.redis_client_key.clone(),
        },
        replica_acks: (args.redis_min_replicas > 0).then(|| ReplicaAcks {
            min_replicas: args.redis_min_replicas,
            timeout: Duration::from_millis(args.redis_replica_timeout_ms),
        }),
        namespace: args.namespace.clone(),
        command_timeout: args.command_timeout(),
        pool_size: args.pool_size,
        history: args.history_bound(),
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
    config: ValidConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let metrics_listener = match config.http.metrics_listen {
        Some(addr) => Some(TcpListener::bind(addr).await?),
        None => None,
    };
    run_with(listener, metrics_listener, config, shutdown).await
}

/// Like [`run`], with an already-bound metrics listener (`None`: `/metrics`
/// on the API listener).
pub async fn run_with(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    config: ValidConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    run_observed(listener, metrics_listener, config, |_| {}, shutdown).await
}

/// Like [`run_with`], handing `observe` the store once it is built (the
/// tests read what the embedded store keeps through it: issue 39).
pub async fn run_observed(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    config: ValidConfig,
    observe: impl FnOnce(&Store),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    // First: metric handles created from here on (and cached) are live ones.
    let metrics = telemetry::install_metrics();
    let api_keys = read_api_keys(&config.auth)?;
    // HTTPS: every file read and checked now, so a bad one stops the start
    // naming its setting; from here on a bad replacement only logs a warning.
    let tls = server_tls_files(&config.http.tls)
        .map(|files| http::tls::ServerTls::load(&files))
        .transpose()?;
    // Traces (feature `otel`): an exporter task only when an endpoint is set.
    #[cfg(feature = "otel")]
    let exporter = telemetry::trace::Settings::from_env()
        .map_err(|e| ConfigError::new(e.variable, e.problem))?
        .map(telemetry::trace::Exporter::start);
    let token = CancellationToken::new();
    let waiters = Arc::new(WaitRegistry::new(config.limits.max_waiters));
    let store = build_store(&config.store, Arc::clone(&waiters))?;
    observe(&store);
    store.start_background(token.clone());
    // The roster of instances (GET /instances): beats until shutdown, then
    // leaves it; awaited below, bounded.
    let roster = store.start_roster(token.clone());
    let leave_within = config.store.command_timeout() + Duration::from_millis(500);
    let service = LeaseService::new(
        store,
        service_settings(&config.limits, &config.telemetry, &api_keys),
        waiters,
        token.clone(),
    );
    let app = Arc::new(http::App {
        service,
        body_limit: config.http.body_limit_bytes,
        metrics,
        api_keys,
        request_timeout: Duration::from_millis(config.limits.max_wait_ms)
            + 3 * config.store.command_timeout()
            + Duration::from_secs(1),
        http_meters: telemetry::Handles::new(),
        watch: http::watch::WatchSettings {
            max_watchers: config.limits.max_watchers,
            keepalive: Duration::from_millis(config.limits.sse_keepalive_ms),
        },
        #[cfg(feature = "otel")]
        tracer: exporter.as_ref().map(|e| Arc::clone(e.tracer())),
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
            Duration::from_millis(config.http.tls.tls_reload_interval_ms),
            token.clone(),
        );
        tls.acceptor
    });
    let router = http::service(
        Arc::clone(&app),
        metrics_listener.is_none(),
        config.http.http_fast_paths,
    );
    let limits = server_limits(&config.http);
    // Awaited at shutdown with the API's server, so `run` returns with
    // neither listener bound.
    let mut metrics_server = metrics_listener.map(|listener| {
        let metrics = http::metrics_router(Arc::clone(&app));
        let stop = token.clone();
        let tls = acceptor.clone();
        tokio::spawn(async move {
            http::server::serve(listener, metrics, limits, tls, async move {
                stop.cancelled().await;
            })
            .await;
        })
    });
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
    let grace = Duration::from_millis(config.http.shutdown_grace_ms);
    tokio::select! {
        () = async {
            let result = (&mut server).await;
            token.cancel();
            let metrics_result = match metrics_server.as_mut() {
                Some(metrics) => metrics.await,
                None => Ok(()),
            };
            for e in [result.err(), metrics_result.err()].into_iter().flatten() {
                tracing::error!(error = %e, "server task failed");
            }
        } => {}
        _ = async { token.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_ms = config.http.shutdown_grace_ms, "grace period over; dropping remaining connections");
            server.abort();
            if let Some(metrics) = &metrics_server {
                metrics.abort();
            }
        }
    }
    roster.stopped(leave_within).await;
    // The spans of the last requests, exported before the process exits.
    #[cfg(feature = "otel")]
    if let Some(exporter) = exporter {
        exporter.shutdown().await;
    }
    Ok(())
}

/// The API keys the auth settings name (none: an open API, with a loud
/// warning, unless keys are required).
fn read_api_keys(auth: &AuthArgs) -> Result<ApiKeys, ConfigError> {
    let api_keys = match &auth.api_keys_file {
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
        if auth.api_keys_required {
            return Err(ConfigError::new(
                "LEASEHOLD_API_KEYS_REQUIRED",
                "is true but no LEASEHOLD_API_KEYS_FILE is set".to_owned(),
            ));
        }
        tracing::warn!(
            "NO API KEYS: the API is open to anyone who can reach it (every purpose, every \
             verb, /metrics). Set LEASEHOLD_API_KEYS_FILE, and LEASEHOLD_API_KEYS_REQUIRED=true \
             to refuse to start without it."
        );
    }
    Ok(api_keys)
}

/// The HTTPS files, when HTTPS is on.
fn server_tls_files(tls: &TlsArgs) -> Option<http::tls::TlsFiles> {
    tls.cert_and_key().map(|(cert, key)| http::tls::TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: tls.tls_client_ca_file.clone(),
    })
}

/// The lease service's settings: the limits group, metric labels from the
/// telemetry group, and the purposes the API keys name.
fn service_settings(
    limits: &LimitsArgs,
    telemetry: &TelemetryArgs,
    api_keys: &ApiKeys,
) -> ServiceSettings {
    ServiceSettings {
        bounds: Bounds::new(
            limits.drift_budget_ms,
            limits.max_ttl_ms,
            limits.max_wait_ms,
        ),
        retry_after_ms: limits.retry_after_ms,
        unavailable_retry_after_ms: 1000,
        max_in_flight: limits.max_in_flight,
        max_purpose_labels: telemetry.max_purpose_labels,
        labelled_purposes: api_keys.named_purposes(),
        release_abandoned: limits.release_abandoned,
        session_max_leases: limits.session_max_leases.max(1),
    }
}

/// Each listener's connection limits.
fn server_limits(http: &HttpArgs) -> http::server::Limits {
    http::server::Limits {
        max_connections: http.max_connections,
        idle_timeout: Duration::from_millis(http.idle_timeout_ms),
        fast_paths: http.http_fast_paths,
    }
}

/// Resolves on SIGTERM or Ctrl-C. The handlers are installed when this is
/// *called* (inside the runtime), not when the future is first polled: a
/// SIGTERM that comes right after the service logged that it listens must
/// start the graceful shutdown, not kill the process by the default action.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (mut term, mut int) = handlers;
            let term = async {
                match term.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let int = async {
                match int.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = term => {},
                _ = int => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
