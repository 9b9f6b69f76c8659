//! The static strategies (StatefulSet ordinal, host list): the node's ID is fixed, every
//! acquire and renew grants the requested TTL, there is nothing to release and no floor.
//! The same behaviour as `lease-static`'s strategies.

use std::time::Duration;

use lease_core::{Failure, Grant, MachineId, Renewal, Strategy};

use super::ModelLease;

/// A node whose machine ID is its StatefulSet ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedModel {
    id: MachineId,
}

impl FixedModel {
    /// The strategy of the pod with ordinal `id`.
    #[must_use]
    pub const fn new(id: MachineId) -> Self {
        Self { id }
    }
}

impl Strategy for FixedModel {
    type Lease = ModelLease;
    type Error = Failure;

    async fn acquire(&self, requested: Duration) -> Result<Grant<ModelLease>, Failure> {
        let lease = ModelLease {
            id: self.id,
            token: u128::from(self.id.get()),
        };
        Ok(Grant::new(self.id, lease, requested))
    }

    async fn renew(
        &self,
        lease: &ModelLease,
        requested: Duration,
    ) -> Result<Renewal<ModelLease>, Failure> {
        Ok(Renewal::new(*lease, requested))
    }

    async fn release(&self, _lease: &ModelLease, _guard: Duration) -> Result<(), Failure> {
        Ok(())
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "statefulset-model"
    }
}
