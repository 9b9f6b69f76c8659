//! Settings of the Redis/Valkey lease strategy.

use std::time::Duration;

use lease_core::LeaseTerms;

use crate::error::RedisLeaseError;
use crate::wire::DEFAULT_KEY;

/// How the strategy defends against a server that forgot leases (restart without persistence,
/// failover to a replica that missed the last writes). See the crate docs, "Coordinator amnesia".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AmnesiaGuard {
    /// Acquisition holds off (answers [`ErrorKind::Retry`](lease_core::ErrorKind::Retry)) while
    /// the server has been up for less than the hold-off, in this process for the hold-off
    /// after the server's run ID changed, and for the hold-off after the lease hash was found
    /// without its initialization marker (lost while the server stayed up, or new: see
    /// [`StoreAdmin::migrate`](lease_core::StoreAdmin::migrate)); the hold-off is
    /// [`RedisOptions::amnesia_hold_off`]: the longest lease and twice
    /// [`RedisOptions::with_max_clock_offset`], which nodes are held to. A `maxmemory-policy`
    /// that may evict the hash is refused. Safe with any persistence setting.
    #[default]
    HoldOff,
    /// No hold-off and no check of the hash's marker or the eviction policy: only for servers
    /// whose every acknowledged write survives a restart and a failover (`appendonly yes` with
    /// `appendfsync always`, and failover only to replicas that confirmed the write, see
    /// [`RedisOptions::with_wait_for_replicas`]), and that no operator flushes or evicts.
    Off,
}

/// The default [`RedisOptions::with_max_clock_offset`]: an hour, the clock difference between nodes
/// that a handover tolerates anyway.
pub(crate) const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_secs(3600);

/// Settings of a [`RedisStrategy`](crate::RedisStrategy).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `key` | `no_noncense_leases` | the hash holding every lease (shared with NoNoncense nodes) |
/// | `acquire_attempts` | 3 | claims tried per acquire before answering `Conflict` |
/// | `max_lease_duration` | 8 h | longest lease granted; longer requests are shortened to it |
/// | `amnesia_guard` | [`AmnesiaGuard::HoldOff`] | defence against a server that forgot leases |
/// | `max_clock_offset` | 1 h | with the guard on: largest offset of a node's clock from the server's that nodes accept |
/// | `wait_for_replicas` | none | after each claim and renewal, `WAIT` for this many replicas |
/// | `response_timeout` | 5 s | longest wait for one reply (for [`RedisStrategy::connect`](crate::RedisStrategy::connect)) |
/// | `connection_timeout` | 2 s | longest wait for a connection (for `connect`) |
///
/// The amnesia hold-off is `max_lease_duration + 2 × max_clock_offset`
/// ([`amnesia_hold_off`](RedisOptions::amnesia_hold_off)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    pub(crate) key: String,
    pub(crate) acquire_attempts: u32,
    pub(crate) max_lease_duration: Duration,
    pub(crate) amnesia_guard: AmnesiaGuard,
    pub(crate) max_clock_offset: Duration,
    pub(crate) replicas: Option<(u32, Duration)>,
    pub(crate) response_timeout: Duration,
    pub(crate) connection_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            key: DEFAULT_KEY.to_owned(),
            acquire_attempts: 3,
            max_lease_duration: Duration::from_secs(8 * 3600),
            amnesia_guard: AmnesiaGuard::HoldOff,
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
            replicas: None,
            response_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(2),
        }
    }
}

impl RedisOptions {
    /// The defaults (see the table above).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the hash key (default `no_noncense_leases`, the one NoNoncense uses).
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Sets how many claims one acquire tries before answering `Conflict` (default 3).
    #[must_use]
    pub const fn with_acquire_attempts(mut self, attempts: u32) -> Self {
        self.acquire_attempts = attempts;
        self
    }

