//! The watchers of `watch`'s fan-out, read by a separate process (issue
//! 25): the bench binary started again with [`FLAG`], so reading 10 000
//! sockets does not compete with the driver's own threads, and the figure
//! is the service's fan-out rather than the load generator's.
//!
//! The driver ([`Reader`]) talks to it over its stdin and stdout, one line
//! each way: `open <n>` (answer `ready <ready> <failed>` once every stream has
//! its first `state` event), `arm <kind>` (answer `armed`: from now on the
//! event named `KINDS[kind]` is timed), `wait <n>` (answer `seen <first>
//! <last>`, the wall-clock ns of the first and the last watcher's event,
//! once `n` watchers saw it, or `error <text>`). Wall clock, because the two
//! processes share no `Instant`; both read the same system clock.

use std::net::SocketAddr;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::sse::{open_watchers, shared, wait_ready, Target};

/// The first argument that makes the bench binary a reader.
pub(crate) const FLAG: &str = "--watch-reader";

/// How long the driver waits for an answer to `open` (10 000 streams) or
/// `wait` (one change to every watcher).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(180);

fn unix_ns(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The reader process: `<bench> --watch-reader <addr> leasehold <path>`
/// or `<bench> --watch-reader <addr> etcd <key>`.
pub(crate) fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let (Some(addr), Some(target)) = (
        args.first().and_then(|a| a.parse::<SocketAddr>().ok()),
        match (args.get(1), args.get(2)) {
            (Some(kind), Some(what)) => Target::from_args(kind, what),
            _ => None,
        },
    ) else {
        eprintln!("usage: load {FLAG} ADDR leasehold|etcd PATH|KEY");
        return ExitCode::from(2);
    };
    // One thread: the service has one too, and the driver is idle while
    // the watchers are read.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("watch reader: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(addr, target)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("watch reader: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(addr: SocketAddr, target: Target) -> Result<(), String> {
    let shared = shared();
    // The Instant the watchers count from, on the wall clock.
    let base_wall = SystemTime::now() - shared.base.elapsed();
    let wall = |t: Instant| unix_ns(base_wall + t.duration_since(shared.base));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    let mut tasks = Vec::new();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let mut words = line.split_whitespace();
        let answer = match (words.next(), words.next().and_then(|w| w.parse().ok())) {
            (Some("open"), Some(n)) => {
                tasks = open_watchers(addr, &target, n, &shared);
                match wait_ready(&shared, n).await {
                    Ok(()) => format!(
                        "ready {} {}",
                        shared.ready.load(std::sync::atomic::Ordering::SeqCst),
                        shared.failed.load(std::sync::atomic::Ordering::SeqCst)
                    ),
                    Err(e) => format!("error {e}"),
                }
            }
            (Some("arm"), Some(kind)) => {
                shared.arm(kind);
                "armed".to_owned()
            }
            (Some("wait"), Some(n)) => match shared.wait_all(n).await {
                Ok((first, last)) => format!("seen {} {}", wall(first), wall(last)),
                Err(e) => format!("error {e}"),
            },
            _ => break,
        };
        out.write_all(format!("{answer}\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        out.flush().await.map_err(|e| e.to_string())?;
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// The bench binary started again with `args` (a reader, the raw SSE
/// server), driven one line each way over its stdin and stdout; killed
/// when dropped. `name` names it in errors.
pub(crate) struct Helper {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Helper {
    pub(crate) fn start(name: &'static str, args: &[&str]) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start the {name}: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{name} without pipes"));
        };
        Ok(Self {
            name,
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Its pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `line`.
    pub(crate) async fn send(&mut self, line: &str) -> Result<(), String> {
        let name = self.name;
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        self.stdin.flush().await.map_err(|e| format!("{name}: {e}"))
    }

    /// The next line it writes, within `within`.
    pub(crate) async fn answer(&mut self, within: Duration) -> Result<String, String> {
        let name = self.name;
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .map_err(|_| format!("{name}: no answer within {within:?}"))?
            .map_err(|e| format!("{name}: {e}"))?
            .ok_or_else(|| format!("{name} ended"))
    }
}

/// The driver's handle on a reader process (killed when dropped).
pub(crate) struct Reader(Helper);

impl Reader {
    /// Starts a reader of streams of `target` on `addr` (none open yet).
    pub(crate) fn start(addr: SocketAddr, target: &Target) -> Result<Self, String> {
        let addr = addr.to_string();
        let [kind, what] = target.args();
        Helper::start("watch reader", &[FLAG, &addr, kind, what]).map(Self)
    }

    /// The reader's pid (to raise its open-file limit).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.0.pid()
    }

    async fn ask(&mut self, line: &str) -> Result<String, String> {
        self.0.send(line).await?;
        let answer = self.0.answer(ANSWER_TIMEOUT).await?;
        match answer.strip_prefix("error ") {
            Some(e) => Err(e.to_owned()),
            None => Ok(answer),
        }
    }

    /// Opens `n` streams; (ready, failed).
    pub(crate) async fn open(&mut self, n: usize) -> Result<(usize, usize), String> {
        let answer = self.ask(&format!("open {n}")).await?;
        let mut w = answer.split_whitespace().skip(1).map(str::parse::<usize>);
        match (w.next(), w.next()) {
            (Some(Ok(ready)), Some(Ok(failed))) => Ok((ready, failed)),
            _ => Err(format!("watch reader answered {answer:?}")),
        }
    }

    /// Times the event `KINDS[kind]` from now on.
    pub(crate) async fn arm(&mut self, kind: usize) -> Result<(), String> {
        self.ask(&format!("arm {kind}")).await.map(drop)
    }

    /// Waits until `n` watchers saw the armed event: when the first and
    /// the last did, as this process's `Instant`s.
    pub(crate) async fn wait(&mut self, n: usize) -> Result<(Instant, Instant), String> {
        let answer = self.ask(&format!("wait {n}")).await?;
        let mut w = answer.split_whitespace().skip(1).map(str::parse::<u128>);
        let (Some(Ok(first)), Some(Ok(last))) = (w.next(), w.next()) else {
            return Err(format!("watch reader answered {answer:?}"));
        };
        let (now, wall) = (Instant::now(), unix_ns(SystemTime::now()));
        let at = |ns: u128| {
            let ago = u64::try_from(wall.saturating_sub(ns)).unwrap_or(u64::MAX);
            now.checked_sub(Duration::from_nanos(ago)).unwrap_or(now)
        };
        Ok((at(first), at(last)))
    }
}
