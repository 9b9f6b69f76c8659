//! The [`Strategy`] trait that coordinators implement, and the types it exchanges.

use core::fmt;
use std::time::Duration;

use machine_id::MachineId;

/// A newly acquired lease: the ID it grants, the strategy's lease handle and the granted TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant<L> {
    /// The machine ID this lease entitles the node to use.
    pub machine_id: MachineId,
    /// The strategy's own handle (row ID and token, key and token, ...), passed back on renew
    /// and release.
    pub lease: L,
    /// How long the coordinator holds the lease for us, counted from when it processed the request.
    pub ttl: Duration,
    /// The timestamp floor stored with this ID *before* this acquisition, in the floors' terms
    /// (0 when none is stored or the strategy stores none): every timestamp any earlier holder
    /// may have issued under the ID is at or below it. See "Timestamp floor" on [`Strategy`].
    pub floor_ms: u64,
    /// The coordinator's own clock when it applied the request (Unix ms), if the strategy reads
    /// it; lets the manager notice a coordinator clock that jumps forward.
    pub coordinator_ms: Option<u64>,
    /// The largest offset between this node's clock and [`coordinator_ms`](Self::coordinator_ms)
    /// that the strategy's own safety rests on (an amnesia hold-off that outlasts the longest
    /// lease by twice this offset, say). The manager refuses a grant whose reading does not
    /// prove its clock within it, and gives up a lease on such a renewal. `None`: no limit.
    pub max_clock_offset: Option<Duration>,
}

impl<L> Grant<L> {
    /// A grant of `machine_id` for `ttl`, with no stored floor and no coordinator clock reading.
    pub const fn new(machine_id: MachineId, lease: L, ttl: Duration) -> Self {
        Self {
            machine_id,
            lease,
            ttl,
            floor_ms: 0,
            coordinator_ms: None,
            max_clock_offset: None,
        }
    }

    /// The same grant, carrying the timestamp floor that was stored with the ID.
    #[must_use]
    pub const fn with_floor(mut self, floor_ms: u64) -> Self {
        self.floor_ms = floor_ms;
        self
    }

    /// The same grant, carrying the coordinator's clock when it applied the request.
    #[must_use]
    pub const fn with_coordinator_ms(mut self, coordinator_ms: u64) -> Self {
        self.coordinator_ms = Some(coordinator_ms);
        self
    }

    /// The same grant, asking the manager to keep this node's clock within `max` of the
    /// coordinator's (see [`max_clock_offset`](Self::max_clock_offset)).
    #[must_use]
    pub const fn with_max_clock_offset(mut self, max: Duration) -> Self {
        self.max_clock_offset = Some(max);
        self
    }

    /// The same grant with another lease handle (for wrappers such as [`DynStrategy`](crate::DynStrategy)).
    pub fn map_lease<M>(self, f: impl FnOnce(L) -> M) -> Grant<M> {
        Grant {
            machine_id: self.machine_id,
            lease: f(self.lease),
            ttl: self.ttl,
            floor_ms: self.floor_ms,
            coordinator_ms: self.coordinator_ms,
            max_clock_offset: self.max_clock_offset,
        }
    }
}

/// A successful renewal: the (possibly updated) lease handle and the new TTL.
///
/// A renewal always keeps the machine ID of the lease it renews.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewal<L> {
    /// The lease handle to use from now on; usually the same value that was renewed.
    pub lease: L,
    /// The TTL granted by this renewal, counted from when the coordinator processed it.
    pub ttl: Duration,
    /// The coordinator's own clock when it applied the renewal (Unix ms), if the strategy
    /// reads it.
    pub coordinator_ms: Option<u64>,
    /// As [`Grant::max_clock_offset`].
    pub max_clock_offset: Option<Duration>,
}

impl<L> Renewal<L> {
    /// A renewal for `ttl`, with no coordinator clock reading.
    pub const fn new(lease: L, ttl: Duration) -> Self {
        Self {
            lease,
            ttl,
            coordinator_ms: None,
            max_clock_offset: None,
        }
    }

    /// The same renewal, carrying the coordinator's clock when it applied the request.
    #[must_use]
    pub const fn with_coordinator_ms(mut self, coordinator_ms: u64) -> Self {
        self.coordinator_ms = Some(coordinator_ms);
        self
    }

    /// As [`Grant::with_max_clock_offset`].
    #[must_use]
    pub const fn with_max_clock_offset(mut self, max: Duration) -> Self {
        self.max_clock_offset = Some(max);
        self
    }

    /// The same renewal with another lease handle.
    pub fn map_lease<M>(self, f: impl FnOnce(L) -> M) -> Renewal<M> {
        Renewal {
            lease: f(self.lease),
            ttl: self.ttl,
            coordinator_ms: self.coordinator_ms,
            max_clock_offset: self.max_clock_offset,
        }
    }
}

