//! The operator's command line (feature `cli`): `leasehold lock` runs a
//! command while holding a lease, `leasehold session` one while holding
//! several on one session, `leasehold inspect` shows a lease,
//! `leasehold list` a purpose's leases, `leasehold history` a resource's
//! changes, `leasehold watch` follows a lease;
//! `leasehold acquire | renew | release` hold one across shell steps;
//! `leasehold break` removes one (operators). All speak the HTTP API through
//! [`crate::client`].
//!
//! Exit codes follow BSD `sysexits.h`, as `flock`, `consul lock` and cron
//! wrappers expect:
//!
//! | code | meaning |
//! | --- | --- |
//! | the command's | `lock`, `session`: the command ran and exited (killed by signal N: 128+N) |
//! | 1 | `break`: nothing to break (no live permit, or none with that token) |
//! | 64 | bad usage or settings (flags, files, a request the service rejected) |
//! | 69 | the service is unreachable or unavailable (refused, timed out, TLS not trusted, 503) |
//! | 71 | an operating system error (signal handlers, randomness, waiting for the command) |
//! | 75 | `lock`, `session`: not acquired within the wait, or the lease (a lease or the session) was lost while the command ran |
//! | 77 | the service refused the API key (401/403) |

mod common;
mod history;
mod inspect;
mod list;
mod lock;
mod operator;
mod session;
mod steps;
mod watch;
mod watch_purpose;

use std::process::ExitCode;

use clap::Subcommand;

pub use self::common::{
    parse_duration, Connection, EXIT_NOPERM, EXIT_OSERR, EXIT_TEMPFAIL, EXIT_UNAVAILABLE,
    EXIT_USAGE,
};
pub use self::history::HistoryArgs;
pub use self::inspect::InspectArgs;
pub use self::list::ListArgs;
pub use self::lock::LockArgs;
pub use self::operator::BreakArgs;
pub use self::session::{KeepAliveArg, SessionArgs};
pub use self::steps::{AcquireArgs, ReleaseArgs, RenewArgs};
pub use self::watch::WatchArgs;

/// The client subcommands of the `leasehold` binary.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Run a command while holding a lease, like `flock` or `consul lock`.
    ///
    /// Acquires PURPOSE/RAW_ID (waiting up to --wait), keeps the lease alive
    /// while COMMAND runs, releases it when COMMAND exits and exits with
    /// COMMAND's status. COMMAND sees LEASEHOLD_FENCING_TOKEN,
    /// LEASEHOLD_PURPOSE and LEASEHOLD_DIGEST. If the lease is lost, COMMAND
    /// gets SIGTERM, then SIGKILL after --kill-grace, and lock exits 75.
    /// Exit codes: 64 bad usage, 69 service unreachable, 75 not acquired or
    /// lease lost, 77 API key refused.
    Lock(LockArgs),
    /// Run a command while holding several leases on one session.
    ///
    /// Makes a session (--ttl), acquires --purpose/--resource for each
    /// resource on it (waiting up to --wait in all), runs COMMAND while the
    /// session lives (kept alive by its keep-alive stream: if this process
    /// dies, the service frees every lease at once), ends the session when
    /// COMMAND exits (releasing every lease) and exits with COMMAND's
    /// status. COMMAND sees LEASEHOLD_SESSION, LEASEHOLD_PURPOSE, and
    /// LEASEHOLD_DIGESTS and LEASEHOLD_FENCING_TOKENS (space-separated, in
    /// --resource order). If the session or a lease is lost, COMMAND gets
    /// SIGTERM, then SIGKILL after --kill-grace, and session exits 75.
    /// Exit codes: 64 bad usage, 69 service unreachable, 75 not acquired or
    /// lost, 77 API key refused.
    Session(SessionArgs),
    /// Show whether a lease is held, its remaining time and fencing token.
    Inspect(InspectArgs),
    /// List every lease held on a purpose (all pages; each lease once).
    List(ListArgs),
    /// Show a resource's newest changes (acquired, released, expired,
    /// holder changed, lock-delay, revoked), newest first.
    /// Exit codes: 0 shown, 64 bad usage, 69 service unreachable,
    /// 77 API key refused.
    History(HistoryArgs),
    /// Follow a lease: print a line per change (held, by whom, fencing
    /// token, version) until interrupted or --count lines.
    /// Exit codes: 0 done (or the reader went away), 64 bad usage,
    /// 69 service unreachable, 77 API key refused.
    Watch(WatchArgs),
    /// Acquire a lease for later shell steps: the attempt goes to a state
    /// file (mode 0600) and the fencing token to stdout. Run it again with
    /// the same --state after an uncertain answer: it replays.
    /// Exit codes: 0 held, 64 bad usage, 69 service unreachable or no
    /// certain answer, 75 not acquired within the wait, 77 API key refused.
    Acquire(AcquireArgs),
    /// Renew the lease of a state file; prints the fencing token.
    /// Exit codes: 0 renewed, 64, 69, 75 the lease is lost, 77.
    Renew(RenewArgs),
    /// Release the lease of a state file and remove the file.
    /// Exit codes: 0 released (or already gone), 64, 69, 75 someone else
    /// holds it now, 77.
    Release(ReleaseArgs),
    /// Break a lease (an `admin` key): remove every permit of PURPOSE/RAW_ID,
    /// or the one with --fencing-token; the holder's next renew answers
    /// lost (revoked), watchers see --reason.
    /// Exit codes: 0 broken, 1 nothing to break, 64 bad usage,
    /// 69 service unreachable or no certain answer, 77 API key refused.
    Break(BreakArgs),
}

impl ClientCommand {
    /// Runs the subcommand to completion and says how the process exits.
    pub fn run(self) -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("leasehold: cannot start the runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        runtime.block_on(async move {
            match self {
                Self::Lock(args) => lock::run(args).await,
                Self::Session(args) => session::run(args).await,
                Self::Inspect(args) => inspect::run(args).await,
                Self::List(args) => list::run(args).await,
                Self::History(args) => history::run(args).await,
                Self::Watch(args) if args.raw_id.is_none() => watch_purpose::run(args).await,
                Self::Watch(args) => watch::run(args).await,
                Self::Acquire(args) => steps::run_acquire(args).await,
                Self::Renew(args) => steps::run_renew(args).await,
                Self::Release(args) => steps::run_release(args).await,
                Self::Break(args) => operator::run(args).await,
            }
        })
    }
}

/// Whether `name` is one of [`ClientCommand`]'s subcommands.
pub fn is_client_command(name: &str) -> bool {
    matches!(
        name,
        "lock"
            | "session"
            | "inspect"
            | "list"
            | "history"
            | "watch"
            | "acquire"
            | "renew"
            | "release"
            | "break"
    )
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
