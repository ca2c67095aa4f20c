//! The Redis store: one Lua script per verb (`script/`: its arguments and
//! reply by name), run with EVALSHA on a pooled connection to the right
//! master, every call bounded by the command timeout and classified as
//! answered, `Unavailable` (definitely not applied) or `Indeterminate`
//! (written, no certain reply).
//!
//! Three topologies share everything but "which master": standalone (one
//! pool), Redis Cluster (`cluster.rs`: the master of the resource's slot) and
//! Redis Sentinel (`sentinel.rs`: the master the sentinels name, abandoned the
//! moment a failover of it begins). TLS (`rediss://`, own CA, client
//! certificate) and ACL credentials apply to every data node. With replica
//! acknowledgements configured, a mutating script is followed by `WAIT` on
//! the same connection and the answer says how many replicas have the write.
//!
//! Imports point one way: `script/` (the verbs, as `impl RedisStore`) uses
//! `store.rs`, which runs a `Call` through `call.rs` and `exec.rs`;
//! those use `evalsha.rs` (a script, its SHA and its `EVALSHA`), which uses
//! nothing of the store. `lua.rs` (every script assembled from `lua/` at
//! compile time, public for the benches and tests) uses nothing at all.

mod call;
mod cluster;
mod evalsha;
mod exec;
mod keys;
mod list;
pub mod lua;
mod node;
mod pool;
mod remembered;
mod reply;
mod script;
mod sentinel;
mod sentinel_logic;
mod settings;
mod store;
mod wakeups;
mod watched;

pub use self::keys::{lease_key, seq_key};
pub use self::settings::{RedisSettings, RedisSetupError, ReplicaAcks, TlsFiles, Topology};
pub use self::store::RedisStore;
