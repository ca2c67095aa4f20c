//! A worker that does fenced work under a lease, kept alive by a watchdog,
//! and stops the moment the lease stops protecting it.
//!
//! Start leasehold with its embedded store, then one or more workers on the
//! same resource (only one works at a time; the others wait server-side):
//!
//! ```text
//! cargo run -- serve --listen 127.0.0.1:8080
//! cargo run --example worker --features client -- http://127.0.0.1:8080 order-42 20
//! ```
//!
//! Arguments (all optional): the service's base URL (default
//! `http://127.0.0.1:8080`), the raw resource id (default `order-42`; only
//! its digest is sent), and how many work steps to do (default 20, one every
//! 250 ms). An `https://` URL works too; `LEASEHOLD_CA_FILE` names a PEM CA
//! file to trust instead of the system's roots. Ctrl-C stops the work and releases the lease. Set `RUST_LOG=debug`
//! to see the watchdog's renewals.
//!
//! The "effect target" here is an in-process store that remembers the
//! highest fencing token it has seen and rejects writes with a lower one:
//! that check, at the place where the work takes effect, is what makes the
//! lease a correctness guard rather than an efficiency measure.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use leasehold::client::{Acquire, Client, ClientSettings, EndReason, Watchdog};
use leasehold::domain::{OperationId, Purpose, ResourceDigest, ResourceId};

const TTL: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(10);
const STEP: Duration = Duration::from_millis(250);

/// Stands in for the database, queue or API the work writes to.
#[derive(Default)]
struct FencedTarget {
    highest_token: Mutex<u64>,
}

impl FencedTarget {
    /// Accepts a write only with a fencing token at least as high as any seen.
    fn write(&self, fencing_token: u64, what: &str) -> Result<(), String> {
        let mut highest = self
            .highest_token
            .lock()
            .map_err(|_| "target poisoned".to_owned())?;
        if fencing_token < *highest {
            return Err(format!(
                "stale fencing token {fencing_token} < {}",
                *highest
            ));
        }
        *highest = fencing_token;
        println!("target: wrote {what:?} with fencing token {fencing_token}");
        Ok(())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let raw_id = args.next().unwrap_or_else(|| "order-42".to_owned());
    let steps: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20);

    let mut settings = ClientSettings::new(base);
    // For an https:// base URL behind a private CA (default: system roots).
    settings.tls.ca_file = std::env::var_os("LEASEHOLD_CA_FILE").map(Into::into);
    let client = Client::new(settings)?;
    let resource = ResourceId {
        purpose: Purpose::parse("worker-demo")?,
        digest: ResourceDigest::of_raw_id(&raw_id),
    };
    let operation_id = OperationId::parse(&format!("worker-{}", std::process::id()))?;
    // The attempt is created before acquiring, so a retry after a lost reply
    // is recognised as the same acquisition (`replayed_same_operation`).
    let attempt = client.create_attempt(&operation_id).await?;

    let handle = match client.acquire(&resource, &attempt, TTL, WAIT).await? {
        Acquire::Acquired { handle, waited_ms } => {
            println!(
                "worker: acquired (waited {} ms), fencing token {}",
                waited_ms.unwrap_or(0),
                handle.fencing_token()
            );
            handle
        }
        Acquire::ReplayedSameOperation { handle } => handle,
        Acquire::Contended { retry_after_ms, .. }
        | Acquire::OwnerOperationConflict { retry_after_ms } => {
            println!("worker: someone else holds it; try again in {retry_after_ms} ms");
            return Ok(());
        }
        Acquire::LimitMismatch { limit } => {
            println!("worker: held as a counting lease with limit {limit}, not a plain lease");
            return Ok(());
        }
    };

    let watchdog = Watchdog::new(8);
    let mut registration = watchdog.register(&handle)?;
    let lease_gone = registration.token();
    let target = FencedTarget::default();

    for step in 1..=steps {
        // Check right before the effect: never write once the lease is gone.
        if lease_gone.is_cancelled() {
            break;
        }
        target.write(handle.fencing_token(), &format!("step {step} of {raw_id}"))?;
        tokio::select! {
            _ = lease_gone.cancelled() => break,
            _ = tokio::signal::ctrl_c() => {
                println!("worker: interrupted");
                break;
            }
            _ = tokio::time::sleep(STEP) => {}
        }
    }

    if lease_gone.is_cancelled() {
        let reason = registration.ended().await;
        println!(
            "worker: stopped early, the lease no longer protects the work ({reason:?}; handle {})",
            handle.state()
        );
        if reason == EndReason::Unknown {
            // The lease may still exist; a release cleans it up if so.
            println!("worker: clean-up release: {:?}", handle.release().await);
        }
        return Ok(());
    }
    // Released → the watchdog stops and cancels the token (reason Released).
    let outcome = handle.release().await?;
    println!(
        "worker: done; release answered {outcome:?}; watchdog: {:?}",
        registration.ended().await
    );
    Ok(())
}
