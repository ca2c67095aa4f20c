//! `lua/plain_acquire.lua`, `lua/plain_renew.lua` and
//! `lua/plain_release.lua` from the Rust side: the plain lease's verbs in
//! brief (lua/README.md, "Slim scripts"). Each is tried first for the
//! plain case it serves and answers as its general script does, or
//! [`MISS`]: nothing written, the general script decides (acquire.rs,
//! renew.rs, release.rs run it then). Their keys and arguments by the
//! names their headers give them, in the headers' order.

use std::sync::LazyLock;

use super::super::call::Executed;
use super::super::evalsha::{values, Named, Script};
use super::super::keys::{KeyBuf, PERMIT_FIELD};
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{int, STATUS};
use crate::domain::{Attempt, ResourceId};
use crate::store::{Replicated, StoreError};

/// The status of "not for this script: run the general one".
const MISS: i64 = 6;

/// The scripts, hashed once, under their general scripts' names (metrics
/// and traces count a verb's script runs, slim or not).
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::tagged("acquire", lua::PLAIN_ACQUIRE.assembled));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::tagged("renew", lua::PLAIN_RENEW.assembled));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::tagged("release", lua::PLAIN_RELEASE.assembled));

/// Each writes: with replica acks configured, `WAIT` follows.
const WAITS_FOR_REPLICAS: bool = true;

/// The `KEYS` of plain_acquire.lua and plain_release.lua.
fn keys3<'a>(k: &[&'a str; 3]) -> Named<'a, 3> {
    let [record, seq, hist] = k;
    [("record", *record), ("sequence", *seq), ("history", *hist)]
}

/// plain_acquire.lua's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
pub(super) struct AcquireArgs<'a> {
    pub permit_field: &'a str,
    pub ttl_ms: &'a str,
    pub holder_label: &'a str,
    pub history_length: &'a str,
    pub history_ttl_ms: &'a str,
    pub purpose_watched: &'a str,
}

impl<'a> AcquireArgs<'a> {
    fn named(&self) -> Named<'a, 6> {
        [
            ("permit field", self.permit_field),
            ("ttl ms", self.ttl_ms),
            ("holder label", self.holder_label),
            ("history length", self.history_length),
            ("history ttl ms", self.history_ttl_ms),
            ("purpose watched", self.purpose_watched),
        ]
    }
}

/// plain_renew.lua's `ARGV`.
#[derive(Default)]
struct RenewArgs<'a> {
    permit_field: &'a str,
    ttl_ms: &'a str,
}

impl<'a> RenewArgs<'a> {
    fn named(&self) -> Named<'a, 2> {
        [("permit field", self.permit_field), ("ttl ms", self.ttl_ms)]
    }
}

/// plain_release.lua's `ARGV`.
#[derive(Default)]
struct ReleaseArgs<'a> {
    permit_field: &'a str,
    event_channel: &'a str,
    resource_tag: &'a str,
    history_length: &'a str,
    history_ttl_ms: &'a str,
}

impl<'a> ReleaseArgs<'a> {
    fn named(&self) -> Named<'a, 5> {
        [
            ("permit field", self.permit_field),
            ("event channel", self.event_channel),
            ("resource tag", self.resource_tag),
            ("history length", self.history_length),
            ("history ttl ms", self.history_ttl_ms),
        ]
    }
}

/// The answer, or `None` when the script left the call to the general one.
fn answered(done: Executed) -> Result<Option<Replicated<Vec<redis::Value>>>, StoreError> {
    if int(&done.value, STATUS)? == MISS {
        return Ok(None);
    }
    Ok(Some(Replicated {
        value: done.value,
        replication: done.replication,
        ended_holds: Vec::new(),
    }))
}

