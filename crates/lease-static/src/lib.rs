#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The `Strategy` of a node whose ID is fixed by its environment: every acquire and renew
/// grants the requested TTL on that ID, and nothing is held anywhere to release.
macro_rules! fixed_id_strategy {
    ($strategy:ty, $name:literal) => {
        impl lease_core::Strategy for $strategy {
            type Lease = lease_core::MachineId;
            type Error = core::convert::Infallible;

            async fn acquire(
                &self,
                requested: std::time::Duration,
            ) -> Result<lease_core::Grant<lease_core::MachineId>, Self::Error> {
                let id = self.machine_id();
                Ok(lease_core::Grant::new(id, id, requested))
            }

            async fn renew(
                &self,
                lease: &lease_core::MachineId,
                requested: std::time::Duration,
            ) -> Result<lease_core::Renewal<lease_core::MachineId>, Self::Error> {
                Ok(lease_core::Renewal::new(*lease, requested))
            }

            async fn release(
                &self,
                _lease: &lease_core::MachineId,
                _guard: std::time::Duration,
            ) -> Result<(), Self::Error> {
                Ok(())
            }

            fn deterministic(&self) -> bool {
                true
            }

            fn name(&self) -> &'static str {
                $name
            }
        }
    };
}

pub mod hosts;
pub mod statefulset;

pub use hosts::{HostListStrategy, HostsError, IdentifierSource, NodeMatch, SystemIdentifiers};
pub use statefulset::{StatefulSetError, StatefulSetStrategy};
