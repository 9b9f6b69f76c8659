//! [`RedisStrategy`]: the lease protocol on one hash with HSETEX.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::time::granted_floor;
use lease_core::{
    Acquire, ErrorKind, Grant, Holder, LeaseError, LeaseTerms, MachineId, Profile, Release, Renew,
    Renewal, Strategy, pick_free,
};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};

use crate::error::RedisLeaseError;
use crate::options::{AmnesiaGuard, RedisOptions};
use crate::transport::{Claim, Connection, Reply, Request, ServerInfo, Transport, TransportError};
use crate::wire;

/// This holder's lease: the machine ID and the random token in its ownership marker.
///
/// Its `Debug` shows the ID and the first [`Holder::TOKEN_PREFIX_LEN`] characters of the token
/// only (as the operator views do): the whole token lets anyone renew or release the lease.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedisLease {
    id: MachineId,
    token: String,
}

impl std::fmt::Debug for RedisLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix: String = self.token.chars().take(Holder::TOKEN_PREFIX_LEN).collect();
        f.debug_struct("RedisLease")
            .field("machine_id", &self.id.get())
            .field("token", &format_args!("{prefix}…"))
            .finish()
    }
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
    /// The run ID before the last change, and when the change was seen (the transport's
    /// clock).
    changed: Option<(String, Duration)>,
}

impl Seen {
    /// Records the server's run ID, seen at `now`; a new one starts the hold-off.
    fn record(&mut self, run_id: &str, now: Duration) {
        if let Some(previous) = self.run_id.replace(run_id.to_owned())
            && previous != run_id
        {
            self.changed = Some((previous, now));
        }
    }
}

/// Machine-ID leases in one Valkey 9 / Redis 8 hash, compatible with NoNoncense 2.0.
///
/// A lease is two fields written by one `HSETEX` with one TTL: `"<id>" => token` and the
/// ownership marker `"token.<id>.<token>" => "<id>"`; beside them, each ID's timestamp floor,
/// `"floor.<id>" => "<unix ms>"`, a field without TTL. Acquire claims a free ID chosen by its
/// floor with `FNX`; renew and release use `FXX`, which succeeds only while this holder's marker
/// exists. Release keeps the ID field for the guard and deletes the marker in the same step, so
/// a renewal that reaches the server after it fails. Each of the three is one Lua script that
/// also writes the floor. See the crate docs for the protocol, the amnesia guard and an
/// example.
///
/// `T` is how requests reach the server ([`Transport`]): by default a [`Connection`] over a
/// [`ConnectionManager`] (what [`connect`](Self::connect) makes; reconnects by itself); any
/// shareable `redis` async connection with [`with_connection`](Self::with_connection).
pub struct RedisStrategy<T = Connection<ConnectionManager>> {
    transport: T,
    options: RedisOptions,
    seen: Mutex<Seen>,
}

impl<T> std::fmt::Debug for RedisStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStrategy")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisStrategy {
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

impl<C> RedisStrategy<Connection<C>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A strategy on a connection you made (cloned per call, so it must be shareable, like a
    /// `ConnectionManager` or `MultiplexedConnection`).
    ///
    /// # Errors
    /// [`RedisLeaseError::InvalidOptions`] when `options` are out of range.
    pub fn with_connection(connection: C, options: RedisOptions) -> Result<Self, RedisLeaseError> {
        let transport = Connection::new(connection, options.key.clone());
        Self::with_transport(transport, options)
    }

    pub(crate) fn connection(&self) -> C {
        self.transport.connection()
    }
}

impl<T: Transport> RedisStrategy<T> {
    /// A strategy over `transport` (see [`crate::transport`]).
    ///
    /// # Errors
    /// [`RedisLeaseError::InvalidOptions`] when `options` are out of range.
    pub fn with_transport(transport: T, options: RedisOptions) -> Result<Self, RedisLeaseError> {
        options.validate()?;
        Ok(Self {
            transport,
            options,
            seen: Mutex::new(Seen::default()),
        })
    }

    /// The transport.
    pub const fn transport(&self) -> &T {
        &self.transport
    }

