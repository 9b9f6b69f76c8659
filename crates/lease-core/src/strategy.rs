//! The [`Strategy`] trait that coordinators implement, and the types it exchanges.

use core::fmt;
use std::time::Duration;

use nonce_core::MachineId;

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
    /// The timestamp floor stored with this ID *before* this acquisition (in the floors' terms,
    /// see "Timestamp floor" on [`Strategy`]; 0 when none
    /// is stored or the strategy stores none): every timestamp any earlier holder may have
    /// issued under the ID is at or below it. See "Timestamp floor" on [`Strategy`].
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

/// A strategy failure reduced to its kind and a message: what the state machine consumes, and a
/// ready-made error type for simple strategies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {reason}")]
#[non_exhaustive]
pub struct Failure {
    /// What kind of failure this is.
    pub kind: ErrorKind,
    /// A human-readable reason, including the source chain of the original error.
    pub reason: String,
}

impl Failure {
    /// A failure of `kind` with `reason`.
    pub fn new(kind: ErrorKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }

    /// Reduces a strategy error to its kind and its message followed by its source chain, each
    /// cause said once (see [`error_chain`]).
    pub fn from_error<E: LeaseError + ?Sized>(error: &E) -> Self {
        Self {
            kind: error.kind(),
            reason: join_chain(error.to_string(), error.source(), &mut |_| None),
        }
    }

    /// A call that did not answer within `timeout`: uncertain, so [`ErrorKind::Retry`].
    #[must_use]
    pub fn timeout(timeout: Duration) -> Self {
        Self::new(
            ErrorKind::Retry,
            format!("timed out after {} ms", timeout.as_millis()),
        )
    }
}

impl LeaseError for Failure {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// An error and its sources on one line, `: `-separated, each cause said once: many errors
/// already quote their source in their own message, and a cause whose text an earlier part
/// contains is left out. Empty messages are left out too.
///
/// ```
/// use lease_core::error_chain;
///
/// #[derive(Debug)]
/// struct Connect(std::io::Error);
/// impl std::fmt::Display for Connect {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "cannot connect: {}", self.0) // quotes its source
///     }
/// }
/// impl std::error::Error for Connect {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let error = Connect(std::io::Error::other("connection refused"));
/// assert_eq!(error_chain(&error), "cannot connect: connection refused");
/// ```
#[must_use]
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    error_chain_with(error, |_| None)
}