/// What kind of failure a strategy reported; generic code branches on this, never on a
/// backend's own error type.
///
/// | kind | retryable | acquire (startup) | acquire (after a loss) | renew |
/// |---|---|---|---|---|
/// | `Lost` | - | retried with backoff | retried | **lease lost**: factories off, reacquire |
/// | `Retry` | yes | retried with backoff | retried | retried until the local deadline |
/// | `Exhausted` | yes | retried with backoff | retried | retried until the local deadline |
/// | `Conflict` | yes | retried with backoff | retried | retried until the local deadline |
/// | `Unsupported` | no | **startup fails** at once | retried (capped backoff) | retried until the local deadline |
/// | `Misconfigured` | no | **startup fails** at once | retried (capped backoff) | retried until the local deadline |
/// | `Other` | yes | retried with backoff | retried | retried until the local deadline |
///
/// Only `Lost` ends a held lease before its local deadline: every other renew failure is
/// *uncertain* (the coordinator may or may not have applied it), and the lease stays usable until
/// its local deadline, which was computed so that it cannot outlive the coordinator's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The coordinator confirms the lease is no longer ours (expired and taken, or unknown token).
    Lost,
    /// The outcome is uncertain (timeout, dropped connection, server busy): try again.
    Retry,
    /// Every machine ID is currently leased.
    Exhausted,
    /// Lost a race for an ID to another node (and ran out of candidates for this attempt).
    Conflict,
    /// The coordinator cannot provide this operation (for example a server without a needed command).
    Unsupported,
    /// The strategy's configuration is wrong (missing variable, bad URL, ID out of range, ...).
    Misconfigured,
    /// Anything else; treated like `Retry`.
    Other,
}

impl ErrorKind {
    /// Whether trying the same operation again may succeed without outside intervention.
    #[must_use]
    pub const fn is_retryable(self) -> bool {
        !matches!(self, Self::Lost | Self::Unsupported | Self::Misconfigured)
    }

    /// A short lowercase name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Lost => "lost",
            Self::Retry => "retry",
            Self::Exhausted => "exhausted",
            Self::Conflict => "conflict",
            Self::Unsupported => "unsupported",
            Self::Misconfigured => "misconfigured",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error a strategy returns: its own type, mapped to a shared [`ErrorKind`].
pub trait LeaseError: std::error::Error + Send + Sync + 'static {
    /// The kind of failure, which decides what the lease manager does next.
    fn kind(&self) -> ErrorKind;
}

impl LeaseError for core::convert::Infallible {
    fn kind(&self) -> ErrorKind {
        match *self {}
    }
}

/// An acquisition: what [`Strategy::acquire`] is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquire {
    /// The lease duration asked for; the strategy may grant less.
    pub requested: Duration,
    /// The acquirer's nonce clock, in the floors' terms: among free IDs, prefer one whose
    /// stored floor is below it.
    pub now_ms: u64,
    /// The acquirer's own bound of what it will issue under the ID, in the floors' terms: the
    /// claimed ID's floor is raised to at least this in the same atomic write as the claim.
    pub floor_ms: u64,
}

impl Acquire {
    /// An acquisition of `requested`, at `now_ms`, recording `floor_ms` (see "Timestamp floor"
    /// on [`Strategy`]).
    #[must_use]
    pub const fn new(requested: Duration, now_ms: u64, floor_ms: u64) -> Self {
        Self {
            requested,
            now_ms,
            floor_ms,
        }
    }
}

/// A renewal: what [`Strategy::renew`] is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renew {
    /// The lease duration asked for, from when the coordinator applies the renewal.
    pub requested: Duration,
    /// The holder's bound of what it will issue until the renewed lease ends, in the floors'
    /// terms: the ID's floor is raised to at least this, only while the lease is ours.
    pub floor_ms: u64,
}

impl Renew {
    /// A renewal for `requested`, recording `floor_ms`.
    #[must_use]
    pub const fn new(requested: Duration, floor_ms: u64) -> Self {
        Self {
            requested,
            floor_ms,
        }
    }
}

/// A release: what [`Strategy::release`] is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Release {
    /// How long the ID stays blocked after the release (see "Handover guard" on [`Strategy`]).
    pub guard: Duration,
    /// The exact bound of what the holder issued under the ID, in the floors' terms: stored
    /// as the ID's floor by the token-matched release, or raised to when the lease is no
    /// longer ours.
    pub floor_ms: u64,
}

impl Release {
    /// A release blocking the ID for `guard`, recording `floor_ms`.
    #[must_use]
    pub const fn new(guard: Duration, floor_ms: u64) -> Self {
        Self { guard, floor_ms }
    }
}

