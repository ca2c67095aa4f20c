//! Reading the instances sharing the store (`GET /instances`): one store
//! read under the admission limit.

use super::LeaseService;
use crate::domain::{Failure, Roster};

impl LeaseService {
    /// The instances that beat into the store's roster recently, this one
    /// marked. A store failure is `unavailable` (a read changes nothing).
    pub async fn read_instances(&self) -> Result<Roster, Failure> {
        match self.admitted(self.store().instances()).await {
            Ok(Ok(roster)) => Ok(roster),
            Ok(Err(err)) => Err(self.failure(err, None)),
            Err(overloaded) => Err(overloaded),
        }
    }
}
