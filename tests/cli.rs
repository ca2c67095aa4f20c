//! `leasehold lock` and `leasehold inspect` as real processes.