/// What a strategy is: its name and the properties the lease manager plans around.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Profile {
    /// A short name for logs and metrics, for example `"postgres"` or `"statefulset"`.
    pub name: &'static str,
    /// Whether the strategy stores a timestamp floor with each ID (see "Timestamp floor" on
    /// [`Strategy`]). Without it, every grant reports floor 0 and a successor's clock must lag
    /// its predecessor's by less than the margin.
    pub records_floor: bool,
    /// Whether the strategy always yields the same ID for this node (environment variable,
    /// host list). A deterministic strategy is not asked to reacquire after a loss: it would
    /// only hand back the ID that was just lost.
    pub deterministic: bool,
}

impl Profile {
    /// A strategy named `name` that stores no floor and is not deterministic.
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            records_floor: false,
            deterministic: false,
        }
    }

    /// The same profile, storing a timestamp floor with each ID.
    #[must_use]
    pub const fn recording_floor(mut self) -> Self {
        self.records_floor = true;
        self
    }

    /// The same profile, always yielding the same ID for this node.
    #[must_use]
    pub const fn deterministic(mut self) -> Self {
        self.deterministic = true;
        self
    }
}

/// The lease timing the manager will run a strategy with, handed to [`Strategy::check_terms`]
/// before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseTerms {
    /// The duration asked for on every acquire and renew.
    pub lease_duration: Duration,
    /// A grant below this is refused as an illegal TTL (and, refused, still blocks its ID).
    pub min_ttl: Duration,
    /// The safety margin subtracted from every TTL: the clock skew tolerated between a node and
    /// the coordinator, and between a releaser and its successor.
    pub margin: Duration,
    /// The longest single strategy call the manager waits for (`None`: no limit): a strategy
    /// whose call waits (a static one waits out the margin) must finish within it.
    pub call_timeout: Option<Duration>,
    /// How long the manager waits for its first lease before startup fails (`None`: forever).
    pub acquire_timeout: Option<Duration>,
}

impl LeaseTerms {
    /// Terms of `lease_duration`, `min_ttl` and `margin`, with no call or acquire timeout.
    #[must_use]
    pub const fn new(lease_duration: Duration, min_ttl: Duration, margin: Duration) -> Self {
        Self {
            lease_duration,
            min_ttl,
            margin,
            call_timeout: None,
            acquire_timeout: None,
        }
    }

    /// The same terms, with the manager's call and acquire timeouts.
    #[must_use]
    pub const fn with_timeouts(
        mut self,
        call_timeout: Option<Duration>,
        acquire_timeout: Option<Duration>,
    ) -> Self {
        self.call_timeout = call_timeout;
        self.acquire_timeout = acquire_timeout;
        self
    }
}

