//! The lease scripts, compiled into the binary from `lua/`, with their
//! SHA-1 computed once at start (never per request).

use std::sync::LazyLock;

/// A Lua script and its SHA-1.
pub struct Script {
    /// Verb name, for metrics and logs.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    sha1: String,
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Self {
        let sha1 = redis::Script::new(source).get_hash().to_owned();
        Self { name, source, sha1 }
    }

    /// An `EVALSHA` command for this script; `nonce` is the last argument
    /// (every script echoes it first in its reply).
    pub fn evalsha(&self, keys: &[&str], args: &[&str], nonce: &str) -> redis::Cmd {
        // Sized up front: growing the command's buffers argument by
        // argument was eight allocations per request.
        let data: usize = keys.iter().chain(args).map(|a| a.len()).sum::<usize>() + nonce.len();
        let mut cmd = redis::Cmd::with_capacity(4 + keys.len() + args.len(), 64 + data);
        cmd.arg("EVALSHA")
            .arg(&self.sha1)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .arg(nonce);
        cmd
    }
}

/// The script set.
pub struct Scripts {
    /// `lua/acquire.lua`
    pub acquire: Script,
    /// `lua/renew.lua`
    pub renew: Script,
    /// `lua/release.lua`
    pub release: Script,
    /// `lua/inspect.lua`
    pub inspect: Script,
    /// `lua/queue.lua`
    pub queue: Script,
}

/// The scripts, hashed once.
pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new("acquire", include_str!("../../../lua/acquire.lua")),
    renew: Script::new("renew", include_str!("../../../lua/renew.lua")),
    release: Script::new("release", include_str!("../../../lua/release.lua")),
    inspect: Script::new("inspect", include_str!("../../../lua/inspect.lua")),
    queue: Script::new("queue", include_str!("../../../lua/queue.lua")),
});