impl RedisStore {
    /// plain_acquire.lua for `attempt`: a plain lease asked by a caller
    /// not queued. Answers as acquire.lua, or `None`.
    /// `tag` is `resource.tag()`.
    pub(super) async fn plain_acquire(
        &self,
        resource: &ResourceId,
        tag: &str,
        attempt: &Attempt,
        ttl_ms: &str,
        holder_label: &str,
    ) -> Result<Option<Replicated<Vec<redis::Value>>>, StoreError> {
        // The keys and the permit field in one allocation.
        let buf = KeyBuf::new(
            &self.namespace,
            resource,
            ["lease", "seq", "hist", PERMIT_FIELD],
            Some(attempt),
        );
        let [record, seq, hist, permit_field] = buf.get();
        let args = AcquireArgs {
            permit_field,
            ttl_ms,
            holder_label,
            history_length: &self.history_args[0],
            history_ttl_ms: &self.history_args[1],
            purpose_watched: self.purpose_watched_arg(resource),
        };
        let done = self
            .run_on_record(
                &ACQUIRE,
                &values(&keys3(&[record, seq, hist])),
                tag,
                &values(&args.named()),
                WAITS_FOR_REPLICAS,
            )
            .await?;
        answered(done)
    }

    /// plain_renew.lua for `attempt`, keeping its label. Answers as
    /// renew.lua, or `None`.
    /// `tag` is `resource.tag()`.
    pub(super) async fn plain_renew(
        &self,
        resource: &ResourceId,
        tag: &str,
        attempt: &Attempt,
        ttl_ms: &str,
    ) -> Result<Option<Replicated<Vec<redis::Value>>>, StoreError> {
        let buf = KeyBuf::new(
            &self.namespace,
            resource,
            ["lease", PERMIT_FIELD],
            Some(attempt),
        );
        let [record, permit_field] = buf.get();
        let args = RenewArgs {
            permit_field,
            ttl_ms,
        };
        let mut done = self
            .run_on_record(
                &RENEW,
                &[record],
                tag,
                &values(&args.named()),
                WAITS_FOR_REPLICAS,
            )
            .await?;
        // Renewed: {status, fence, acquiredAt, now, ttl granted, holder
        // slot}, in renew.lua's order (the slot before the TTL).
        if int(&done.value, STATUS)? == 1 {
            if done.value.len() != 6 {
                return Err(bad_reply());
            }
            done.value.swap(4, 5);
        }
        answered(done)
    }

    /// plain_release.lua for `attempt` (the caller's release). Answers as
    /// release.lua, or `None`.
    /// `tag` is `resource.tag()`.
    pub(super) async fn plain_release(
        &self,
        resource: &ResourceId,
        tag: &str,
        attempt: &Attempt,
    ) -> Result<Option<Replicated<Vec<redis::Value>>>, StoreError> {
        let buf = KeyBuf::new(
            &self.namespace,
            resource,
            ["lease", "seq", "hist", PERMIT_FIELD],
            Some(attempt),
        );
        let [record, seq, hist, permit_field] = buf.get();
        let args = ReleaseArgs {
            permit_field,
            event_channel: &self.wake_channel,
            resource_tag: tag,
            history_length: &self.history_args[0],
            history_ttl_ms: &self.history_args[1],
        };
        let done = self
            .run_on_record(
                &RELEASE,
                &values(&keys3(&[record, seq, hist])),
                tag,
                &values(&args.named()),
                WAITS_FOR_REPLICAS,
            )
            .await?;
        answered(done)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;

    #[test]
    fn the_headers_list_the_arguments_rust_passes() {
        let three = names(&keys3(&Default::default()));
        header::assert_lists(
            lua::PLAIN_ACQUIRE.entry,
            three.clone(),
            names(&AcquireArgs::default().named()),
        );
        header::assert_lists(
            lua::PLAIN_RELEASE.entry,
            three,
            names(&ReleaseArgs::default().named()),
        );
        header::assert_lists(
            lua::PLAIN_RENEW.entry,
            vec!["record".to_owned()],
            names(&RenewArgs::default().named()),
        );
    }
}
