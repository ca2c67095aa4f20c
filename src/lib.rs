//! leasehold
