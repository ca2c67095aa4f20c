//! A leader-election candidate: campaigns for one resource, works (prints a
//! heartbeat with its fencing token) only while it leads, and prints every
//! change of leader it sees.
//!
//! Start leasehold with its embedded store, then three candidates in three
//! terminals (one leads, the others wait server-side and take over when it
//! stops):
//!
//! ```text
//! cargo run -- serve --listen 127.0.0.1:8080
//! cargo run --example leader --features client -- http://127.0.0.1:8080 alpha
//! cargo run --example leader --features client -- http://127.0.0.1:8080 bravo
//! cargo run --example leader --features client -- http://127.0.0.1:8080 charlie
//! ```
//!
//! Ctrl-C on the leader resigns (releases the lease): another candidate
//! leads within milliseconds. Killing the leader (`kill -9`) releases
//! nothing: another leads once its 5 s TTL runs out.
//!
//! Arguments (all optional): the service's base URL (default
//! `http://127.0.0.1:8080`), this candidate's holder label (default
//! `pid-<process id>`), and the raw id of what is led (default `cron`;
//! only its digest is sent). `LEASEHOLD_CA_FILE` names a PEM CA file to
//! trust for an `https://` URL.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::client::{Client, ClientSettings, Election, ElectionEvent, ElectionSettings};
use leasehold::domain::{HolderLabel, Purpose, ResourceDigest, ResourceId};
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(5);
const HEARTBEAT: Duration = Duration::from_secs(1);

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
            eprintln!("leader: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let holder = args
        .next()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let raw_id = args.next().unwrap_or_else(|| "cron".to_owned());

    let mut settings = ClientSettings::new(base);
    settings.tls.ca_file = std::env::var_os("LEASEHOLD_CA_FILE").map(Into::into);
    let client = Client::new(settings)?;
    let resource = ResourceId {
        purpose: Purpose::parse("leader-demo")?,
        digest: ResourceDigest::of_raw_id(&raw_id),
    };
    let (election, mut events) = Election::new(
        client,
        resource,
        HolderLabel::parse(&holder)?,
        ElectionSettings::new(TTL),
    );

    // Ctrl-C cancels the campaign; it resigns (releases) before returning.
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                println!("{holder}: interrupted, resigning");
                cancel.cancel();
            }
        }
    });
    let campaign = tokio::spawn({
        let election = election.clone();
        async move { election.campaign(cancel).await }
    });
    // Drop our clone, so the event channel closes once the campaign ends.
    let me = election.holder();
    drop(election);

    while let Some(event) = events.recv().await {
        match event {
            ElectionEvent::NewLeader(leader) => match (leader.holder, leader.fencing_token) {
                (Some(h), Some(t)) => println!("{me}: new leader {h} (fencing token {t})"),
                (None, Some(t)) => println!("{me}: new leader without a label (fencing token {t})"),
                _ => println!("{me}: no leader"),
            },
            ElectionEvent::StartedLeading(term) => {
                println!(
                    "{me}: started leading, fencing token {}",
                    term.fencing_token()
                );
                // The leader's work: runs until the term's token fires,
                // which happens before the lease's local validity ends.
                let me = me.clone();
                tokio::spawn(async move {
                    let stop = term.token();
                    let mut beat = tokio::time::interval(HEARTBEAT);
                    loop {
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = beat.tick() => println!("{me}: working as leader with fencing token {}", term.fencing_token()),
                        }
                    }
                });
            }
            ElectionEvent::StoppedLeading {
                fencing_token,
                reason,
            } => println!("{me}: stopped leading (fencing token {fencing_token}): {reason:?}"),
        }
    }
    campaign.await??;
    println!("{me}: campaign over");
    Ok(())
}
