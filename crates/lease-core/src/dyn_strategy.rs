//! Object-safe companion of [`Strategy`], for choosing a coordinator at run time.

use core::any::Any;
use core::fmt;
use core::pin::Pin;

use crate::strategy::{
    Acquire, ErrorKind, Grant, LeaseError, LeaseTerms, Profile, Release, Renew, Renewal, Strategy,
};

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
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ForeignLease {
    /// The strategy that received it.
    pub strategy: &'static str,
}

impl fmt::Display for ForeignLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease handle belongs to a different strategy than {}",
            self.strategy
        )
    }
}

impl std::error::Error for ForeignLease {}

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
/// use lease_core::{Acquire, BoxStrategy, DynStrategy, Strategy};
/// # use lease_core::{Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal};
/// # use std::time::Duration;
/// # struct Fixed;
/// # impl Strategy for Fixed {
/// #     type Lease = ();
/// #     type Error = core::convert::Infallible;
/// #     async fn acquire(&self, _: Acquire) -> Result<Grant<()>, Self::Error> {
/// #         Ok(Grant::new(MachineId::new(7).unwrap(), (), Duration::from_secs(3600)))
/// #     }
/// #     async fn renew(&self, _: &(), _: Renew) -> Result<Renewal<()>, Self::Error> {
/// #         Ok(Renewal::new((), Duration::from_secs(3600)))
/// #     }
/// #     async fn release(&self, _: &(), _: Release) -> Result<(), Self::Error> { Ok(()) }
/// #     fn check_terms(&self, _: &LeaseTerms) -> Result<(), Self::Error> { Ok(()) }
/// #     fn profile(&self) -> Profile { Profile::new("fixed").deterministic() }
/// # }
/// fn pick(_from_config: &str) -> BoxStrategy {
///     Box::new(Fixed)
/// }
/// let strategy = pick("fixed");
/// assert_eq!(strategy.profile().name, "fixed");
/// let request = Acquire::new(Duration::from_secs(60), 0, 0);
/// let grant = futures::executor::block_on(strategy.acquire(request)).unwrap();
/// assert_eq!(grant.machine_id.get(), 7);
/// ```
pub trait DynStrategy: Send + Sync {
    /// [`Strategy::acquire`], boxed.
    fn acquire_boxed(&self, request: Acquire) -> BoxFuture<'_, Result<Grant<AnyLease>, DynError>>;
    /// [`Strategy::renew`], boxed.
    fn renew_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        request: Renew,
    ) -> BoxFuture<'a, Result<Renewal<AnyLease>, DynError>>;
    /// [`Strategy::release`], boxed.
    fn release_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        request: Release,
    ) -> BoxFuture<'a, Result<(), DynError>>;
    /// [`Strategy::check_terms`].
    fn check_terms_boxed(&self, terms: &LeaseTerms) -> Result<(), DynError>;
    /// [`Strategy::profile`].
    fn profile_boxed(&self) -> Profile;
}

/// A boxed strategy chosen at run time.
pub type BoxStrategy = Box<dyn DynStrategy>;

impl<S: Strategy> DynStrategy for S {
    fn acquire_boxed(&self, request: Acquire) -> BoxFuture<'_, Result<Grant<AnyLease>, DynError>> {
        Box::pin(async move {
            let grant = self.acquire(request).await.map_err(DynError::new)?;
            Ok(grant.map_lease(AnyLease::new))
        })
    }

    fn renew_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        request: Renew,
    ) -> BoxFuture<'a, Result<Renewal<AnyLease>, DynError>> {
        Box::pin(async move {
            let lease = own_lease(self, lease)?;
            let renewal = self.renew(lease, request).await.map_err(DynError::new)?;
            Ok(renewal.map_lease(AnyLease::new))
        })
    }

    fn release_boxed<'a>(
        &'a self,
        lease: &'a AnyLease,
        request: Release,
    ) -> BoxFuture<'a, Result<(), DynError>> {
        Box::pin(async move {
            let lease = own_lease(self, lease)?;
            self.release(lease, request).await.map_err(DynError::new)
        })
    }

    fn check_terms_boxed(&self, terms: &LeaseTerms) -> Result<(), DynError> {
        self.check_terms(terms).map_err(DynError::new)
    }

    fn profile_boxed(&self) -> Profile {
        self.profile()
    }
}

/// The lease handle of `strategy` inside an erased lease, or why it is not one.
fn own_lease<'a, S: Strategy>(strategy: &S, lease: &'a AnyLease) -> Result<&'a S::Lease, DynError> {
    lease.downcast_ref().ok_or_else(|| {
        let strategy = strategy.profile().name;
        DynError::new(ForeignLease { strategy })
    })
}

impl Strategy for dyn DynStrategy {
    type Lease = AnyLease;
    type Error = DynError;

    fn acquire(
        &self,
        request: Acquire,
    ) -> impl Future<Output = Result<Grant<AnyLease>, DynError>> + Send {
        self.acquire_boxed(request)
    }

    // `async fn` unifies the two borrow lifetimes that the boxed future needs as one.
    async fn renew(&self, lease: &AnyLease, request: Renew) -> Result<Renewal<AnyLease>, DynError> {
        self.renew_boxed(lease, request).await
    }

    async fn release(&self, lease: &AnyLease, request: Release) -> Result<(), DynError> {
        self.release_boxed(lease, request).await
    }

    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), DynError> {
        self.check_terms_boxed(terms)
    }

    fn profile(&self) -> Profile {
        self.profile_boxed()
    }
}
