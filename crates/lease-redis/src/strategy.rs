//! [`RedisStrategy`]: the lease protocol on one hash with HSETEX.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lease_core::{Grant, MachineId, Renewal, Strategy};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};

use crate::error::RedisLeaseError;
use crate::options::{AmnesiaGuard, RedisOptions};
use crate::wire;

/// This holder's lease: the machine ID and the random token in its ownership marker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RedisLease {
    id: MachineId,
    token: String,
}

impl RedisLease {
    /// The leased machine ID.
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.id
    }

    /// The lease token (22 characters of base64url).
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The ownership marker field, `token.<id>.<token>`.
    #[must_use]
    pub fn marker(&self) -> String {
        wire::marker(self.id, &self.token)
    }
}

/// What this strategy last saw of the server, for the amnesia guard.
#[derive(Debug, Default)]
struct Seen {
    run_id: Option<String>,
    /// The run ID before the last change, and when the change was seen.
    changed: Option<(String, Instant)>,
}

/// Machine-ID leases in one Valkey 9 / Redis 8 hash, compatible with NoNoncense 2.0.
///
/// A lease is two fields written by one `HSETEX` with one TTL: `"<id>" => token` and the
/// ownership marker `"token.<id>.<token>" => "<id>"`. Acquire claims a randomly chosen free ID
/// with `FNX`; renew and release use `FXX`, which succeeds only while this holder's marker
/// exists. See the crate docs for the protocol, the amnesia guard and an example.
///
/// `C` is any `redis` async connection that can be cloned and shared: a [`ConnectionManager`]
/// (what [`connect`](Self::connect) makes; reconnects by itself), a `MultiplexedConnection`, or
/// your own.
pub struct RedisStrategy<C = ConnectionManager> {
    connection: C,
    options: RedisOptions,
    seen: Mutex<Seen>,
}

