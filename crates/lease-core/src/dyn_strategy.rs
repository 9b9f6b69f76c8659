//! Object-safe companion of [`Strategy`], for choosing a coordinator at run time.

use core::any::Any;
use core::fmt;
use core::pin::Pin;
use std::time::Duration;

use crate::strategy::{ErrorKind, Grant, LeaseError, Renewal, Strategy};

/// A boxed, `Send` future borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A type-erased lease handle, as used by [`DynStrategy`].
pub struct AnyLease(Box<dyn Any + Send + Sync>);

impl AnyLease {
    /// Erases `lease`.
    pub fn new<L: Send + Sync + 'static>(lease: L) -> Self {
        Self(Box::new(lease))
    }

    /// The lease as `L`, if that is what it holds.
    #[must_use]
    pub fn downcast_ref<L: 'static>(&self) -> Option<&L> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for AnyLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyLease(..)")
    }
}

/// A type-erased strategy error; keeps the original error as its source and its kind.
pub struct DynError(Box<dyn LeaseError>);

impl DynError {
    /// Erases `error`.
    pub fn new<E: LeaseError>(error: E) -> Self {
        Self(Box::new(error))
    }

    /// The original error.
    #[must_use]
    pub fn inner(&self) -> &(dyn LeaseError + 'static) {
        &*self.0
    }
}

impl fmt::Debug for DynError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for DynError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for DynError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl LeaseError for DynError {
    fn kind(&self) -> ErrorKind {
        self.0.kind()
    }
}

/// A lease of the wrong type was passed to a [`DynStrategy`] (a lease from another strategy).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("lease handle belongs to a different strategy than {strategy}")]
#[non_exhaustive]
pub struct ForeignLease {
    /// The strategy that received it.
    pub strategy: &'static str,
}

impl LeaseError for ForeignLease {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Misconfigured
    }
}

/// The object-safe form of [`Strategy`]: boxed futures, an erased lease and an erased error.
///
/// Every [`Strategy`] implements it, and `Box<dyn DynStrategy>` / `Arc<dyn DynStrategy>`
/// implement [`Strategy`] again, so a coordinator chosen from configuration at run time can be
/// handed to anything that takes a `Strategy`, without `async-trait`:
///
/// ```
/// use lease_core::{BoxStrategy, DynStrategy, Strategy};
/// # use lease_core::{Grant, Renewal, MachineId};
/// # use std::time::Duration;
/// # struct Fixed;
/// # impl Strategy for Fixed {
/// #     type Lease = ();
/// #     type Error = core::convert::Infallible;
/// #     async fn acquire(&self, _: Duration) -> Result<Grant<()>, Self::Error> {
/// #         Ok(Grant::new(MachineId::new(7).unwrap(), (), Duration::from_secs(3600)))
/// #     }
/// #     async fn renew(&self, _: &(), _: Duration) -> Result<Renewal<()>, Self::Error> {
/// #         Ok(Renewal::new((), Duration::from_secs(3600)))
/// #     }
/// #     async fn release(&self, _: &(), _: Duration) -> Result<(), Self::Error> { Ok(()) }
/// #     fn deterministic(&self) -> bool { true }
/// #     fn name(&self) -> &'static str { "fixed" }
/// # }
/// fn pick(_from_config: &str) -> BoxStrategy {
///     Box::new(Fixed)
/// }
/// let strategy = pick("fixed");
/// assert_eq!(Strategy::name(&strategy), "fixed");
/// let grant = futures::executor::block_on(strategy.acquire(Duration::from_secs(60))).unwrap();
/// assert_eq!(grant.machine_id.get(), 7);
/// ```
pub trait DynStrategy: Send + Sync {
    /// [`Strategy::acquire_with_floor`], boxed.
    fn acquire_boxed(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> BoxFuture<'_, Result<Grant<AnyLease>, DynError>>;
    /// [`Strategy::renew_with_floor`], boxed.
    fn renew_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        requested: Duration,
        floor_ms: u64,
    ) -> BoxFuture<'a, Result<Renewal<AnyLease>, DynError>>;
    /// [`Strategy::release_with_floor`] with `Some(floor_ms)`, boxed; [`Strategy::release`]
    /// with `None`, which leaves a recorded floor as it is. A floor of 0 is a floor: a backend
    /// stores it, and the next holder of the ID starts from its own clock again.
    fn release_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        guard: Duration,
        floor_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<(), DynError>>;
    /// [`Strategy::check_config`].
    fn check_config_boxed(&self, config: &crate::LeaseConfig) -> Result<(), DynError>;
    /// [`Strategy::records_floor`].
    fn stores_floor(&self) -> bool;
    /// [`Strategy::deterministic`].
    fn is_deterministic(&self) -> bool;
    /// [`Strategy::name`].
    fn strategy_name(&self) -> &'static str;
}

