//! Running the `leasehold` binary's client commands (`lock`, `inspect`) as
//! real processes: spawn, wait for exit, wait for a marker file.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::app::unique;

/// Generous on a loaded 2-core machine running debug builds.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A fresh directory for marker files.
pub fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("leasehold-cli-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `leasehold ARGS...` with piped output, killed if the test fails first.
pub fn leasehold(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the leasehold binary")
}

/// A finished run.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

/// Waits (at most PATIENCE) for the process to exit.
pub async fn finish(child: Child) -> Run {
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("leasehold exits in time")
        .expect("wait for leasehold");
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub async fn run(args: &[&str]) -> Run {
    finish(leasehold(args)).await
}

/// Waits for `path` to appear; fails early if `child` exits first.
pub async fn until_file(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + PATIENCE;
    while !path.exists() {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "leasehold exited ({status}) before {} appeared",
                path.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
