//! What every phase and scenario of one run shares: the instances'
//! addresses and pids, the raw side's scripts and connections, and an admin
//! connection to Redis.

use std::net::SocketAddr;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;

use crate::opts::Opts;
use crate::procs::{clock_ticks_per_second, Pids, RedisProc, Service};
use crate::raw::{redis_conns, Raw};
use crate::scenario::Side;

/// The run's instances and connections.
pub(crate) struct Env {
    pub(crate) addr: SocketAddr,
    pub(crate) raw: Arc<Raw>,
    pub(crate) raw_conns: Vec<MultiplexedConnection>,
    pub(crate) admin: MultiplexedConnection,
    pub(crate) pids: Pids,
    /// `LOAD_BASELINE_BIN`'s instance: its address and pid.
    pub(crate) baseline: Option<(SocketAddr, String)>,
    pub(crate) redis_url: String,
}

impl Env {
    /// Connects to the run's Redis (an admin connection, loading the
    /// scripts, and the raw side's `--raw-conns` connections) and notes the
    /// instances' addresses and pids.
    pub(crate) async fn connect(
        opts: &Opts,
        redis: &RedisProc,
        service: &Service,
        baseline: Option<&Service>,
    ) -> Result<Self, String> {
        let mut admin = redis_conns(&redis.url(), 1).await?.remove(0);
        let raw = Arc::new(Raw::load(&mut admin).await?);
        Ok(Self {
            addr: service.addr,
            raw,
            raw_conns: redis_conns(&redis.url(), opts.raw_conns).await?,
            admin,
            pids: Pids {
                leasehold: service.pid().to_string(),
                redis: redis.pid().to_string(),
                ticks: clock_ticks_per_second(),
            },
            baseline: baseline.map(|b| (b.addr, b.pid().to_string())),
            redis_url: redis.url(),
        })
    }

    /// The address a side's HTTP clients use and the pids whose CPU it
    /// costs (`leasehold` = the instance that side measures).
    pub(crate) fn side(&self, side: Side) -> Result<(SocketAddr, Pids), String> {
        match side {
            Side::Raw | Side::Service => Ok((self.addr, self.pids.clone())),
            Side::Baseline => {
                let (addr, pid) = self
                    .baseline
                    .as_ref()
                    .ok_or("a baseline phase needs LOAD_BASELINE_BIN")?;
                let mut pids = self.pids.clone();
                pids.leasehold.clone_from(pid);
                Ok((*addr, pids))
            }
        }
    }
}