/// A boxed strategy chosen at run time.
pub type BoxStrategy = Box<dyn DynStrategy>;

impl<S: Strategy> DynStrategy for S {
    fn acquire_boxed(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> BoxFuture<'_, Result<Grant<AnyLease>, DynError>> {
        Box::pin(async move {
            let grant = self
                .acquire_with_floor(requested, now_ms, floor_ms)
                .await
                .map_err(DynError::new)?;
            Ok(grant.map_lease(AnyLease::new))
        })
    }

    fn renew_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        requested: Duration,
        floor_ms: u64,
    ) -> BoxFuture<'a, Result<Renewal<AnyLease>, DynError>> {
        Box::pin(async move {
            let lease = self.own_lease(lease)?;
            let renewal = self
                .renew_with_floor(lease, requested, floor_ms)
                .await
                .map_err(DynError::new)?;
            Ok(renewal.map_lease(AnyLease::new))
        })
    }

    fn release_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        guard: Duration,
        floor_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<(), DynError>> {
        Box::pin(async move {
            let lease = self.own_lease(lease)?;
            let released = match floor_ms {
                Some(floor_ms) => self.release_with_floor(lease, guard, floor_ms).await,
                None => self.release(lease, guard).await,
            };
            released.map_err(DynError::new)
        })
    }

    fn check_config_boxed(&self, config: &crate::LeaseConfig) -> Result<(), DynError> {
        self.check_config(config).map_err(DynError::new)
    }

    fn stores_floor(&self) -> bool {
        self.records_floor()
    }

    fn is_deterministic(&self) -> bool {
        self.deterministic()
    }

    fn strategy_name(&self) -> &'static str {
        self.name()
    }
}

/// The lease handle of `S` inside an erased lease, or why it is not one.
trait OwnLease: Strategy {
    fn own_lease<'a>(&self, lease: &'a AnyLease) -> Result<&'a Self::Lease, DynError> {
        lease.downcast_ref::<Self::Lease>().ok_or_else(|| {
            DynError::new(ForeignLease {
                strategy: self.name(),
            })
        })
    }
}

impl<S: Strategy> OwnLease for S {}

impl Strategy for dyn DynStrategy {
    type Lease = AnyLease;
    type Error = DynError;

    fn acquire(
        &self,
        requested: Duration,
    ) -> impl Future<Output = Result<Grant<AnyLease>, DynError>> + Send {
        self.acquire_boxed(requested, 0, 0)
    }

    // `async fn` unifies the two borrow lifetimes that the boxed future needs as one.
    async fn renew(
        &self,
        lease: &AnyLease,
        requested: Duration,
    ) -> Result<Renewal<AnyLease>, DynError> {
        self.renew_boxed(lease, requested, 0).await
    }

    async fn release(&self, lease: &AnyLease, guard: Duration) -> Result<(), DynError> {
        self.release_boxed(lease, guard, None).await
    }

    fn check_config(&self, config: &crate::LeaseConfig) -> Result<(), DynError> {
        self.check_config_boxed(config)
    }

    fn records_floor(&self) -> bool {
        self.stores_floor()
    }

    fn acquire_with_floor(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> impl Future<Output = Result<Grant<AnyLease>, DynError>> + Send {
        self.acquire_boxed(requested, now_ms, floor_ms)
    }

    async fn renew_with_floor(
        &self,
        lease: &AnyLease,
        requested: Duration,
        floor_ms: u64,
    ) -> Result<Renewal<AnyLease>, DynError> {
        self.renew_boxed(lease, requested, floor_ms).await
    }

    async fn release_with_floor(
        &self,
        lease: &AnyLease,
        guard: Duration,
        floor_ms: u64,
    ) -> Result<(), DynError> {
        self.release_boxed(lease, guard, Some(floor_ms)).await
    }

    fn deterministic(&self) -> bool {
        self.is_deterministic()
    }

    fn name(&self) -> &'static str {
        self.strategy_name()
    }
}
