//! The benchmark's flags and their `LOAD_*` environment variables: the
//! usage text, parsing with defaults and bounds, and `--only`.

use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    pub(crate) concurrency: usize,
    pub(crate) rounds: usize,
    pub(crate) resources: usize,
    pub(crate) handoffs: usize,
    pub(crate) poll_handoffs: usize,
    pub(crate) raw_conns: usize,
    pub(crate) pool_size: usize,
    pub(crate) client_threads: usize,
    pub(crate) service_threads: usize,
    pub(crate) paced_rate: Option<f64>,
    pub(crate) scrape_every: Option<Duration>,
    pub(crate) only: Option<Vec<String>>,
    pub(crate) wrap: Option<String>,
    pub(crate) permits_limit: u32,
    pub(crate) permits_many: usize,
    pub(crate) fair_waiters: usize,
    pub(crate) watchers: usize,
    pub(crate) watch_changes: usize,
    pub(crate) list_leases: usize,
    pub(crate) list_page: usize,
    pub(crate) cost_cycles: u64,
    pub(crate) cost_leases: u64,
}

pub(crate) const USAGE: &str = "\
usage: cargo bench --bench load -- [flags]   (each flag also as an env var)
  --duration SECS        measured seconds per phase          LOAD_DURATION      (5)
  --warmup SECS          unmeasured seconds before each phase LOAD_WARMUP        (1)
  --concurrency N        concurrent clients C                 LOAD_CONCURRENCY   (64)
  --rounds N             raw/service alternations             LOAD_ROUNDS        (3)
  --resources N          resources in the contended mix       LOAD_RESOURCES     (4)
  --handoffs N           hand-offs to a server-side waiter    LOAD_HANDOFFS      (1000)
  --poll-handoffs N      hand-offs to a 50 ms polling client  LOAD_POLL_HANDOFFS (100)
  --raw-conns N          multiplexed Redis connections shared by the C raw clients
                                                              LOAD_RAW_CONNS     (2)
  --pool-size N          LEASEHOLD_POOL_SIZE of the service   LOAD_POOL_SIZE     (C)
  --client-threads N     tokio workers of the load generator  LOAD_CLIENT_THREADS (2)
  --service-threads N    LEASEHOLD_WORKER_THREADS of the service LOAD_SERVICE_THREADS
                         (half the cores, at least 1)
  --paced-rate OPS       offered rate of the paced phase      LOAD_PACED_RATE
                         (default: a quarter of the first round's service acquire ops/s)
  --scrape-every SECS    GET /metrics this often, as Prometheus would LOAD_SCRAPE_EVERY (0: never)
  --only LIST            comma list of acquire,cycle,contended,paced,handoff,
                         permits,permits-many,fair,watch,list,anchor,redis-cost,
                         session-renew,keepalive-streams
                         (anchor and watch start an etcd: apt-get install etcd-server;
                         redis-cost runs Redis under callgrind: apt-get install valgrind)
                                                              LOAD_ONLY          (all)
  --permits-limit N      limit of the permits scenario (against limit 1)
                                                              LOAD_PERMITS_LIMIT (16)
  --permits-many N       holders of the permits-many scenario (against 100)
                                                              LOAD_PERMITS_MANY  (10000)
  --fair-waiters N       contenders of the fair scenario, split over two instances
                                                              LOAD_FAIR_WAITERS  (8)
  --watchers N           streams of the watch scenario, leasehold's SSE and etcd's
                         v3 watches alike                     LOAD_WATCHERS      (10000)
  --watch-changes N      releases timed to the last watcher   LOAD_WATCH_CHANGES (50)
  --list-leases N        leases held for the list scenario    LOAD_LIST_LEASES   (100000)
  --list-page N          limit per listing page               LOAD_LIST_PAGE     (100)
  --cost-cycles N        cycles per callgrind figure of redis-cost LOAD_COST_CYCLES (300)
  --cost-leases N        leases held, then released, for redis-cost's memory
                                                              LOAD_COST_LEASES   (10000)
  LOAD_WRAP='valgrind --tool=callgrind ...'  prefix the leasehold command (profiling)
  LOAD_LEASEHOLD_BIN=path  run that leasehold binary instead of this build's
  LOAD_BASELINE_BIN=path   also run that binary (e.g. the previous release) in the
                         acquire, contended, paced and fair scenarios, phases alternating";

impl Opts {
    pub(crate) fn parse() -> Result<Self, String> {
        let mut flags: BTreeMap<String, String> = BTreeMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                // cargo bench passes --bench to harness = false targets.
                "--bench" => {}
                "-h" | "--help" => return Err(USAGE.to_owned()),
                flag if flag.starts_with("--") => {
                    let (name, value) = match flag.split_once('=') {
                        Some((n, v)) => (n.to_owned(), v.to_owned()),
                        None => (
                            flag.to_owned(),
                            args.next()
                                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?,
                        ),
                    };
                    flags.insert(name.trim_start_matches("--").to_owned(), value);
                }
                // A bare word is cargo's bench name filter: ignore it.
                _ => {}
            }
        }
        let get = |name: &str| -> Option<String> {
            flags.get(name).cloned().or_else(|| {
                std::env::var(format!("LOAD_{}", name.replace('-', "_").to_uppercase())).ok()
            })
        };
        fn num<T: std::str::FromStr>(
            name: &str,
            v: Option<String>,
            default: T,
        ) -> Result<T, String> {
            match v {
                None => Ok(default),
                Some(s) => s
                    .parse()
                    .map_err(|_| format!("--{name}: not a number: {s}\n{USAGE}")),
            }
        }
        let secs = |name: &str, default: f64| -> Result<Duration, String> {
            let v: f64 = num(name, get(name), default)?;
            if !(0.0..=3600.0).contains(&v) {
                return Err(format!("--{name} must be within 0..=3600"));
            }
            Ok(Duration::from_secs_f64(v))
        };
        let concurrency: usize = num("concurrency", get("concurrency"), 64)?;
        if !(1..=4096).contains(&concurrency) {
            return Err("--concurrency must be within 1..=4096".into());
        }
        let opts = Self {
            duration: secs("duration", 5.0)?,
            warmup: secs("warmup", 1.0)?,
            concurrency,
            rounds: num("rounds", get("rounds"), 3usize)?.max(1),
            resources: num("resources", get("resources"), 4usize)?.max(1),
            handoffs: num("handoffs", get("handoffs"), 1000)?,
            poll_handoffs: num("poll-handoffs", get("poll-handoffs"), 100)?,
            raw_conns: num("raw-conns", get("raw-conns"), 2usize)?.clamp(1, concurrency),
            pool_size: num("pool-size", get("pool-size"), concurrency)?.clamp(1, 1024),
            client_threads: num("client-threads", get("client-threads"), 2usize)?.max(1),
            // Half the cores, at least one: the other half is for Redis and
            // the load generator (on 2 cores: 1, what the k8s manifests' CPU
            // limit of 1 gives the service too).
            service_threads: num(
                "service-threads",
                get("service-threads"),
                (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1),
            )?
            .clamp(1, 256),
            paced_rate: get("paced-rate")
                .map(|v| num("paced-rate", Some(v), 0.0))
                .transpose()?,
            scrape_every: Some(secs("scrape-every", 0.0)?).filter(|d| !d.is_zero()),
            only: get("only").map(|s| s.split(',').map(|p| p.trim().to_owned()).collect()),
            wrap: std::env::var("LOAD_WRAP")
                .ok()
                .filter(|s| !s.trim().is_empty()),
            permits_limit: num("permits-limit", get("permits-limit"), 16u32)?.clamp(1, 10_000),
            permits_many: num("permits-many", get("permits-many"), 10_000usize)?.clamp(100, 10_000),
            fair_waiters: num("fair-waiters", get("fair-waiters"), 8usize)?.clamp(2, 1024),
            watchers: num("watchers", get("watchers"), 10_000usize)?.max(1),
            watch_changes: num("watch-changes", get("watch-changes"), 50usize)?.max(1),
            list_leases: num("list-leases", get("list-leases"), 100_000usize)?.max(1),
            list_page: num("list-page", get("list-page"), 100usize)?.clamp(1, 1000),
            cost_cycles: num("cost-cycles", get("cost-cycles"), 300u64)?.clamp(1, 100_000),
            cost_leases: num("cost-leases", get("cost-leases"), 10_000u64)?.clamp(1, 1_000_000),
        };
        if opts.duration.is_zero() {
            return Err("--duration must be greater than 0".into());
        }
        Ok(opts)
    }

    pub(crate) fn wants(&self, part: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|list| list.iter().any(|p| p == part))
    }
}
