#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{ErrorKind, LeaseError, LeaseTerms};

/// Why a static strategy could not grant or keep its machine ID.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StaticLeaseError {
    /// The floor file could not be read or written.
    #[error(transparent)]
    FloorFile(#[from] FloorFileError),
    /// The wait before the first grant would outlast the call that makes it.
    #[error(
        "a node taking over a static machine id waits the lease margin ({margin:?}) before it \
         generates, but the {setting} is {limit:?}: raise the {setting} above the margin or \
         lower the margin"
    )]
    WaitOutlastsCall {
        /// The lease manager's margin.
        margin: Duration,
        /// The setting the wait must fit in: `call timeout` or `acquire timeout`.
        setting: &'static str,
        /// Its value.
        limit: Duration,
    },
}

impl LeaseError for StaticLeaseError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::FloorFile(e) => e.kind(),
            Self::WaitOutlastsCall { .. } => ErrorKind::Misconfigured,
        }
    }
}

/// What a static strategy takes from the lease manager's terms
/// ([`Strategy::check_terms`](lease_core::Strategy::check_terms), which the manager calls
/// before it starts; [`Timing::DEFAULT_TERMS`] until then): the margin a node waits before it
/// first generates with no floor to start above, and the longest grant it gives with a floor
/// file.
#[derive(Debug)]
struct Timing {
    margin_ms: AtomicU64,
    window_ms: AtomicU64,
}

impl Timing {
    /// The lease manager's default terms (`LeaseConfig::default().terms()`, which a unit test
    /// compares): this crate depends on the contract alone, not on the manager.
    const DEFAULT_TERMS: LeaseTerms = LeaseTerms::new(
        Duration::from_secs(8 * 3600),
        Duration::from_secs(30),
        Duration::from_secs(10),
    )
    .with_timeouts(Some(Duration::from_secs(30)), Some(Duration::from_secs(60)));

    /// Refuses terms whose call or acquire timeout the margin wait would outlast: the wait
    /// would be cut off and retried until startup fails, instead of failing at once.
    fn check(terms: &LeaseTerms) -> Result<(), StaticLeaseError> {
        let limits = [
            ("call timeout", terms.call_timeout),
            ("acquire timeout", terms.acquire_timeout),
        ];
        for (setting, limit) in limits {
            if let Some(limit) = limit.filter(|limit| *limit <= terms.margin) {
                return Err(StaticLeaseError::WaitOutlastsCall {
                    margin: terms.margin,
                    setting,
                    limit,
                });
            }
        }
        Ok(())
    }

    fn set(&self, terms: &LeaseTerms) {
        self.margin_ms.store(millis(terms.margin), Relaxed);
        // The deadline of a grant lies `window - margin` past its sending, and the floor file
        // records that much ahead of the clock: a crashed holder's replacement waits at most
        // that. Renewals come every `window - 2 * margin`, at least a margin apart; a grant
        // below the minimum TTL would be refused.
        let window = terms.min_ttl.max(terms.margin.saturating_mul(3));
        self.window_ms.store(millis(window), Relaxed);
    }

    fn margin(&self) -> Duration {
        Duration::from_millis(self.margin_ms.load(Relaxed))
    }

    /// The TTL of a grant for `requested` that the floor file bounds.
    fn window(&self, requested: Duration) -> Duration {
        requested.min(Duration::from_millis(self.window_ms.load(Relaxed)))
    }
}

impl Default for Timing {
    fn default() -> Self {
        let timing = Self {
            margin_ms: AtomicU64::new(0),
            window_ms: AtomicU64::new(0),
        };
        timing.set(&Self::DEFAULT_TERMS);
        timing
    }
}

impl Clone for Timing {
    fn clone(&self) -> Self {
        Self {
            margin_ms: AtomicU64::new(self.margin_ms.load(Relaxed)),
            window_ms: AtomicU64::new(self.window_ms.load(Relaxed)),
        }
    }
}

impl PartialEq for Timing {
    fn eq(&self, other: &Self) -> bool {
        (self.margin(), self.window_ms.load(Relaxed))
            == (other.margin(), other.window_ms.load(Relaxed))
    }
}

impl Eq for Timing {}

