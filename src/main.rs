//! The `leasehold` binary: settings → logging → validation → bind → [`leasehold::run`].

use std::process::ExitCode;

use leasehold::config::{Cli, Command, HealthcheckArgs, ServeArgs};
use leasehold::domain::ResourceDigest;

/// mimalloc rather than glibc malloc: a request allocates ~100 small,
/// short-lived blocks across threads, where glibc's arena locks and
/// consolidation cost a fifth of the CPU (docs/perf-log/2026-12-02.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match cli.command {
        Some(Command::Digest { raw_id }) => {
            println!("{}", ResourceDigest::of_raw_id(&raw_id));
            ExitCode::SUCCESS
        }
        Some(Command::Openapi) => {
            // A reader that stops early (`| head`) closes the pipe: that is
            // not an error worth a panic.
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{}", leasehold::http::openapi::document_json()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("leasehold: cannot write the document: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Healthcheck(args)) => healthcheck(&args),
        Some(Command::Scripts { dump }) => dump_scripts(&dump),
        Some(Command::Serve(args)) => serve(*args),
        None => match ServeArgs::from_env() {
            Ok(args) => serve(args),
            Err(e) => {
                use clap::CommandFactory;
                usage_error(e, &Cli::command())
            }
        },
    }
}

/// `leasehold scripts --dump DIR`: every Lua script as Redis runs it, one
/// file each (`DIR/<name>.lua`).
fn dump_scripts(dir: &std::path::Path) -> ExitCode {
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        leasehold::store::redis::lua::ALL
            .iter()
            .try_for_each(|s| std::fs::write(dir.join(format!("{}.lua", s.name)), s.assembled))
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "leasehold: cannot write the scripts to {}: {e}",
                dir.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// The service's own command line (`serve`, the default, `digest`, ...).
#[cfg(not(feature = "cli"))]
fn parse() -> Result<Cli, ExitCode> {
    use clap::CommandFactory;
    <Cli as clap::Parser>::try_parse().map_err(|e| usage_error(e, &Cli::command()))
}

/// Exits with clap's message, or, for a bad value that came from a
/// `LEASEHOLD_*` variable, one that names the variable.
fn usage_error(e: clap::Error, command: &clap::Command) -> ExitCode {
    match leasehold::config::env_value_error(&e, command) {
        Some(message) => {
            eprintln!("{message}");
            ExitCode::from(2)
        }
        None => e.exit(),
    }
}

/// The service's command line plus the client subcommands (`lock`,
/// `inspect`; see `leasehold::cli`). `Err(code)`: the process is done and
/// exits with `code` (a client subcommand ran, or its usage was wrong: 64,
/// EX_USAGE; the service's own usage errors keep clap's 2).
#[cfg(feature = "cli")]
fn parse() -> Result<Cli, ExitCode> {
    use clap::{CommandFactory, FromArgMatches, Subcommand};
    use leasehold::cli::{is_client_command, ClientCommand, EXIT_USAGE};

    let service = Cli::command();
    // Augmenting would also take the enum's doc comment as the about text.
    let about = service.get_about().cloned();
    let long_about = service.get_long_about().cloned();
    let mut command = ClientCommand::augment_subcommands(service);
    if let Some(text) = about {
        command = command.about(text);
    }
    if let Some(text) = long_about {
        command = command.long_about(text);
    }
    let matches = match command.try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let client_usage = std::env::args()
                .nth(1)
                .is_some_and(|first| is_client_command(&first));
            if client_usage && e.use_stderr() {
                let _ = e.print();
                return Err(ExitCode::from(EXIT_USAGE));
            }
            return Err(usage_error(e, &Cli::command()));
        }
    };
    if matches.subcommand_name().is_some_and(is_client_command) {
        return Err(match ClientCommand::from_arg_matches(&matches) {
            Ok(client) => client.run(),
            Err(e) => {
                let _ = e.print();
                ExitCode::from(EXIT_USAGE)
            }
        });
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.exit())
}

fn serve(args: ServeArgs) -> ExitCode {
    leasehold::telemetry::init_logging(args.telemetry.log_format);
    // The one validation: everything after takes the checked settings.
    let config = match args.validate() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("leasehold: {e}");
            return ExitCode::from(2);
        }
    };
    // One thread: tokio's current-thread scheduler, not a one-worker
    // multi-thread one. The latter runs a task it just woke next (its LIFO
    // slot), so redis-rs' connection task wakes after every request and
    // writes each command on its own; the former runs woken tasks in order,
    // so the requests of one I/O wake-up are written to Redis together.
    // Measured at a fixed 10 000 acquires/s: about 10 % less CPU per request
    // both in leasehold and in Redis (docs/perf-log/2026-12-03.md).
    let threads = match config.http.worker_threads {
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
        let listen = config.http.listen;
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("leasehold: cannot listen on {listen} (LEASEHOLD_LISTEN): {e}");
                return ExitCode::FAILURE;
            }
        };
        match leasehold::run(listener, config, leasehold::shutdown_signal()).await {
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
