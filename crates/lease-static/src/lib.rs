#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The `Strategy` of a node whose ID is fixed by its environment: every acquire and renew
/// grants the requested TTL on that ID, and nothing is held anywhere to release. With a
/// [`FloorFile`] the timestamp floor is kept in that file.
macro_rules! fixed_id_strategy {
    ($strategy:ty, $name:literal) => {
        impl lease_core::Strategy for $strategy {
            type Lease = lease_core::MachineId;
            type Error = $crate::FloorFileError;

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

            fn records_floor(&self) -> bool {
                self.floor_file().is_some()
            }

            async fn acquire_with_floor(
                &self,
                requested: std::time::Duration,
                _now_ms: u64,
                floor_ms: u64,
            ) -> Result<lease_core::Grant<lease_core::MachineId>, Self::Error> {
                let grant = self.acquire(requested).await?;
                match self.floor_file() {
                    Some(file) => Ok(grant.with_floor(file.raise(floor_ms)?)),
                    None => Ok(grant),
                }
            }

            async fn renew_with_floor(
                &self,
                lease: &lease_core::MachineId,
                requested: std::time::Duration,
                floor_ms: u64,
            ) -> Result<lease_core::Renewal<lease_core::MachineId>, Self::Error> {
                // Recorded before the renewal is answered, so before the deadline moves.
                if let Some(file) = self.floor_file() {
                    file.raise(floor_ms)?;
                }
                self.renew(lease, requested).await
            }

            async fn release_with_floor(
                &self,
                _lease: &lease_core::MachineId,
                _guard: std::time::Duration,
                floor_ms: u64,
            ) -> Result<(), Self::Error> {
                match self.floor_file() {
                    Some(file) => file.set(floor_ms),
                    None => Ok(()),
                }
            }

            fn deterministic(&self) -> bool {
                true
            }

            fn name(&self) -> &'static str {
                $name
            }
        }

        impl $strategy {
            /// Keeps the timestamp floor in `file` (see [`FloorFile`](crate::FloorFile)): on
            /// storage that follows this machine ID from one process to the next, a node that
            /// takes the ID over starts above everything its predecessor issued, whatever the
            /// two clocks say.
            #[must_use]
            pub fn with_floor_file(mut self, file: crate::FloorFile) -> Self {
                self.floor = Some(file);
                self
            }

            /// The floor file, if one is configured.
            #[must_use]
            pub const fn floor_file(&self) -> Option<&crate::FloorFile> {
                self.floor.as_ref()
            }
        }
    };
}

pub mod floor_file;
pub mod hosts;
pub mod statefulset;

pub use floor_file::{FloorFile, FloorFileError};
pub use hosts::{
    HostListLeaseError, HostListStrategy, IdentifierSource, NodeMatch, SystemIdentifiers,
};
pub use statefulset::{StatefulSetLeaseError, StatefulSetStrategy};