/// A machine-ID coordinator: hands out, renews and releases exclusive leases on IDs `0..=511`.
///
/// This is the trait third parties implement; see the crate docs, "For implementers", for the
/// contract and an example. Each call takes one `#[non_exhaustive]` request struct, so new
/// inputs arrive as new fields without changing a signature.
///
/// # Contract
///
/// - **Exclusivity.** While a lease is valid on the coordinator, no other acquirer may be given
///   the same machine ID.
/// - **Stable ID.** Renewing a lease never changes its machine ID.
/// - **TTL from the coordinator's clock.** The granted `ttl` counts from when the coordinator
///   applied the request (not before it was received); the manager subtracts a safety margin and
///   counts from when it *sent* the request, so clock skew up to the margin is tolerated.
/// - **Lost vs retry.** `renew` returns an error of kind [`ErrorKind::Lost`] only when the
///   coordinator positively knows the lease is no longer this holder's (expired and re-acquired,
///   unknown token). A timeout or dropped connection is [`ErrorKind::Retry`]: the renewal may or
///   may not have been applied. A retried renewal must be idempotent (match on the lease's
///   token, not on a version that the lost reply already bumped).
/// - **Handover guard on release.** `release` must not free the ID *now*: it must leave the ID
///   blocked for [`Release::guard`] more (set its expiry to the coordinator's `now + guard`, or
///   a TTL of `guard`). The releaser's last nonce may carry a timestamp up to the safety margin
///   ahead of a successor's clock; the guard keeps a successor's first nonce after it. Release
///   is best effort and must never free a lease that is not this holder's.
///
/// # Timestamp floor
///
/// Nodes' wall clocks disagree: a successor whose clock lags its predecessor's by more than the
/// margin would issue timestamps its predecessor already issued under the same ID. A strategy
/// whose [`Profile::records_floor`] is `true` removes that condition by storing, with each
/// machine ID, a *timestamp floor*: an upper bound of every timestamp any holder of the ID may
/// have issued, in milliseconds as the nonces carry them plus the default epoch (2025-01-01),
/// which for nonces on the default epoch is the Unix millisecond on the holders' own clocks. A
/// strategy stores and compares floors as numbers; the lease manager converts them for
/// factories on another epoch.
///
/// - `acquire` claims an ID and, in the same atomic write, raises its floor to at least
///   [`Acquire::floor_ms`]; the [`Grant`] reports the floor stored *before* the write in
///   [`Grant::floor_ms`]. Among free IDs it prefers one whose floor is below
///   [`Acquire::now_ms`].
/// - `renew` raises the floor to at least [`Renew::floor_ms`] in the same atomic write that
///   extends the lease, and only if the lease is still ours.
/// - `release` sets the floor to [`Release::floor_ms`] (the exact bound of what was issued,
///   which the manager computes after disabling its factories and which is never below the
///   floor the lease was granted with), token-matched, in the same write that releases. When
///   the lease is no longer ours, it still *raises* the ID's floor to at least that (never
///   lowers it) and touches nothing else: the manager also releases a lease it lost (renewal
///   answered `Lost`, deadline passed), so that a coordinator that forgot the lease, and the
///   floor with it (a restart without persistence, a failover to a replica that missed the
///   last writes), learns again what was issued under the ID before its amnesia guard lets a
///   successor in.
/// - The floor survives expiry and release (it is not part of the lease's TTL) and is never
///   lowered by anything but the holder's own release.
/// - A strategy that grants less than was asked may record `floor_ms - (requested - ttl)`
///   ([`time::granted_floor`](crate::time::granted_floor)) instead: the manager's deadline never
///   exceeds `sent + ttl - margin` ([`time::local_deadline`](crate::time::local_deadline)), which
///   that still bounds.
///
/// The manager starts its factories strictly above the granted floor, so their timestamps never
/// meet an earlier holder's, whatever the clocks. A strategy that cannot store a floor ignores
/// the requests' floors, reports 0 and says so in its [`Profile`]: it keeps the older condition
/// on clocks (the static strategies, which cannot tell when a predecessor stopped, grant their
/// first lease a margin after it is asked for: a successor is safe while its clock lags by less
/// than the margin and the time between the predecessor's stop and its own start).
pub trait Strategy: Send + Sync {
    /// The strategy's lease handle (for example an ID and a random token).
    type Lease: Send + Sync + 'static;
    /// The strategy's own error type.
    type Error: LeaseError;

    /// Acquires a lease on some free machine ID (see "Timestamp floor" for the floor).
    fn acquire(
        &self,
        request: Acquire,
    ) -> impl Future<Output = Result<Grant<Self::Lease>, Self::Error>> + Send;

    /// Extends `lease`; an error of kind [`ErrorKind::Lost`] when the coordinator confirms it
    /// is no longer ours.
    fn renew(
        &self,
        lease: &Self::Lease,
        request: Renew,
    ) -> impl Future<Output = Result<Renewal<Self::Lease>, Self::Error>> + Send;

    /// Gives `lease` back, best effort, leaving the ID blocked for the request's guard (see
    /// "Handover guard") and recording its floor.
    fn release(
        &self,
        lease: &Self::Lease,
        request: Release,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Checks that this strategy can serve leases on `terms`, before the manager starts: for
    /// example that its longest grant is not below `terms.min_ttl`, which would make every
    /// grant illegal (and, refused, still block an ID each time). A strategy that plans with
    /// the margin (a static one waits it out before its first grant) keeps it from here.
    ///
    /// # Errors
    /// The strategy's own error (kind [`ErrorKind::Misconfigured`]) naming what to change.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Self::Error>;

    /// The strategy's name and properties.
    fn profile(&self) -> Profile;
}

/// Forwards every method.
macro_rules! forward_strategy {
    ($ty:ty) => {
        impl<S: Strategy + ?Sized> Strategy for $ty {
            type Lease = S::Lease;
            type Error = S::Error;
            fn acquire(
                &self,
                request: Acquire,
            ) -> impl Future<Output = Result<Grant<Self::Lease>, Self::Error>> + Send {
                (**self).acquire(request)
            }
            fn renew(
                &self,
                lease: &Self::Lease,
                request: Renew,
            ) -> impl Future<Output = Result<Renewal<Self::Lease>, Self::Error>> + Send {
                (**self).renew(lease, request)
            }
            fn release(
                &self,
                lease: &Self::Lease,
                request: Release,
            ) -> impl Future<Output = Result<(), Self::Error>> + Send {
                (**self).release(lease, request)
            }
            fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Self::Error> {
                (**self).check_terms(terms)
            }
            fn profile(&self) -> Profile {
                (**self).profile()
            }
        }
    };
}

forward_strategy!(&S);
forward_strategy!(Box<S>);
forward_strategy!(std::sync::Arc<S>);