    /// Sets the longest lease any node of the deployment may hold (default 8 h, the lease
    /// duration of NoNoncense and the lease manager's default). Requests for longer are granted
    /// this long; the amnesia guard holds acquisition off for this long (plus twice
    /// [`with_max_clock_offset`](Self::with_max_clock_offset)) after a server restart. It must
    /// not be below the lease manager's `min_ttl`: the manager refuses to start otherwise, and
    /// [`validate_for`](Self::validate_for) checks it earlier.
    #[must_use]
    pub const fn with_max_lease_duration(mut self, max: Duration) -> Self {
        self.max_lease_duration = max;
        self
    }

    /// Sets the amnesia guard (default [`AmnesiaGuard::HoldOff`]).
    #[must_use]
    pub const fn with_amnesia_guard(mut self, guard: AmnesiaGuard) -> Self {
        self.amnesia_guard = guard;
        self
    }

    /// Sets the largest offset between a node's clock and the server's (default 1 h) that the
    /// amnesia guard allows for. A forgotten holder may have issued timestamps up to its own
    /// clock at its lease's end, and a successor starts at its own clock: so the hold-off
    /// outlasts the longest lease by twice this offset, and with the guard on, every grant and
    /// renewal asks the lease manager to refuse the lease when the node's clock is further off
    /// the server's `TIME` than this (an error that names this setting). Ignored with
    /// [`AmnesiaGuard::Off`]. Every node of the deployment needs the same value.
    #[must_use]
    pub const fn with_max_clock_offset(mut self, max: Duration) -> Self {
        self.max_clock_offset = max;
        self
    }

    /// How long the amnesia guard holds acquisition off after the server restarted or changed:
    /// `max_lease_duration + 2 × max_clock_offset`.
    #[must_use]
    pub fn amnesia_hold_off(&self) -> Duration {
        lease_core::time::amnesia_hold_off(self.max_lease_duration, self.max_clock_offset)
    }

    /// After every claim and renewal, sends `WAIT replicas timeout` and treats fewer
    /// confirmations as an uncertain outcome (`Retry`). Off by default.
    #[must_use]
    pub const fn with_wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// Sets the longest wait for one reply, for connections made by
    /// [`RedisStrategy::connect`](crate::RedisStrategy::connect) (default 5 s).
    #[must_use]
    pub const fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets the longest wait for a connection, for
    /// [`RedisStrategy::connect`](crate::RedisStrategy::connect) (default 2 s).
    #[must_use]
    pub const fn with_connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// The hash key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How many claims one acquire tries before answering `Conflict`.
    #[must_use]
    pub const fn acquire_attempts(&self) -> u32 {
        self.acquire_attempts
    }

    /// The longest lease the strategy grants.
    #[must_use]
    pub const fn max_lease_duration(&self) -> Duration {
        self.max_lease_duration
    }

    /// What the strategy does after the server restarted or changed.
    #[must_use]
    pub const fn amnesia_guard(&self) -> AmnesiaGuard {
        self.amnesia_guard
    }

    /// The clock difference between nodes the hold-off allows for.
    #[must_use]
    pub const fn max_clock_offset(&self) -> Duration {
        self.max_clock_offset
    }

    /// The replicas to `WAIT` for and how long, if set.
    #[must_use]
    pub const fn wait_for_replicas(&self) -> Option<(u32, Duration)> {
        self.replicas
    }

