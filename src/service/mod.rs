//! The lease service: admission control, server-side waits, store results
//! turned into typed outcomes, and per-operation metrics. The HTTP layer
//! calls only this.

mod acquire;
mod core;
mod history;
mod instances;
mod kept;
mod list;
mod look;
mod operator;
mod place;
mod session_acquire;
mod sessions;
mod waited;
mod waiters;

pub use self::acquire::AcquireRequest;
pub use self::core::{inspection, LeaseService, ServiceSettings};
pub use self::kept::KeptGuard;
pub use self::session_acquire::SessionAcquire;
