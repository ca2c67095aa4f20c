//! A lease script as the Rust side runs it: its Lua source (assembled at
//! compile time from `lua/` by `lua.rs`), its SHA-1 computed once, of the
//! assembled text, and the `EVALSHA` command that calls it.

use super::reply::Nonce;

/// The name every script's header gives its last `ARGV`: the per-call
/// nonce, which [`Script::evalsha`] appends after the script's own
/// arguments (every script echoes it first in its reply).
#[cfg(test)]
pub const NONCE_ARG: &str = "nonce";

/// A Lua script and its SHA-1.
pub struct Script {
    /// Verb name, for metrics and logs.
    pub name: &'static str,
    /// The Lua source, assembled: what Redis runs and the SHA-1 is of.
    pub source: &'static str,
    sha1: String,
    /// The nonce goes as the tag of status 1 (`nonce * 16 + 10`), which
    /// the script answers with as it is (the slim scripts: each number
    /// Lua makes from text costs Redis about 1 300 instructions).
    tagged: bool,
}

impl Script {
    /// `source` under `name`, hashed now (build it once, in a static).
    pub fn new(name: &'static str, source: &'static str) -> Self {
        let sha1 = redis::Script::new(source).get_hash().to_owned();
        Self {
            name,
            source,
            sha1,
            tagged: false,
        }
    }

    /// As [`Script::new`], for a script whose header takes the nonce as
    /// the tag of status 1 (`nonce * 16 + 10`).
    pub fn tagged(name: &'static str, source: &'static str) -> Self {
        Self {
            tagged: true,
            ..Self::new(name, source)
        }
    }

    /// An `EVALSHA` command for this script; `nonce` is the last argument
    /// (every header names it `nonce`).
    pub fn evalsha(&self, keys: &[&str], args: &[&str], nonce: &Nonce) -> redis::Cmd {
        let tag = self.tagged.then(|| nonce.tag_of_status_one());
        let nonce = tag.as_ref().map_or(nonce.as_str(), |t| t.as_str());
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

/// A script's keys or arguments, each with the name its header gives it
/// (`-- ARGV[n] <name>`), in the header's order.
pub type Named<'a, const N: usize> = [(&'static str, &'a str); N];

/// The values of `named`, in order: what the script is called with.
pub fn values<'a, const N: usize>(named: &Named<'a, N>) -> [&'a str; N] {
    named.map(|(_, value)| value)
}

/// The names of `named`, in order (what a test checks against the header).
#[cfg(test)]
pub fn names<const N: usize>(named: &Named<'_, N>) -> Vec<String> {
    named.iter().map(|(name, _)| (*name).to_owned()).collect()
}
