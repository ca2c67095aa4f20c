//! Rust client for the leasehold HTTP API (in progress).
