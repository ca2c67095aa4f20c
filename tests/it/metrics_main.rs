//! The metrics tests, a binary of their own: they assert that a lease cycle
//! moves process-wide counters by exact amounts, which the other tests
//! running in the same process would move too (the metrics recorder is
//! global). Everything else is in `tests/it/main.rs`.

#[macro_use]
mod common;

mod metrics;
