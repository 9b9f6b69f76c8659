//! Lease timing configuration and its validation.

use std::time::Duration;

use lease_core::LeaseTerms;

/// Timing of the lease lifecycle. Defaults follow NoNoncense 2.0.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `lease_duration` | 8 h | duration asked of the coordinator on acquire and renew |
/// | `renew_interval` | 30 min | longest time between renewals |
/// | `acquire_timeout` | 60 s | startup fails if no lease is held by then; `None` waits forever |
/// | `min_ttl` | 30 s | a granted TTL below this is treated as a loss ("illegal ttl") |
/// | `margin` | 10 s | safety margin: clock-skew tolerance, subtracted from every TTL |
/// | `release_guard` | = `margin` | how long a released ID stays blocked for a successor |
/// | `call_timeout` | 30 s | longest single strategy call (shortened further by the deadlines) |
/// | `acquire_backoff_base` | 100 ms | base of the acquisition backoff (capped at `renew_interval` after startup, and during it without an `acquire_timeout`) |
/// | `renew_backoff_base` | 1 s | base of the renewal retry backoff (capped at `renew_interval`) |
///
/// ```
/// use lease_manager::LeaseConfig;
/// use std::time::Duration;
///
/// // Seconds instead of hours, for an integration test.
/// let config = LeaseConfig::default()
///     .with_lease_duration(Duration::from_secs(6))
///     .with_renew_interval(Duration::from_secs(2))
///     .with_min_ttl(Duration::from_secs(3))
///     .with_margin(Duration::from_secs(1));
/// config.validate().unwrap();
///
/// let unsafe_margin = LeaseConfig::default().with_margin(Duration::from_secs(15));
/// assert!(unsafe_margin.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    lease_duration: Duration,
    renew_interval: Duration,
    acquire_timeout: Option<Duration>,
    min_ttl: Duration,
    margin: Duration,
    release_guard: Option<Duration>,
    call_timeout: Duration,
    acquire_backoff_base: Duration,
    renew_backoff_base: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(8 * 3600),
            renew_interval: Duration::from_secs(30 * 60),
            acquire_timeout: Some(Duration::from_secs(60)),
            min_ttl: Duration::from_secs(30),
            margin: Duration::from_secs(10),
            release_guard: None,
            call_timeout: Duration::from_secs(30),
            acquire_backoff_base: Duration::from_millis(100),
            renew_backoff_base: Duration::from_secs(1),
        }
    }
}

/// A configuration that would let a node use an ID it may no longer hold, or that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseConfigError {
    /// The margin is zero.
    #[error("safety margin must be positive")]
    ZeroMargin,
    /// `min_ttl <= 2 * margin`: a lease of the minimum TTL would expire locally before its first renewal.
    #[error(
        "minimum ttl ({min_ttl:?}) must exceed twice the safety margin ({margin:?}) so a lease can be renewed before it expires locally"
    )]
    MarginTooLarge {
        /// The configured minimum TTL.
        min_ttl: Duration,
        /// The configured margin.
        margin: Duration,
    },
    /// `renew_interval <= margin`.
    #[error("renew interval ({renew_interval:?}) must exceed the safety margin ({margin:?})")]
    RenewIntervalTooShort {
        /// The configured renew interval.
        renew_interval: Duration,
        /// The configured margin.
        margin: Duration,
    },
    /// `lease_duration < min_ttl`: every grant would be rejected as illegal.
    #[error("lease duration ({lease_duration:?}) must be at least the minimum ttl ({min_ttl:?})")]
    LeaseShorterThanMinTtl {
        /// The configured lease duration.
        lease_duration: Duration,
        /// The configured minimum TTL.
        min_ttl: Duration,
    },
    /// A setting that must be positive is zero.
    #[error("{0} must be positive")]
    Zero(&'static str),
}

