//! The differential HTTP suite (issue 39): the same bytes sent as the first
//! request of a fresh plain connection (where the hand-written paths,
//! `src/http/lanes.rs`, may serve them) and after a request hyper served on
//! its connection (hyper's turn), compared: status, the headers that
//! matter, the body (what differs by nature, times, tokens, ids, left
//! out), the fate of the connection and of a pipelined next request. The
//! rule it keeps: a request stays off hyper only while this suite shows the
//! hand-written path answering it as hyper does.
//!
//! Run with the fast paths on (the default) and off
//! (`LEASEHOLD_HTTP_FAST_PATHS=false`, scripts/test.sh): off, both turns
//! are hyper's, and the suite checks itself.
//!
//! `wedge` holds the tests of issue 39's items 1 and 2 (a `#fragment`
//! that wedged a connection, a head deadline that restarted).

mod bodies;
mod cases;
mod faults;
mod wedge;
pub mod wire;