impl<C> std::fmt::Debug for RedisStrategy<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStrategy")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisStrategy<ConnectionManager> {
    /// A strategy on a reconnecting [`ConnectionManager`] to `url` (`redis://` or, with the
    /// `tls-rustls` feature, `rediss://`).
    ///
    /// Does not wait for the server: an unreachable server makes the first acquire answer
    /// `Retry`. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// [`RedisLeaseError::InvalidUrl`] or [`RedisLeaseError::InvalidOptions`]
    /// (kind `Misconfigured`).
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, RedisLeaseError> {
        options.validate()?;
        #[cfg(feature = "tls-rustls")]
        {
            // rustls needs a process-wide crypto provider; keep one the application installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = redis::Client::open(url).map_err(RedisLeaseError::InvalidUrl)?;
        let mut response_timeout = options.response_timeout;
        if let Some((_, wait)) = options.replicas {
            // WAIT blocks its reply for up to its timeout.
            response_timeout = response_timeout.max(wait + Duration::from_secs(1));
        }
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(options.connection_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(RedisLeaseError::InvalidUrl)?;
        Self::with_connection(connection, options)
    }
}

impl<C> RedisStrategy<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A strategy on a connection you made (cloned per call, so it must be shareable, like a
    /// `ConnectionManager` or `MultiplexedConnection`).
    ///
    /// # Errors
    /// [`RedisLeaseError::InvalidOptions`] when `options` are out of range.
    pub fn with_connection(connection: C, options: RedisOptions) -> Result<Self, RedisLeaseError> {
        options.validate()?;
        Ok(Self {
            connection,
            options,
            seen: Mutex::new(Seen::default()),
        })
    }

    /// The settings.
    pub const fn options(&self) -> &RedisOptions {
        &self.options
    }

    pub(crate) fn connection(&self) -> C {
        self.connection.clone()
    }

    fn key(&self) -> &str {
        &self.options.key
    }

    fn fail(&self, command: &'static str) -> impl FnOnce(redis::RedisError) -> RedisLeaseError {
        let key = self.options.key.clone();
        move |error| RedisLeaseError::command(command, &key, error)
    }

    /// `HSETEX key FNX|FXX PX ttl FIELDS 2 <id> <token> token.<id>.<token> <id>`; whether both
    /// fields were set.
    async fn hsetex(
        &self,
        connection: &mut C,
        condition: &str,
        ttl: Duration,
        id: MachineId,
        token: &str,
    ) -> Result<bool, RedisLeaseError> {
        let set: i64 = redis::cmd("HSETEX")
            .arg(self.key())
            .arg(condition)
            .arg("PX")
            .arg(millis(ttl))
            .arg("FIELDS")
            .arg(2)
            .arg(id.get().to_string())
            .arg(token)
            .arg(wire::marker(id, token))
            .arg(id.get().to_string())
            .query_async(connection)
            .await
            .map_err(self.fail("HSETEX"))?;
        match set {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(RedisLeaseError::UnexpectedReply {
                command: "HSETEX",
                reply: other.to_string(),
            }),
        }
    }

    /// `WAIT` for the configured replicas, if any.
    async fn wait_for_replicas(&self, connection: &mut C) -> Result<(), RedisLeaseError> {
        let Some((required, timeout)) = self.options.replicas else {
            return Ok(());
        };
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(required)
            .arg(millis(timeout))
            .query_async(connection)
            .await
            .map_err(self.fail("WAIT"))?;
        if acknowledged < i64::from(required) {
            return Err(RedisLeaseError::Replicas {
                acknowledged,
                required,
                timeout,
            });
        }
        Ok(())
    }

    /// The amnesia guard: fails with a `Retry` error while the server may have forgotten leases.
    async fn check_amnesia(&self, connection: &mut C) -> Result<(), RedisLeaseError> {
        if self.options.amnesia_guard == AmnesiaGuard::Off {
            return Ok(());
        }
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(connection)
            .await
            .map_err(self.fail("INFO"))?;
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let unexpected = || RedisLeaseError::UnexpectedReply {
            command: "INFO server",
            reply: "no uptime_in_seconds or run_id".to_owned(),
        };
        let uptime = field("uptime_in_seconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .ok_or_else(unexpected)?;
        let run_id = field("run_id").ok_or_else(unexpected)?.to_owned();
        let max_lease = self.options.max_lease_duration;
        {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(previous) = seen.run_id.replace(run_id.clone())
                && previous != run_id
            {
                seen.changed = Some((previous, Instant::now()));
            }
            if let Some((previous, at)) = &seen.changed {
                let elapsed = at.elapsed();
                if elapsed < max_lease {
                    return Err(RedisLeaseError::ServerChanged {
                        previous: previous.clone(),
                        current: run_id,
                        remaining: max_lease - elapsed,
                    });
                }
                seen.changed = None;
            }
        }
        // `uptime_in_seconds` is a difference of whole wall-clock seconds, so it may exceed
        // the real uptime by up to a second: count one second less.
        let uptime = uptime.saturating_sub(Duration::from_secs(1));
        if uptime < max_lease {
            return Err(RedisLeaseError::AmnesiaWindow {
                uptime,
                max_lease,
                remaining: max_lease - uptime,
            });
        }
        Ok(())
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl<C> Strategy for RedisStrategy<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Lease = RedisLease;
    type Error = RedisLeaseError;

    async fn acquire(&self, requested: Duration) -> Result<Grant<RedisLease>, RedisLeaseError> {
        let ttl = requested.min(self.options.max_lease_duration);
        if ttl < Duration::from_millis(1) {
            return Err(RedisLeaseError::InvalidOptions(
                "requested lease duration must be at least 1 ms".to_owned(),
            ));
        }
        let mut connection = self.connection.clone();
        self.check_amnesia(&mut connection).await?;
        for _ in 0..self.options.acquire_attempts {
            let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
                .arg(self.key())
                .query_async(&mut connection)
                .await
                .map_err(self.fail("HKEYS"))?;
            let free = wire::free_ids(&fields);
            if free.is_empty() {
                return Err(RedisLeaseError::Exhausted {
                    key: self.options.key.clone(),
                });
            }
            // A random free ID, not the lowest: nodes starting together spread out.
            let id = free[rand::random_range(0..free.len())];
            let token = wire::new_token();
            if self.hsetex(&mut connection, "FNX", ttl, id, &token).await? {
                self.wait_for_replicas(&mut connection).await?;
                return Ok(Grant::new(id, RedisLease { id, token }, ttl));
            }
            // Somebody claimed it between HKEYS and HSETEX: read again.
        }
        Err(RedisLeaseError::Conflict {
            attempts: self.options.acquire_attempts,
        })
    }

    async fn renew(
        &self,
        lease: &RedisLease,
        requested: Duration,
    ) -> Result<Renewal<RedisLease>, RedisLeaseError> {
        let ttl = requested.min(self.options.max_lease_duration);
        let mut connection = self.connection.clone();
        if !self
            .hsetex(&mut connection, "FXX", ttl, lease.id, &lease.token)
            .await?
        {
            return Err(RedisLeaseError::Lost { id: lease.id });
        }
        self.wait_for_replicas(&mut connection).await?;
        Ok(Renewal::new(lease.clone(), ttl))
    }

    async fn release(&self, lease: &RedisLease, guard: Duration) -> Result<(), RedisLeaseError> {
        // FXX: only while this holder's marker exists. Both fields stay for `guard` more, so a
        // successor cannot start in this holder's last milliseconds.
        let mut connection = self.connection.clone();
        self.hsetex(&mut connection, "FXX", guard, lease.id, &lease.token)
            .await
            .map(|_| ())
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
