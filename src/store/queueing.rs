//! The fair queue's vocabulary between the service and a store: the
//! operations on a resource's queue ([`QueueOp`]), a waiter's [`Ask`] for a
//! release to grant, and what an operation found ([`Queued`]).

use super::AcquireSpec;
use crate::domain::Attempt;

/// A fair-queue operation for one resource.
#[derive(Debug, Clone, Copy)]
pub enum QueueOp<'a> {
    /// Take a place at the back (the store's clock orders places).
    Enter(&'a str, Option<Ask<'a>>),
    /// Take a place ahead of this instance's own entries (a turn holder
    /// whose place lapsed; among the first 64).
    EnterFront(&'a str, Option<Ask<'a>>),
    /// This instance is alive, and these of its entries (comma-separated
    /// members) still wait; its other entries go.
    Beat(&'a str),
    /// Leave the queue (deadline, disconnect, shutdown); with the attempt
    /// of the entry's ask, the answer says whether a release granted it.
    Leave(&'a str, Option<&'a Attempt>),
}

/// A waiter's acquire, left with its entry for a release to grant (§12);
/// ignored where nothing is granted (embedded; Redis with replica acks).
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// Whose acquire (the permit is written for it).
    pub attempt: &'a Attempt,
    /// What it asks for (only a plain lease is granted).
    pub spec: AcquireSpec<'a>,
}

/// What a fair-queue operation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// Entered. `Some(ms)`: the waiter need not look for that long (a
    /// release, grant or event comes first); `None`: it looks at once.
    Entered(Option<u64>),
    /// Left. `granted`: a release had granted the entry a permit.
    Left { granted: bool },
    /// A heartbeat.
    Beaten,
}
