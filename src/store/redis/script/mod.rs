//! One module per Lua script (`lua/<name>.lua` ↔ `<name>.rs`): each names
//! its script's `KEYS` and `ARGV` as the script's header does, in the same
//! order (a unit test reads the header and checks), makes the call and
//! decodes the reply by named positions. Changing a script's arguments
//! touches its `.lua` file and its module here, nothing else.

mod acquire;
#[path = "break.rs"]
mod breaking;
mod decode;
#[cfg(test)]
mod header;
mod history;
mod inspect;
mod instances;
mod plain;
mod purposes;
mod queue;
mod release;
mod renew;
mod session;
mod waiters;

use super::call::{Call, Executed};
use super::evalsha::Script;
use super::store::RedisStore;
use crate::store::StoreError;

impl RedisStore {
    /// Runs a record script (acquire, renew, release, inspect: their
    /// headers all name `KEYS[1] record  KEYS[2] sequence`, then the other
    /// keys each touches) with `keys` and `args` in header order; `tag` is
    /// `resource.tag()`, which the caller usually passes in `args` too.
    /// With replica acks after it when `writes` and acks are configured.
    async fn run_on_record(
        &self,
        script: &Script,
        keys: &[&str],
        tag: &str,
        args: &[&str],
        writes: bool,
    ) -> Result<Executed, StoreError> {
        let run = self.run(Call {
            script,
            tag,
            keys,
            args,
            acks: self.acks.filter(|_| writes),
        });
        // Traces (feature `otel`): the store call, retries included, as a
        // span under the request's.
        #[cfg(feature = "otel")]
        let run = {
            use crate::telemetry::trace::{child, Kind, Value::Str};
            let attributes = vec![
                ("db.system.name", Str("redis")),
                ("leasehold.script", Str(script.name)),
            ];
            child(
                ("store", script.name),
                Kind::Internal,
                attributes,
                run,
                |out| out.as_ref().err().map(super::exec::trace_error),
            )
        };
        run.await
    }
}