    /// The settings.
    pub const fn options(&self) -> &RedisOptions {
        &self.options
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One round trip, its failure classified for the lease manager.
    async fn exchange(&self, request: Request) -> Result<Reply, RedisLeaseError> {
        let command = request.command();
        self.transport
            .exchange(request)
            .await
            .map_err(|error| match error {
                TransportError::Failed(source) => {
                    RedisLeaseError::command(command, &self.options.key, source)
                }
                TransportError::Unexpected(reply) => {
                    RedisLeaseError::UnexpectedReply { command, reply }
                }
            })
    }

    /// The server's `INFO`, as the amnesia guard reads it (with the hash, in one round trip).
    pub(crate) async fn server_info(&self) -> Result<ServerInfo, RedisLeaseError> {
        let request = Request::Read { info: true };
        let command = request.command();
        match self.exchange(request).await? {
            Reply::Read {
                info: Some(info), ..
            } => Ok(info),
            other => Err(unexpected(command, &other)),
        }
    }

    /// `WAIT` for the configured replicas, if any.
    async fn wait_for_replicas(&self) -> Result<(), RedisLeaseError> {
        let Some((required, timeout)) = self.options.replicas else {
            return Ok(());
        };
        let request = Request::WaitForReplicas { required, timeout };
        let command = request.command();
        let acknowledged = match self.exchange(request).await? {
            Reply::Replicas(acknowledged) => acknowledged,
            other => return Err(unexpected(command, &other)),
        };
        if acknowledged < i64::from(required) {
            return Err(RedisLeaseError::Replicas {
                acknowledged,
                required,
                timeout,
            });
        }
        Ok(())
    }

    /// One read of the hash for an acquire: the free IDs with their floors. The first read of
    /// an acquire (`guard`) also runs the amnesia guard: `INFO` goes in the same round trip
    /// and is checked before anything is claimed.
    ///
    /// Returns what was read and, when the guard ran, the run ID of the server it checked: the
    /// claim that follows is made only on that server process.
    async fn read(&self, guard: bool) -> Result<(wire::FreeIds, Option<String>), RedisLeaseError> {
        let info = guard && self.options.amnesia_guard != AmnesiaGuard::Off;
        let request = Request::Read { info };
        let command = request.command();
        let (info, free, initialized_on) = match self.exchange(request).await? {
            Reply::Read {
                info,
                free,
                initialized_on,
            } => (info, free, initialized_on),
            other => return Err(unexpected(command, &other)),
        };
        let Some(info) = info else {
            return Ok((free, None));
        };
        match self.check_amnesia(info, initialized_on.as_deref()) {
            Ok(run_id) => Ok((free, Some(run_id))),
            Err(refused) => {
                if let (ErrorKind::Retry, Some(hold_off)) = (refused.kind(), self.hold_off()) {
                    // A restarted server lost the hash too: its marker's hold-off starts now,
                    // beside the restart's, not after it. The refusal stands either way.
                    let _ = self.exchange(Request::StartHoldOff { hold_off }).await;
                }
                Err(refused)
            }
        }
    }

    /// The hold-off the scripts start when they find the hash's initialization marker missing;
    /// `None` with the guard off, which turns that check off too.
    fn hold_off(&self) -> Option<Duration> {
        match self.options.amnesia_guard {
            AmnesiaGuard::HoldOff => Some(self.options.amnesia_hold_off()),
            AmnesiaGuard::Off => None,
        }
    }

    /// The offset of the node's clock the manager is asked to hold grants and renewals within:
    /// what the hold-off allows for (with the guard on).
    fn clock_bound(&self) -> Option<Duration> {
        let on = self.options.amnesia_guard == AmnesiaGuard::HoldOff;
        on.then_some(self.options.max_clock_offset)
    }

    /// The amnesia guard on the server's `INFO`: fails with a `Misconfigured` error when the
    /// server may evict the lease hash, with a `Retry` error while the server may have
    /// forgotten leases; otherwise returns the server's run ID. `initialized_on` is the run ID
    /// `migrate` initialized the hash on: on that same server process a short uptime forgets
    /// nothing (no lease of an earlier process can be in the hash, as an operator said when
    /// they migrated).
    fn check_amnesia(
        &self,
        info: ServerInfo,
        initialized_on: Option<&str>,
    ) -> Result<String, RedisLeaseError> {
        let policy = info.maxmemory_policy;
        // `noeviction` evicts nothing; the `volatile-*` policies evict only keys with a TTL of
        // their own, which the lease hash never has (its fields' TTLs are not a key TTL).
        // Everything else (`allkeys-*`, and policies this code does not know) may evict it.
        if policy != "noeviction" && !policy.starts_with("volatile-") {
            return Err(RedisLeaseError::EvictionPolicy {
                policy,
                key: self.options.key.clone(),
            });
        }
        let run_id = info.run_id;
        let hold_off = self.options.amnesia_hold_off();
        {
            let now = self.transport.now();
            let mut seen = self.seen();
            seen.record(&run_id, now);
            if let Some((previous, at)) = &seen.changed {
                let elapsed = now.saturating_sub(*at);
                if elapsed < hold_off {
                    return Err(RedisLeaseError::ServerChanged {
                        previous: previous.clone(),
                        current: run_id,
                        remaining: hold_off - elapsed,
                    });
                }
                seen.changed = None;
            }
        }
        // `uptime_in_seconds` is a difference of whole wall-clock seconds, so it may exceed
        // the real uptime by up to a second: count one second less.
        let uptime = info.uptime.saturating_sub(Duration::from_secs(1));
        if uptime < hold_off && initialized_on != Some(run_id.as_str()) {
            return Err(RedisLeaseError::AmnesiaWindow {
                uptime,
                hold_off,
                remaining: hold_off - uptime,
            });
        }
        Ok(run_id)
    }

    /// A random index below `n`.
    fn random_below(&self, n: usize) -> usize {
        let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        usize::try_from(self.transport.random() % n).unwrap_or(0)
    }
}

/// The error for a reply of the wrong kind to `command` (a [`Request::command`]).
fn unexpected(command: &'static str, reply: &Reply) -> RedisLeaseError {
    RedisLeaseError::UnexpectedReply {
        command,
        reply: format!("{reply:?}"),
    }
}

impl<T: Transport> RedisStrategy<T> {
    /// The TTL an acquire asks for: `requested`, at most `max_lease_duration`, at least 1 ms.
    fn acquire_ttl(&self, requested: Duration) -> Result<Duration, RedisLeaseError> {
        let ttl = requested.min(self.options.max_lease_duration);
        if ttl < Duration::from_millis(1) {
            return Err(RedisLeaseError::InvalidOptions(
                "requested lease duration must be at least 1 ms".to_owned(),
            ));
        }
        Ok(ttl)
    }

