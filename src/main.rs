//! The `leasehold` binary: settings → logging → bind → [`leasehold::run`].

use std::process::ExitCode;

use clap::Parser;
use leasehold::config::{Cli, Command, HealthcheckArgs, ServeArgs};
use leasehold::domain::ResourceDigest;

/// mimalloc rather than glibc malloc: a request allocates ~100 small,
/// short-lived blocks across threads, where glibc's arena locks and
/// consolidation cost a fifth of the CPU (benches/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Digest { raw_id }) => {
            println!("{}", ResourceDigest::of_raw_id(&raw_id));
            ExitCode::SUCCESS
        }
        Some(Command::Openapi) => {
            println!("{}", leasehold::openapi::document_json());
            ExitCode::SUCCESS
        }
        Some(Command::Healthcheck(args)) => healthcheck(&args),
        Some(Command::Serve(args)) => serve(*args),
        None => match ServeArgs::from_env() {
            Ok(args) => serve(args),
            Err(e) => e.exit(),
        },
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    leasehold::telemetry::init_logging(args.log_format);
    if let Err(e) = args.validate() {
        eprintln!("leasehold: {e}");
        return ExitCode::from(2);
    }
    // One thread: tokio's current-thread scheduler, not a one-worker
    // multi-thread one. The latter runs a task it just woke next (its LIFO
    // slot), so redis-rs' connection task wakes after every request and
    // writes each command on its own; the former runs woken tasks in order,
    // so the requests of one I/O wake-up are written to Redis together.
    // Measured at a fixed 10 000 acquires/s: about 10 % less CPU per request
    // both in leasehold and in Redis (benches/PERFORMANCE.md).
    let threads = match args.worker_threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all();
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "leasehold: cannot listen on {} (LEASEHOLD_LISTEN): {e}",
                    args.listen
                );
                return ExitCode::FAILURE;
            }
        };
        match leasehold::run(listener, args, leasehold::shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("leasehold: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// One GET of `--url` (default: this container's own `/readyz`, over
/// HTTPS when the service serves it); see [`leasehold::healthcheck`].
fn healthcheck(args: &HealthcheckArgs) -> ExitCode {
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| leasehold::healthcheck::default_url(args));
    match leasehold::healthcheck::probe(&url, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("healthcheck: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}
