//! The fair queue's vocabulary between the service and a store: the
//! operations on a resource's queue ([`QueueOp`]), a waiter's [`Ask`] for a
//! release to grant, what an operation found ([`Queued`]), and how an
//! acquire stands to the queue ([`InQueue`]) and what it did there
//! ([`Moved`]).

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

/// How an acquire stands to the resource's fair queue; `M` is the member
/// name (borrowed, or owned to move into a task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InQueue<M> {
    /// Not queued: it goes only when nobody waits.
    No,
    /// Queued as this member ([`super::Store::queue_member`]).
    As(M),
    /// Not queued yet: when it finds no permit, it enters as this member
    /// in the same call (a plain lease with its ask), where
    /// [`super::Store::enters_when_held`]; elsewhere as [`InQueue::No`].
    Entering(M),
    /// Queued as this member, looking for the last time (its deadline):
    /// refused, the entry leaves in the same call, where
    /// [`super::Store::enters_when_held`]; elsewhere as [`InQueue::As`].
    Leaving(M),
}

impl<M: AsRef<str>> InQueue<M> {
    /// The same, borrowing the member.
    pub fn as_str(&self) -> InQueue<&str> {
        match self {
            InQueue::No => InQueue::No,
            InQueue::As(m) => InQueue::As(m.as_ref()),
            InQueue::Entering(m) => InQueue::Entering(m.as_ref()),
            InQueue::Leaving(m) => InQueue::Leaving(m.as_ref()),
        }
    }

    /// The member the acquire is queued as, if any.
    pub fn queued_as(&self) -> Option<&str> {
        match self {
            InQueue::As(m) | InQueue::Leaving(m) => Some(m.as_ref()),
            InQueue::No | InQueue::Entering(_) => None,
        }
    }
}

impl InQueue<&str> {
    /// The same, owning the member.
    pub fn to_owned(self) -> InQueue<String> {
        match self {
            InQueue::No => InQueue::No,
            InQueue::As(m) => InQueue::As(m.to_owned()),
            InQueue::Entering(m) => InQueue::Entering(m.to_owned()),
            InQueue::Leaving(m) => InQueue::Leaving(m.to_owned()),
        }
    }

    /// Queued as `member`, or not queued.
    pub fn member(member: Option<&str>) -> InQueue<&str> {
        member.map_or(InQueue::No, InQueue::As)
    }
}

/// What an acquire that found no permit did to the caller's queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Nothing.
    Stayed,
    /// An [`InQueue::Entering`] acquire entered.
    Entered,
    /// An [`InQueue::Leaving`] acquire's entry left: no release can grant
    /// it any more.
    Left,
}
