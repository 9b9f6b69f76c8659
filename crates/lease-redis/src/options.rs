//! Settings of the Redis/Valkey lease strategy.

use std::time::Duration;

use crate::error::RedisLeaseError;
use crate::wire::DEFAULT_KEY;

/// How the strategy defends against a server that forgot leases (restart without persistence,
/// failover to a replica that missed the last writes). See the crate docs, "Coordinator amnesia".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AmnesiaGuard {
    /// Acquisition holds off (answers [`ErrorKind::Retry`](lease_core::ErrorKind::Retry)) while
    /// the server has been up for less than the longest lease, and, in this process, for the
    /// longest lease after the server's run ID changed. Safe with any persistence setting.
    #[default]
    HoldOff,
    /// No hold-off: only for servers whose every acknowledged write survives a restart and a
    /// failover (`appendonly yes` with `appendfsync always`, and failover only to replicas that
    /// confirmed the write, see [`RedisOptions::wait_for_replicas`]).
    Off,
}

/// Settings of a [`RedisStrategy`](crate::RedisStrategy).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `key` | `no_noncense_leases` | the hash holding every lease (shared with NoNoncense nodes) |
/// | `acquire_attempts` | 3 | claims tried per acquire before answering `Conflict` |
/// | `max_lease_duration` | 8 h | longest lease granted; longer requests are shortened to it. Also the amnesia hold-off |
/// | `amnesia_guard` | [`AmnesiaGuard::HoldOff`] | defence against a server that forgot leases |
/// | `wait_for_replicas` | none | after each claim and renewal, `WAIT` for this many replicas |
/// | `response_timeout` | 5 s | longest wait for one reply (for [`RedisStrategy::connect`](crate::RedisStrategy::connect)) |
/// | `connection_timeout` | 2 s | longest wait for a connection (for `connect`) |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    pub(crate) key: String,
    pub(crate) acquire_attempts: u32,
    pub(crate) max_lease_duration: Duration,
    pub(crate) amnesia_guard: AmnesiaGuard,
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
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Sets how many claims one acquire tries before answering `Conflict` (default 3).
    #[must_use]
    pub const fn acquire_attempts(mut self, attempts: u32) -> Self {
        self.acquire_attempts = attempts;
        self
    }

    /// Sets the longest lease any node of the deployment may hold (default 8 h, the lease
    /// duration of NoNoncense and `lease-core`). Requests for longer are granted this long; the
    /// amnesia guard holds acquisition off for this long after a server restart.
    #[must_use]
    pub const fn max_lease_duration(mut self, max: Duration) -> Self {
        self.max_lease_duration = max;
        self
    }

    /// Sets the amnesia guard (default [`AmnesiaGuard::HoldOff`]).
    #[must_use]
    pub const fn amnesia_guard(mut self, guard: AmnesiaGuard) -> Self {
        self.amnesia_guard = guard;
        self
    }

    /// After every claim and renewal, sends `WAIT replicas timeout` and treats fewer
    /// confirmations as an uncertain outcome (`Retry`). Off by default.
    #[must_use]
    pub const fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// Sets the longest wait for one reply, for connections made by
    /// [`RedisStrategy::connect`](crate::RedisStrategy::connect) (default 5 s).
    #[must_use]
    pub const fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets the longest wait for a connection, for
    /// [`RedisStrategy::connect`](crate::RedisStrategy::connect) (default 2 s).
    #[must_use]
    pub const fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// The hash key.
    #[must_use]
    pub fn hash_key(&self) -> &str {
        &self.key
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
}
