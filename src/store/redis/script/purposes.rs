//! `lua/purposes.lua` from the Rust side: the registry of watched purposes
//! (docs/watching.md, "Watching a purpose"). Each instance reads it every
//! [`PURPOSE_POLL`] and keeps the purposes marked in `watched::WatchedPurposes`;
//! acquire and renew pass "purpose watched" for those, so their scripts
//! announce changes of every resource of a watched purpose, also of
//! resources nobody follows and of new ones.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Value;
use tokio_util::sync::CancellationToken;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::keys::WATCH_MARK_MS;
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{int, STATUS};
use crate::domain::Purpose;
use crate::store::StoreError;

/// The script, hashed once.
static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new("purposes", lua::PURPOSES.assembled));

/// How often an instance reads the registry.
pub(in crate::store) const PURPOSE_POLL: Duration = Duration::from_secs(1);

/// The registry's hash tag (one Cluster slot for the whole registry).
const TAG: &str = "purposes";

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    purpose: &'a str,
    mark_ms: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 2> {
        [
            ("purpose to mark watched", self.purpose),
            ("mark ms", self.mark_ms),
        ]
    }
}

/// `{status(2), now, purpose, until, ...}`: the purposes marked.
fn decode(items: &[Value]) -> Result<HashSet<String>, StoreError> {
    if int(items, STATUS)? != 2 {
        return Err(StoreError::Unavailable(
            "the purposes registry refused the mark",
        ));
    }
    let mut out = HashSet::new();
    for pair in items.get(2..).unwrap_or_default().chunks(2) {
        match pair.first() {
            Some(Value::BulkString(b)) => {
                out.insert(String::from_utf8(b.clone()).map_err(|_| bad_reply())?);
            }
            _ => return Err(bad_reply()),
        }
    }
    Ok(out)
}

impl RedisStore {
    /// Runs the registry script: marks `purpose` (when given) and reads
    /// every marked purpose into this instance's set.
    async fn purposes_call(&self, purpose: Option<&Purpose>) -> Result<(), StoreError> {
        let key = format!("{}:purposes:v2:{{{TAG}}}", self.namespace);
        let args = Args {
            purpose: purpose.map_or("", Purpose::as_str),
            mark_ms: WATCH_MARK_MS,
        };
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: TAG,
                keys: &[key.as_str()],
                args: &values(&args.named()),
                acks: None,
            })
            .await?;
        self.watched_purposes.replace(decode(&done.value)?);
        Ok(())
    }

    /// The "purpose watched" argument of acquire and renew for `resource`.
    pub(super) fn purpose_watched_arg(&self, resource: &crate::domain::ResourceId) -> &'static str {
        if self.watched_purposes.contains(&resource.purpose) {
            "1"
        } else {
            ""
        }
    }

    /// Marks `purpose` watched (for [`WATCH_MARK_MS`]) and answers how long
    /// until every instance passes "purpose watched" for it: one poll
    /// period, plus a command timeout for a script sent just before its
    /// instance's poll and still on its way.
    pub(in crate::store) async fn mark_purpose(
        &self,
        purpose: &Purpose,
    ) -> Result<Duration, StoreError> {
        self.purposes_call(Some(purpose)).await?;
        Ok(PURPOSE_POLL + self.command_timeout)
    }

    /// Reads the registry every [`PURPOSE_POLL`] until shutdown (a failed
    /// read keeps the last set).
    pub(in crate::store) async fn poll_purposes(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            if let Err(err) = self.purposes_call(None).await {
                tracing::debug!(%err, "reading the watched purposes failed; keeping the last set");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(PURPOSE_POLL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::PURPOSES.entry,
            vec!["registry".to_owned()],
            names(&Args::default().named()),
        );
    }

    #[test]
    fn the_answer_is_the_set_of_marked_purposes() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let answer = [
            Value::Int(2),
            Value::Int(5),
            bulk("a"),
            bulk("9"),
            bulk("b"),
            bulk("9"),
        ];
        let set = decode(&answer).expect("decoded");
        assert_eq!(set.len(), 2);
        assert!(decode(&[Value::Int(-9), bulk("OOM")]).is_err());
    }
}