/// Waits `duration` on a thread of its own, whatever runtime polls the future (the static
/// strategies depend on none). A thread that cannot be started makes the wait block instead:
/// longer for the caller, never shorter.
async fn wait(duration: Duration) {
    use std::sync::{Arc, Mutex, PoisonError};
    use std::task::{Poll, Waker};

    #[derive(Default)]
    struct Shared {
        done: bool,
        waker: Option<Waker>,
    }
    if duration.is_zero() {
        return;
    }
    let shared = Arc::new(Mutex::new(Shared::default()));
    let waker_side = Arc::clone(&shared);
    let spawned = std::thread::Builder::new()
        .name("lease-static-wait".into())
        .spawn(move || {
            std::thread::sleep(duration);
            let mut state = waker_side.lock().unwrap_or_else(PoisonError::into_inner);
            state.done = true;
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
        });
    if spawned.is_err() {
        std::thread::sleep(duration);
        return;
    }
    std::future::poll_fn(|cx| {
        let mut state = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if state.done {
            Poll::Ready(())
        } else {
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    })
    .await;
}

/// The `Strategy` of a node whose ID is fixed by its environment: every acquire and renew
/// grants that ID, and nothing is held anywhere to release.
///
/// Nothing tells such a node whether a predecessor with its ID stopped, or when. So:
///
/// - With a [`FloorFile`], the floor is kept in that file, and a grant lasts at most the
///   window of [`Timing`], so the floor recorded with it (the grant's latest deadline,
///   [`granted_floor`](lease_core::time::granted_floor)) stays that close to the clock: a
///   crashed holder's replacement starts above it within that time. The release records what
///   the factories issued.
/// - With no floor to start above (no floor file, or one that holds none yet), the first grant
///   comes after the lease margin: a predecessor issued no timestamp ahead of its clock when it
///   stopped (without a floor no factory runs ahead of its clock), so a replacement whose clock
///   lags by less than the margin plus its own start-up time starts above all of them.
macro_rules! fixed_id_strategy {
    ($strategy:ty, $name:literal) => {
        impl lease_core::Strategy for $strategy {
            type Lease = lease_core::MachineId;
            type Error = $crate::StaticLeaseError;

            async fn acquire(
                &self,
                request: lease_core::Acquire,
            ) -> Result<lease_core::Grant<lease_core::MachineId>, Self::Error> {
                let id = self.machine_id();
                let (ttl, before) = self.grant(request.requested, request.floor_ms)?;
                if before == 0 {
                    // Nothing to start above: a predecessor may have stopped just now.
                    $crate::wait(self.timing.margin()).await;
                }
                Ok(lease_core::Grant::new(id, id, ttl).with_floor(before))
            }

            async fn renew(
                &self,
                lease: &lease_core::MachineId,
                request: lease_core::Renew,
            ) -> Result<lease_core::Renewal<lease_core::MachineId>, Self::Error> {
                // Recorded before the renewal is answered, so before the deadline moves.
                let (ttl, _) = self.grant(request.requested, request.floor_ms)?;
                Ok(lease_core::Renewal::new(*lease, ttl))
            }

            /// Nothing is held anywhere to give back: with a floor file, records what was
            /// issued.
            async fn release(
                &self,
                _lease: &lease_core::MachineId,
                request: lease_core::Release,
            ) -> Result<(), Self::Error> {
                match self.floor_file() {
                    Some(file) => Ok(file.set(request.floor_ms)?),
                    None => Ok(()),
                }
            }

            /// Takes the margin and the grant window from `terms`; refuses nothing: a grant
            /// lasts the lease duration, or with a floor file the window, which is never below
            /// the minimum TTL.
            fn check_terms(
                &self,
                terms: &lease_core::LeaseTerms,
            ) -> Result<(), $crate::StaticLeaseError> {
                $crate::Timing::check(terms)?;
                self.timing.set(terms);
                Ok(())
            }

            /// Deterministic; recording a floor only with a floor file.
            fn profile(&self) -> lease_core::Profile {
                let profile = lease_core::Profile::new($name).deterministic();
                if self.floor.is_some() {
                    profile.recording_floor()
                } else {
                    profile
                }
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

            /// The TTL of a grant for `requested` and the floor stored before it (0 without a floor
            /// file). With a floor file, the TTL is at most the window the file's floor may lie
            /// ahead of the clock, and the file's floor is raised to the request's `floor_ms` less
            /// what the grant cut off ([`granted_floor`](lease_core::time::granted_floor)).
            fn grant(
                &self,
                requested: std::time::Duration,
                floor_ms: u64,
            ) -> Result<(std::time::Duration, u64), $crate::StaticLeaseError> {
                let Some(file) = &self.floor else {
                    return Ok((requested, 0));
                };
                let ttl = self.timing.window(requested);
                let floor = lease_core::time::granted_floor(floor_ms, requested, ttl);
                Ok((ttl, file.raise(floor)?))
            }
        }
    };
}

mod backend;
pub mod floor_file;
pub mod hosts;
pub mod statefulset;

pub use backend::{HostListBackend, StatefulSetBackend};
pub use floor_file::{FloorFile, FloorFileError};
pub use hosts::{
    HostListLeaseError, HostListStrategy, IdentifierSource, NodeEntry, NodeMatch, SystemIdentifiers,
};
pub use statefulset::{StatefulSetLeaseError, StatefulSetStrategy};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_the_manager_tells_them_the_terms_are_the_managers_defaults() {
        assert_eq!(
            Timing::DEFAULT_TERMS,
            lease_manager::LeaseConfig::default().terms()
        );
        let timing = Timing::default();
        assert_eq!(timing.margin(), Duration::from_secs(10));
        assert_eq!(
            timing.window(Duration::from_secs(8 * 3600)),
            Duration::from_secs(30)
        );
    }
}
