//! The embedded store: leases in a map inside this process.
//!
//! Same contract as Redis, fencing included: tokens come from one counter for
//! the whole process, `max(last + 1, wall clock in µs)`, so they are strictly
//! increasing per resource (and across resources) and stay above any token
//! handed out before a restart as long as the wall clock does not step back.
//! It serves one instance only: two processes each with their own map would
//! both grant the same lease. Startup logs a warning saying so.

mod history;
mod records;
mod store;

pub use self::store::residue::MemoryResidue;
pub use self::store::MemoryStore;