    /// The longest wait for one reply.
    #[must_use]
    pub const fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The longest wait for a connection.
    #[must_use]
    pub const fn connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`RedisLeaseError::InvalidOptions`] naming the setting to change.
    pub fn validate(&self) -> Result<(), RedisLeaseError> {
        let invalid = |why: &str| Err(RedisLeaseError::InvalidOptions(why.to_owned()));
        if self.key.is_empty() {
            return invalid("key must not be empty");
        }
        if self.acquire_attempts == 0 {
            return invalid("acquire_attempts must be at least 1");
        }
        if self.max_lease_duration < Duration::from_millis(1) {
            return invalid("max_lease_duration must be at least 1 ms");
        }
        if self.response_timeout.is_zero() || self.connection_timeout.is_zero() {
            return invalid("response_timeout and connection_timeout must be positive");
        }
        if let Some((replicas, timeout)) = self.replicas
            && (replicas == 0 || timeout < Duration::from_millis(1))
        {
            return invalid(
                "wait_for_replicas needs at least 1 replica and a timeout of at least 1 ms",
            );
        }
        Ok(())
    }

    /// Checks the settings ([`validate`](Self::validate)) and that they suit the lease
    /// manager's timing `terms` (what `LeaseConfig::terms` gives): every grant is at most
    /// `max_lease_duration`, so a `max_lease_duration` below the manager's `min_ttl` would make
    /// every grant one the manager refuses as an illegal TTL, and each acquisition would block
    /// an ID for nothing.
    ///
    /// The lease manager runs this check itself when it starts
    /// ([`Strategy::check_terms`](lease_core::Strategy::check_terms)); call it where the options
    /// and the manager's configuration are both known to fail earlier, before connecting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_manager::LeaseConfig;
    /// use lease_redis::RedisOptions;
    ///
    /// let options = RedisOptions::new().with_max_lease_duration(Duration::from_secs(10));
    /// let defaults = LeaseConfig::default(); // min_ttl is 30 s
    /// assert!(options.validate_for(&defaults.terms()).is_err());
    /// let short = LeaseConfig::default()
    ///     .with_lease_duration(Duration::from_secs(10))
    ///     .with_renew_interval(Duration::from_secs(3))
    ///     .with_min_ttl(Duration::from_secs(5))
    ///     .with_margin(Duration::from_secs(1));
    /// options.validate_for(&short.terms()).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`RedisLeaseError::InvalidOptions`] (kind `Misconfigured`) naming the settings to change.
    pub fn validate_for(&self, terms: &LeaseTerms) -> Result<(), RedisLeaseError> {
        self.validate()?;
        let min_ttl = terms.min_ttl;
        if self.max_lease_duration < min_ttl {
            return Err(RedisLeaseError::InvalidOptions(format!(
                "max_lease_duration ({:?}) is below the lease manager's min_ttl ({min_ttl:?}): \
                 every grant is at most max_lease_duration and would be refused as an illegal \
                 ttl; raise RedisOptions::max_lease_duration to at least min_ttl, or lower \
                 LeaseConfig::with_min_ttl (and the margin and renew interval with it)",
                self.max_lease_duration
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lease_core::{ErrorKind, LeaseError};
    use lease_manager::LeaseConfig;

    use super::*;

    #[test]
    fn a_longest_lease_below_the_minimum_ttl_is_rejected_with_both_settings_named() {
        let config = LeaseConfig::default().terms();
        let capped = RedisOptions::new().with_max_lease_duration(Duration::from_secs(10));
        // Alone, the options are fine: only the lease manager's minimum makes them useless.
        capped.validate().unwrap();
        let error = capped.validate_for(&config).unwrap_err();
        assert!(
            matches!(error, RedisLeaseError::InvalidOptions(_)),
            "{error}"
        );
        assert_eq!(error.kind(), ErrorKind::Misconfigured);
        let message = error.to_string();
        for needle in ["max_lease_duration", "min_ttl", "10s", "30s"] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        // At the minimum, and above it (a lease asked for longer is granted the cap), every
        // grant is legal; a lower minimum makes the short cap usable (validate_for's example).
        for cap in [30, 60, 8 * 3600] {
            let options = RedisOptions::new().with_max_lease_duration(Duration::from_secs(cap));
            options.validate_for(&config).unwrap();
        }
        // The options themselves are checked too.
        let error = RedisOptions::new()
            .with_acquire_attempts(0)
            .validate_for(&config)
            .unwrap_err();
        assert!(error.to_string().contains("acquire_attempts"), "{error}");
    }
}