/// [`error_chain`], with `own_words` saying some errors of the chain its own way: for each
/// error, from the outermost, `Some(text)` says `text` instead of the error's message *and its
/// sources* (the chain ends there), `None` says the message and goes on to the source. Used to
/// shorten an error whose sources only repeat it in more detail (a database error and the
/// server's own source line, say).
#[must_use]
pub fn error_chain_with(
    error: &(dyn std::error::Error + 'static),
    mut own_words: impl FnMut(&(dyn std::error::Error + 'static)) -> Option<String>,
) -> String {
    match own_words(error) {
        Some(text) => join_chain(text, None, &mut own_words),
        None => join_chain(error.to_string(), error.source(), &mut own_words),
    }
}

/// `first`, then each error from `next` down the source chain, each said once.
fn join_chain(
    first: String,
    mut next: Option<&(dyn std::error::Error + 'static)>,
    own_words: &mut dyn FnMut(&(dyn std::error::Error + 'static)) -> Option<String>,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut say = |text: String| {
        if !text.is_empty() && !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
    };
    say(first);
    while let Some(error) = next {
        if let Some(text) = own_words(error) {
            say(text);
            break;
        }
        say(error.to_string());
        next = error.source();
    }
    parts.join(": ")
}

/// A machine-ID coordinator: hands out, renews and releases exclusive leases on IDs `0..=511`.
///
/// This is the trait third parties implement; see the crate docs, "For implementers", for the
/// contract and an example. It is deliberately small: new capabilities arrive as defaulted
/// methods, never as changed signatures.
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
///   blocked for `guard` more (set its expiry to the coordinator's `now + guard`, or a TTL of
///   `guard`). The releaser's last nonce may carry a timestamp up to the safety margin ahead of
///   a successor's clock; the guard keeps a successor's first nonce after it. Release is best
///   effort and must never free a lease that is not this holder's.
///
/// # Timestamp floor
///
/// Nodes' wall clocks disagree: a successor whose clock lags its predecessor's by more than the
/// margin would issue timestamps its predecessor already issued under the same ID. A strategy
/// that answers `true` to [`records_floor`](Strategy::records_floor) removes that condition by
/// storing, with each machine ID, a *timestamp floor*: an upper bound of every timestamp any
/// holder of the ID may have issued, in milliseconds as the nonces carry them plus the default
/// epoch (2025-01-01), which for nonces on the default epoch is the Unix millisecond on the
/// holders' own clocks. A strategy stores and compares floors as numbers; the lease manager
/// converts them for factories on another epoch.
///
/// - [`acquire_with_floor`](Strategy::acquire_with_floor) claims an ID and, in the same atomic
///   write, raises its floor to at least `floor_ms` (the acquirer's own bound); the [`Grant`]
///   reports the floor stored *before* the write in [`Grant::floor_ms`]. Among free IDs it
///   prefers one whose floor is below the acquirer's `now_ms`.
/// - [`renew_with_floor`](Strategy::renew_with_floor) raises the floor to at least `floor_ms`
///   in the same atomic write that extends the lease, and only if the lease is still ours.
/// - [`release_with_floor`](Strategy::release_with_floor) sets the floor to `floor_ms` (the
///   exact bound of what was issued, which the manager computes after disabling its factories
///   and which is never below the floor the lease was granted with), token-matched, in the same
///   write that releases. When the lease is no longer ours, it still *raises* the ID's floor to
///   at least `floor_ms` (never lowers it) and touches nothing else: the manager also releases
///   a lease it lost (renewal answered `Lost`, deadline passed), so that a coordinator that
///   forgot the lease, and the floor with it (a restart without persistence, a failover to a
///   replica that missed the last writes), learns again what was issued under the ID before
///   its amnesia guard lets a successor in.
/// - The floor survives expiry and release (it is not part of the lease's TTL) and is never
///   lowered by anything but the holder's own `release_with_floor`. The plain
///   [`release`](Strategy::release) leaves it as stored: a wrapper must forward it as `release`,
///   never as `release_with_floor(.., 0)`, which stores 0.
/// - A strategy that grants less than was asked may record `floor_ms - (requested - ttl)`
///   ([`time::granted_floor`](crate::time::granted_floor)) instead: the manager's deadline never
///   exceeds `sent + ttl - margin` ([`time::local_deadline`](crate::time::local_deadline)), which
///   that still bounds.
///
/// The manager starts its factories strictly above the granted floor, so their timestamps never
/// meet an earlier holder's, whatever the clocks. The defaults forward to the floor-less
/// methods and report a floor of 0: a strategy that cannot store one keeps the older condition
/// on clocks (the static strategies, which cannot tell when a predecessor stopped, grant their
/// first lease a margin after it is asked for: a successor is safe while its clock lags by less
/// than the margin and the time between the predecessor's stop and its own start).
pub trait Strategy: Send + Sync {
    /// The strategy's lease handle (for example an ID and a random token).
    type Lease: Send + Sync + 'static;
    /// The strategy's own error type.
    type Error: LeaseError;

    /// Acquires a lease on some free machine ID, asking for `requested` as its duration.
    fn acquire(
        &self,
        requested: Duration,
    ) -> impl Future<Output = Result<Grant<Self::Lease>, Self::Error>> + Send;

    /// Extends `lease` by `requested`; an error of kind [`ErrorKind::Lost`] when the coordinator
    /// confirms it is no longer ours.
    fn renew(
        &self,
        lease: &Self::Lease,
        requested: Duration,
    ) -> impl Future<Output = Result<Renewal<Self::Lease>, Self::Error>> + Send;

    /// Gives `lease` back, best effort, leaving the ID blocked for `guard` (see "Handover guard").
    fn release(
        &self,
        lease: &Self::Lease,
        guard: Duration,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Checks that this strategy can serve leases of `config`, before the manager starts: for
    /// example that its longest grant is not below `config.min_ttl()`, which would make every
    /// grant illegal (and, refused, still block an ID each time). The default accepts every
    /// configuration.
    ///
    /// # Errors
    /// The strategy's own error (kind [`ErrorKind::Misconfigured`]) naming what to change.
    fn check_config(&self, config: &crate::LeaseConfig) -> Result<(), Self::Error> {
        let _ = config;
        Ok(())
    }

    /// Whether this strategy stores a timestamp floor with each ID (see "Timestamp floor").
    /// `false` by default; a strategy that overrides the `*_with_floor` methods answers `true`.
    fn records_floor(&self) -> bool {
        false
    }

    /// [`acquire`](Strategy::acquire), recording a timestamp floor: prefer a free ID whose
    /// stored floor is below `now_ms` (the acquirer's nonce clock), raise the claimed ID's
    /// floor to at least `floor_ms` in the same atomic write, and report the floor stored
    /// before it in [`Grant::floor_ms`]. The default ignores both and reports no floor.
    fn acquire_with_floor(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> impl Future<Output = Result<Grant<Self::Lease>, Self::Error>> + Send {
        let _ = (now_ms, floor_ms);
        self.acquire(requested)
    }

    /// [`renew`](Strategy::renew), raising the lease's floor to at least `floor_ms` in the same
    /// atomic write, only while the lease is ours. The default ignores the floor.
    fn renew_with_floor(
        &self,
        lease: &Self::Lease,
        requested: Duration,
        floor_ms: u64,
    ) -> impl Future<Output = Result<Renewal<Self::Lease>, Self::Error>> + Send {
        let _ = floor_ms;
        self.renew(lease, requested)
    }

    /// [`release`](Strategy::release), setting the lease's floor to `floor_ms` in the same
    /// token-matched write; when the lease is no longer ours, raising the ID's floor to at least
    /// `floor_ms` and nothing else (see "Timestamp floor"). The default ignores the floor.
    fn release_with_floor(
        &self,
        lease: &Self::Lease,
        guard: Duration,
        floor_ms: u64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = floor_ms;
        self.release(lease, guard)
    }

    /// Whether this strategy always yields the same ID for this node (environment variable,
    /// host list). A deterministic strategy is not asked to reacquire after a loss: it would
    /// only hand back the ID that was just lost.
    fn deterministic(&self) -> bool {
        false
    }

    /// A short name for logs and metrics, for example `"postgres"` or `"statefulset"`.
    fn name(&self) -> &'static str;
}

/// Forwards every method, defaulted ones included (a default here would drop the floor).
macro_rules! forward_strategy {
    ($ty:ty) => {
        impl<S: Strategy + ?Sized> Strategy for $ty {
            type Lease = S::Lease;
            type Error = S::Error;
            fn acquire(
                &self,
                requested: Duration,
            ) -> impl Future<Output = Result<Grant<Self::Lease>, Self::Error>> + Send {
                (**self).acquire(requested)
            }
            fn renew(
                &self,
                lease: &Self::Lease,
                requested: Duration,
            ) -> impl Future<Output = Result<Renewal<Self::Lease>, Self::Error>> + Send {
                (**self).renew(lease, requested)
            }
            fn release(
                &self,
                lease: &Self::Lease,
                guard: Duration,
            ) -> impl Future<Output = Result<(), Self::Error>> + Send {
                (**self).release(lease, guard)
            }
            fn check_config(&self, config: &crate::LeaseConfig) -> Result<(), Self::Error> {
                (**self).check_config(config)
            }
            fn records_floor(&self) -> bool {
                (**self).records_floor()
            }
            fn acquire_with_floor(
                &self,
                requested: Duration,
                now_ms: u64,
                floor_ms: u64,
            ) -> impl Future<Output = Result<Grant<Self::Lease>, Self::Error>> + Send {
                (**self).acquire_with_floor(requested, now_ms, floor_ms)
            }
            fn renew_with_floor(
                &self,
                lease: &Self::Lease,
                requested: Duration,
                floor_ms: u64,
            ) -> impl Future<Output = Result<Renewal<Self::Lease>, Self::Error>> + Send {
                (**self).renew_with_floor(lease, requested, floor_ms)
            }
            fn release_with_floor(
                &self,
                lease: &Self::Lease,
                guard: Duration,
                floor_ms: u64,
            ) -> impl Future<Output = Result<(), Self::Error>> + Send {
                (**self).release_with_floor(lease, guard, floor_ms)
            }
            fn deterministic(&self) -> bool {
                (**self).deterministic()
            }
            fn name(&self) -> &'static str {
                (**self).name()
            }
        }
    };
}

forward_strategy!(&S);
forward_strategy!(Box<S>);
forward_strategy!(std::sync::Arc<S>);

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and an optional source, quoting it or not.
    #[derive(Debug)]
    struct Layer {
        message: &'static str,
        quotes_source: bool,
        source: Option<Box<Layer>>,
    }

    impl Layer {
        fn new(message: &'static str, quotes_source: bool, source: Option<Layer>) -> Self {
            Self {
                message,
                quotes_source,
                source: source.map(Box::new),
            }
        }
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.message)?;
            match &self.source {
                Some(source) if self.quotes_source => write!(f, ": {source}"),
                _ => Ok(()),
            }
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source.as_deref().map(|s| s as _)
        }
    }

    impl LeaseError for Layer {
        fn kind(&self) -> ErrorKind {
            ErrorKind::Retry
        }
    }

    /// `renew failed: cannot connect: connection refused`, where `cannot connect` quotes
    /// `connection refused` and `renew failed` quotes neither.
    fn repeated_cause() -> Layer {
        let refused = Layer::new("connection refused", false, None);
        let connect = Layer::new("cannot connect", true, Some(refused));
        Layer::new("renew failed", false, Some(connect))
    }

    #[test]
    fn a_cause_quoted_by_its_error_is_said_once() {
        let expected = "renew failed: cannot connect: connection refused";
        assert_eq!(error_chain(&repeated_cause()), expected);
        let failure = Failure::from_error(&repeated_cause());
        assert_eq!(
            (failure.kind, failure.reason.as_str()),
            (ErrorKind::Retry, expected)
        );
    }

    #[test]
    fn causes_that_are_not_repeated_are_all_said() {
        let c = Layer::new("c", false, None);
        let b = Layer::new("b", false, Some(c));
        let a = Layer::new("a", false, Some(b));
        assert_eq!(error_chain(&a), "a: b: c");
        let empty = Layer::new("", false, Some(Layer::new("cause", false, None)));
        assert_eq!(error_chain(&empty), "cause");
    }

    #[test]
    fn own_words_replace_an_error_and_its_sources() {
        let shortened = error_chain_with(&repeated_cause(), |e| {
            (e.to_string().starts_with("cannot connect")).then(|| "unreachable".to_owned())
        });
        assert_eq!(shortened, "renew failed: unreachable");
        let outermost = error_chain_with(&repeated_cause(), |_| Some("all of it".to_owned()));
        assert_eq!(outermost, "all of it");
    }
}