/// Each setting's getter and its `with_` setter.
macro_rules! settings {
    ($($(#[$doc:meta])* $field:ident, $with:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        #[must_use]
        pub const fn $field(&self) -> $ty {
            self.$field
        }
        #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
        #[must_use]
        pub const fn $with(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
    )*};
}

impl LeaseConfig {
    settings! {
        /// Duration asked of the coordinator.
        lease_duration, with_lease_duration: Duration;
        /// Longest time between renewals.
        renew_interval, with_renew_interval: Duration;
        /// Startup deadline; `None` waits forever.
        acquire_timeout, with_acquire_timeout: Option<Duration>;
        /// Smallest acceptable granted TTL.
        min_ttl, with_min_ttl: Duration;
        /// Safety margin.
        margin, with_margin: Duration;
        /// Longest single strategy call.
        call_timeout, with_call_timeout: Duration;
        /// Base of the acquisition backoff.
        acquire_backoff_base, with_acquire_backoff_base: Duration;
        /// Base of the renewal retry backoff.
        renew_backoff_base, with_renew_backoff_base: Duration;
    }

    /// Sets how long a released ID stays blocked (default: the margin).
    #[must_use]
    pub const fn with_release_guard(mut self, guard: Duration) -> Self {
        self.release_guard = Some(guard);
        self
    }

    /// How long a released ID stays blocked.
    #[must_use]
    pub fn release_guard(&self) -> Duration {
        self.release_guard.unwrap_or(self.margin)
    }

    /// What a strategy is told of this timing before the manager starts
    /// ([`Strategy::check_terms`](lease_core::Strategy::check_terms)).
    #[must_use]
    pub const fn terms(&self) -> LeaseTerms {
        LeaseTerms::new(self.lease_duration, self.min_ttl, self.margin)
            .with_timeouts(Some(self.call_timeout), self.acquire_timeout)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// A [`LeaseConfigError`] naming the first unsafe or unusable combination.
    pub fn validate(&self) -> Result<(), LeaseConfigError> {
        let zero = [
            (self.lease_duration, "lease duration"),
            (self.renew_interval, "renew interval"),
            (self.min_ttl, "minimum ttl"),
            (self.call_timeout, "call timeout"),
            (self.acquire_backoff_base, "acquire backoff base"),
            (self.renew_backoff_base, "renew backoff base"),
            (self.release_guard(), "release guard"),
        ];
        if self.margin.is_zero() {
            return Err(LeaseConfigError::ZeroMargin);
        }
        if let Some((_, name)) = zero.iter().find(|(d, _)| d.is_zero()) {
            return Err(LeaseConfigError::Zero(name));
        }
        if self.acquire_timeout.is_some_and(|t| t.is_zero()) {
            return Err(LeaseConfigError::Zero("acquire timeout"));
        }
        if self.min_ttl <= self.margin.saturating_mul(2) {
            return Err(LeaseConfigError::MarginTooLarge {
                min_ttl: self.min_ttl,
                margin: self.margin,
            });
        }
        if self.renew_interval <= self.margin {
            return Err(LeaseConfigError::RenewIntervalTooShort {
                renew_interval: self.renew_interval,
                margin: self.margin,
            });
        }
        if self.lease_duration < self.min_ttl {
            return Err(LeaseConfigError::LeaseShorterThanMinTtl {
                lease_duration: self.lease_duration,
                min_ttl: self.min_ttl,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        LeaseConfig::default().validate().unwrap();
        assert_eq!(
            LeaseConfig::default().release_guard(),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn rejects_unsafe_combinations_naming_them() {
        let (d, s, zero) = (LeaseConfig::default, Duration::from_secs, Duration::ZERO);
        for (config, message) in [
            (d().with_margin(zero), "safety margin must be positive"),
            (
                d().with_margin(s(15)),
                "minimum ttl (30s) must exceed twice the safety margin (15s) so a lease can be \
                 renewed before it expires locally",
            ),
            (
                d().with_renew_interval(s(10)),
                "renew interval (10s) must exceed the safety margin (10s)",
            ),
            (
                d().with_lease_duration(s(29)),
                "lease duration (29s) must be at least the minimum ttl (30s)",
            ),
            (
                d().with_acquire_timeout(Some(zero)),
                "acquire timeout must be positive",
            ),
            (
                d().with_release_guard(zero),
                "release guard must be positive",
            ),
        ] {
            assert_eq!(config.validate().unwrap_err().to_string(), message);
        }
    }
}