    /// The floor to record for a grant of `ttl` on a request for `requested` whose bound is
    /// `floor_ms`: [`granted_floor`], the bound less what `max_lease_duration` cut off
    /// (`requested - ttl`), within what the hash field can hold.
    ///
    /// Recording `floor_ms` itself would leave, after a crash, a floor `requested - ttl` ahead
    /// of anything issued (7 h with the default 8 h lease and a 1 h cap), and the successor's
    /// nonces would start that far ahead of its clock; the lowered floor still bounds this
    /// grant's deadline, so every timestamp issued under it (factories issue none at or past
    /// their deadline).
    fn recorded_floor(floor_ms: u64, requested: Duration, ttl: Duration) -> u64 {
        granted_floor(floor_ms, requested, ttl).min(wire::MAX_FLOOR_MS)
    }
}

impl<T: Transport> Strategy for RedisStrategy<T> {
    type Lease = RedisLease;
    type Error = RedisLeaseError;

    /// `HGETALL` (with `INFO server` in the same round trip when the amnesia guard is on), a
    /// free ID chosen by its floor, then the acquire script: `HSETEX FNX` of both lease fields
    /// and `floor.<id>` raised to `floor_ms` (less `requested - ttl` when `max_lease_duration`
    /// shortened the grant), atomically; the read and the claim again on a lost race, up to
    /// `acquire_attempts` times. Two round trips when the claim wins.
    async fn acquire(&self, request: Acquire) -> Result<Grant<RedisLease>, RedisLeaseError> {
        let ttl = self.acquire_ttl(request.requested)?;
        let floor_ms = Self::recorded_floor(request.floor_ms, request.requested, ttl);
        // The run ID of the server whose uptime the guard checked (first read only): every
        // claim of this acquire must land on that same server process.
        let mut checked = None;
        let unreadable = |id, value| RedisLeaseError::UnreadableFloor {
            key: self.options.key.clone(),
            id,
            value,
        };
        for attempt in 0..self.options.acquire_attempts {
            let (free, run_id) = self.read(attempt == 0).await?;
            checked = checked.or(run_id);
            let candidates: Vec<(MachineId, u64, ())> = free
                .readable
                .iter()
                .map(|&(id, floor)| (id, floor, ()))
                .collect();
            let Some((id, _, ())) =
                pick_free(&candidates, request.now_ms, &mut |n| self.random_below(n))
            else {
                return Err(match free.unreadable.into_iter().next() {
                    Some((id, value)) => unreadable(id, value),
                    None => RedisLeaseError::Exhausted {
                        key: self.options.key.clone(),
                    },
                });
            };
            let token = wire::new_token(|| self.transport.random());
            let claim = Request::Claim {
                id,
                token: token.clone(),
                ttl,
                floor_ms,
                run_id: checked.clone(),
                hold_off: self.hold_off(),
            };
            let command = claim.command();
            let reply = self.exchange(claim).await?;
            let Reply::Claim(claimed) = reply else {
                return Err(unexpected(command, &reply));
            };
            match claimed {
                Claim::Won {
                    floor_ms,
                    server_ms,
                } => {
                    self.wait_for_replicas().await?;
                    let mut grant = Grant::new(id, RedisLease { id, token }, ttl)
                        .with_floor(floor_ms)
                        .with_coordinator_ms(server_ms);
                    grant.max_clock_offset = self.clock_bound();
                    return Ok(grant);
                }
                // Somebody claimed it between the read and the script: read again.
                Claim::Taken => {}
                Claim::Unreadable(value) => return Err(unreadable(id, value)),
                Claim::HeldOff {
                    open_at_ms,
                    server_ms,
                } => {
                    return Err(RedisLeaseError::LeaseDataMissing {
                        key: self.options.key.clone(),
                        remaining: Duration::from_millis(open_at_ms.saturating_sub(server_ms)),
                    });
                }
                Claim::ServerChanged(current) => {
                    let now = self.transport.now();
                    self.seen().record(&current, now);
                    return Err(RedisLeaseError::ServerChanged {
                        previous: checked.unwrap_or_default(),
                        current,
                        remaining: self.options.amnesia_hold_off(),
                    });
                }
            }
        }
        Err(RedisLeaseError::Conflict {
            attempts: self.options.acquire_attempts,
        })
    }

