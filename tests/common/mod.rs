//! Shared helpers for the integration tests.
//!
//! Every test binary compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod redis;