    /// The renew script, one round trip: `HSETEX FXX` of both lease fields and, only if that
    /// succeeded, `floor.<id>` raised to `floor_ms` (less `requested - ttl` when
    /// `max_lease_duration` shortened the grant), atomically.
    async fn renew(
        &self,
        lease: &RedisLease,
        request: Renew,
    ) -> Result<Renewal<RedisLease>, RedisLeaseError> {
        let ttl = request.requested.min(self.options.max_lease_duration);
        let renew = Request::Renew {
            id: lease.id,
            token: lease.token.clone(),
            ttl,
            floor_ms: Self::recorded_floor(request.floor_ms, request.requested, ttl),
            hold_off: self.hold_off(),
        };
        let command = renew.command();
        let server_ms = match self.exchange(renew).await? {
            Reply::Renewed {
                renewed: true,
                server_ms,
            } => server_ms,
            Reply::Renewed { renewed: false, .. } => {
                return Err(RedisLeaseError::Lost { id: lease.id });
            }
            other => return Err(unexpected(command, &other)),
        };
        self.wait_for_replicas().await?;
        let mut renewal = Renewal::new(lease.clone(), ttl).with_coordinator_ms(server_ms);
        renewal.max_clock_offset = self.clock_bound();
        Ok(renewal)
    }

    /// The release script, one round trip: `HSETEX FXX PX guard` of both lease fields, `HDEL`
    /// of this holder's marker and `floor.<id>` set to `floor_ms` if the marker was there,
    /// raised to it if not (a lost lease), atomically.
    async fn release(&self, lease: &RedisLease, request: Release) -> Result<(), RedisLeaseError> {
        // FXX: only while this holder's marker exists. The ID field stays for the guard, so a
        // successor (NoNoncense nodes too) cannot start in this holder's last milliseconds.
        // The marker goes in the same step: a renewal that reaches the server after the
        // release (sent before it, or resent by a reconnecting client) then fails its FXX and
        // cannot turn the guard back into a whole lease.
        let release = Request::Release {
            id: lease.id,
            token: lease.token.clone(),
            guard: request.guard,
            floor_ms: request.floor_ms.min(wire::MAX_FLOOR_MS),
        };
        let command = release.command();
        match self.exchange(release).await? {
            Reply::Released(_) => Ok(()),
            other => Err(unexpected(command, &other)),
        }
    }

    /// [`RedisOptions::validate_for`]: `max_lease_duration` must not be below `min_ttl`.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), RedisLeaseError> {
        self.options.validate_for(terms)
    }

    fn profile(&self) -> Profile {
        Profile::new("redis").recording_floor()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u16) -> MachineId {
        MachineId::new(n).unwrap()
    }

    #[test]
    fn debug_shows_the_id_and_a_token_prefix_only() {
        let token = wire::new_token(rand::random);
        let lease = RedisLease {
            id: id(17),
            token: token.clone(),
        };
        let prefix = &token[..Holder::TOKEN_PREFIX_LEN];
        let expected = format!("RedisLease {{ machine_id: 17, token: {prefix}… }}");
        assert_eq!(format!("{lease:?}"), expected);
        // Nothing past the prefix, in any form the lease is printed in.
        let grant = Grant::new(id(17), lease.clone(), Duration::from_secs(1));
        for shown in [
            format!("{lease:#?}"),
            format!("{grant:?}"),
            format!("{:?}", Renewal::new(lease.clone(), Duration::from_secs(1))),
        ] {
            assert!(shown.contains(prefix), "{shown}");
            assert!(!shown.contains(&token[prefix.len()..]), "{shown}");
        }
    }
}
