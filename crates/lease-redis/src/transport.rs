//! Where the strategy meets the network: one [`Request`] per round trip to the server, answered
//! with a [`Reply`] or a [`TransportError`], over a [`Transport`].
//!
//! [`RedisStrategy`](crate::RedisStrategy) holds the lease protocol (which ID it tries, its
//! retries, the amnesia guard's verdicts, the floors it sends, its random choices) and runs it
//! over any transport. A request names one step of the protocol: a read of the free IDs, or one
//! of the Lua scripts with its arguments. The default transport, [`Connection`], sends it to a
//! server as those commands and scripts; another transport can carry the same requests to
//! something else (a simulated server), with its own clock and random source, so that the
//! protocol it runs is the one production runs.

use std::future::Future;
use std::time::{Duration, Instant};

use lease_core::MachineId;
use lease_core::time::millis;
use redis::aio::ConnectionLike;

use crate::scripts::{
    ACQUIRE_SCRIPT, RELEASE_SCRIPT, RENEW_SCRIPT, START_HOLD_OFF_SCRIPT, time_ms,
};
use crate::wire;
pub use crate::wire::FreeIds;

/// One round trip to the server, at the level the strategy speaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// The free IDs and their floors (`HGETALL` of the hash); with `info`, the server's
    /// `INFO server memory` in the same round trip, for the amnesia guard.
    Read {
        /// Whether `INFO` goes with it.
        info: bool,
    },
    /// The acquire script: the claim of `id` with `HSETEX FNX` and its floor raised to
    /// `floor_ms`, on the server process `run_id` names (when given), once the hash's
    /// initialization marker allows (when a `hold_off` is given: the one a missing marker
    /// starts).
    Claim {
        /// The machine ID.
        id: MachineId,
        /// The new lease's token.
        token: String,
        /// The lease fields' TTL.
        ttl: Duration,
        /// The floor to raise the stored one to.
        floor_ms: u64,
        /// The run ID the amnesia guard checked.
        run_id: Option<String>,
        /// The amnesia hold-off (`None`: the marker is not checked).
        hold_off: Option<Duration>,
    },
    /// The renew script: `HSETEX FXX` of both lease fields, the floor raised if that succeeded;
    /// a failed one starts `hold_off` when the marker is missing.
    Renew {
        /// The machine ID.
        id: MachineId,
        /// The lease's token.
        token: String,
        /// The lease fields' new TTL.
        ttl: Duration,
        /// The floor to raise the stored one to.
        floor_ms: u64,
        /// The amnesia hold-off (`None`: the marker is not checked).
        hold_off: Option<Duration>,
    },
    /// The release script: the lease fields' TTL set to `guard`, the marker deleted, the floor
    /// set to `floor_ms` (only raised when the lease was no longer this holder's).
    Release {
        /// The machine ID.
        id: MachineId,
        /// The lease's token.
        token: String,
        /// How long the ID field stays.
        guard: Duration,
        /// The floor to store.
        floor_ms: u64,
    },
    /// The script that starts the marker's hold-off if the marker is missing.
    StartHoldOff {
        /// The amnesia hold-off.
        hold_off: Duration,
    },
    /// `WAIT` for `required` replicas, at most `timeout`.
    WaitForReplicas {
        /// Replicas that must confirm.
        required: u32,
        /// How long the server waits.
        timeout: Duration,
    },
}

impl Request {
    /// The commands this request runs, as error messages name them.
    #[must_use]
    pub const fn command(&self) -> &'static str {
        match self {
            Self::Read { info: false } => "HGETALL",
            Self::Read { info: true } => "INFO server memory + HGETALL",
            Self::Claim { .. } => "EVALSHA (acquire script)",
            Self::Renew { .. } => "EVALSHA (renew script)",
            Self::Release { .. } => "EVALSHA (release script)",
            Self::StartHoldOff { .. } => "EVALSHA (start hold-off script)",
            Self::WaitForReplicas { .. } => "WAIT",
        }
    }
}

/// What `INFO server memory` says that the amnesia guard reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `maxmemory_policy`.
    pub maxmemory_policy: String,
    /// `uptime_in_seconds`.
    pub uptime: Duration,
    /// `run_id`: the server process.
    pub run_id: String,
}

impl ServerInfo {
    /// The fields of an `INFO` reply, or what it lacks.
    fn parse(info: &str) -> Result<Self, TransportError> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let missing = |what: &str| TransportError::Unexpected(format!("no {what} in INFO"));
        Ok(Self {
            maxmemory_policy: field("maxmemory_policy")
                .ok_or_else(|| missing("maxmemory_policy"))?
                .to_owned(),
            uptime: field("uptime_in_seconds")
                .and_then(|s| s.parse::<u64>().ok())
                .map(Duration::from_secs)
                .ok_or_else(|| missing("uptime_in_seconds"))?,
            run_id: field("run_id").ok_or_else(|| missing("run_id"))?.to_owned(),
        })
    }
}

/// What the acquire script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Claimed; the floor stored before, and the server's clock (Unix ms).
    Won {
        /// The floor stored before.
        floor_ms: u64,
        /// `TIME`, Unix ms.
        server_ms: u64,
    },
    /// Another node holds the ID now.
    Taken,
    /// The ID's floor field holds this, which is no floor.
    Unreadable(String),
    /// The server is not the process the amnesia guard checked: this is its run ID.
    ServerChanged(String),
    /// The hash's initialization marker holds acquisitions off until `open_at_ms` (Unix ms on
    /// the server's clock, which read `server_ms`).
    HeldOff {
        /// The marker's time.
        open_at_ms: u64,
        /// `TIME`, Unix ms.
        server_ms: u64,
    },
}

/// The server's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The read: `INFO` if asked, and the free IDs.
    Read {
        /// The server's `INFO`.
        info: Option<ServerInfo>,
        /// The free IDs, with their floors.
        free: FreeIds,
        /// The run ID of the server process `migrate` initialized the hash on (field
        /// `open_run`), if any.
        initialized_on: Option<String>,
    },
    /// The acquire script's answer.
    Claim(Claim),
    /// The renew script's answer.
    Renewed {
        /// Both lease fields were there, and were set.
        renewed: bool,
        /// `TIME`, Unix ms.
        server_ms: u64,
    },
    /// Whether the release script found this holder's marker.
    Released(bool),
    /// The marker's time (Unix ms) after [`Request::StartHoldOff`].
    OpenAt(u64),
    /// How many replicas confirmed.
    Replicas(i64),
}

/// A round trip that brought no reply the strategy can use: the request may or may not have
/// been applied.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// The command failed: the server's error, or none came.
    Failed(redis::RedisError),
    /// The server answered something this version does not read.
    Unexpected(String),
}

impl From<redis::RedisError> for TransportError {
    fn from(error: redis::RedisError) -> Self {
        Self::Failed(error)
    }
}

/// How a [`RedisStrategy`](crate::RedisStrategy) reaches the server, and what it reads from its
/// environment: a monotonic clock for its client-side timers (the hold-off after the server's
/// run ID changed) and a random source (lease tokens, the free ID it tries).
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` and waits for its answer.
    fn exchange(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send;

    /// A monotonic clock: time since any fixed point.
    fn now(&self) -> Duration;

    /// A random number.
    fn random(&self) -> u64;
}

/// The production transport: a `redis` async connection to the server holding the lease hash
/// `key`, cloned per request (so it must be shareable, as a `ConnectionManager` or a
/// `MultiplexedConnection` is).
#[derive(Clone)]
pub struct Connection<C> {
    connection: C,
    key: String,
    started: Instant,
}

impl<C> std::fmt::Debug for Connection<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<C> Connection<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Requests on the lease hash `key` over `connection`.
    pub fn new(connection: C, key: impl Into<String>) -> Self {
        Self {
            connection,
            key: key.into(),
            started: Instant::now(),
        }
    }

    /// A clone of the connection.
    pub(crate) fn connection(&self) -> C {
        self.connection.clone()
    }

    async fn send(&self, request: Request) -> Result<Reply, TransportError> {
        let mut connection = self.connection.clone();
        let connection = &mut connection;
        let key = self.key.as_str();
        match request {
            Request::Read { info } => {
                let mut hgetall = redis::cmd("HGETALL");
                hgetall.arg(key);
                let (info, pairs): (Option<String>, Vec<Pair>) = if info {
                    redis::pipe()
                        .cmd("INFO")
                        .arg("server")
                        .arg("memory")
                        .add_command(hgetall)
                        .query_async(connection)
                        .await
                        .map(|(info, pairs)| (Some(info), pairs))?
                } else {
                    (None, hgetall.query_async(connection).await?)
                };
                Ok(Reply::Read {
                    info: info.as_deref().map(ServerInfo::parse).transpose()?,
                    free: wire::free_ids_with_floors(&pairs),
                    initialized_on: wire::initialized_on(&pairs),
                })
            }
            Request::Claim {
                id,
                token,
                ttl,
                floor_ms,
                run_id,
                hold_off,
            } => {
                let (status, stored, seconds, micros): (i64, Vec<u8>, u64, u64) = ACQUIRE_SCRIPT
                    .key(key)
                    .arg(id.get().to_string())
                    .arg(token)
                    .arg(millis(ttl))
                    .arg(floor_ms.to_string())
                    .arg(run_id.unwrap_or_default())
                    .arg(hold_off_arg(hold_off))
                    .invoke_async(connection)
                    .await?;
                let server_ms = time_ms(seconds, micros);
                let text = || String::from_utf8_lossy(&stored).into_owned();
                Ok(Reply::Claim(match status {
                    1 => Claim::Won {
                        floor_ms: ms("floor", &stored)?,
                        server_ms,
                    },
                    0 => Claim::Taken,
                    2 => Claim::Unreadable(text()),
                    3 => Claim::ServerChanged(text()),
                    4 => Claim::HeldOff {
                        open_at_ms: ms("open_at", &stored)?,
                        server_ms,
                    },
                    other => return Err(TransportError::Unexpected(other.to_string())),
                }))
            }
            Request::Renew {
                id,
                token,
                ttl,
                floor_ms,
                hold_off,
            } => {
                let (renewed, seconds, micros): (i64, u64, u64) = RENEW_SCRIPT
                    .key(key)
                    .arg(id.get().to_string())
                    .arg(token)
                    .arg(millis(ttl))
                    .arg(floor_ms.to_string())
                    .arg(hold_off_arg(hold_off))
                    .invoke_async(connection)
                    .await?;
                Ok(Reply::Renewed {
                    renewed: flag(renewed)?,
                    server_ms: time_ms(seconds, micros),
                })
            }
            Request::Release {
                id,
                token,
                guard,
                floor_ms,
            } => {
                let released: i64 = RELEASE_SCRIPT
                    .key(key)
                    .arg(id.get().to_string())
                    .arg(token)
                    .arg(millis(guard))
                    .arg(floor_ms.to_string())
                    .invoke_async(connection)
                    .await?;
                Ok(Reply::Released(flag(released)?))
            }
            Request::StartHoldOff { hold_off } => {
                let at: Vec<u8> = START_HOLD_OFF_SCRIPT
                    .key(key)
                    .arg(millis(hold_off))
                    .invoke_async(connection)
                    .await?;
                ms("open_at", &at).map(Reply::OpenAt)
            }
            Request::WaitForReplicas { required, timeout } => {
                let acknowledged: i64 = redis::cmd("WAIT")
                    .arg(required)
                    .arg(millis(timeout))
                    .query_async(connection)
                    .await?;
                Ok(Reply::Replicas(acknowledged))
            }
        }
    }
}

/// A hash field and its value, as bytes: one corrupt value must not hide the others.
type Pair = (Vec<u8>, Vec<u8>);

/// A script's Unix ms (a floor, the marker's time), read as a floor is.
fn ms(what: &str, value: &[u8]) -> Result<u64, TransportError> {
    wire::parse_floor_value(value).ok_or_else(|| {
        TransportError::Unexpected(format!("{what} {:?}", String::from_utf8_lossy(value)))
    })
}

/// A script's 0 or 1.
fn flag(value: i64) -> Result<bool, TransportError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(TransportError::Unexpected(other.to_string())),
    }
}

/// The scripts' hold-off argument: ms, or empty when the marker is not checked.
fn hold_off_arg(hold_off: Option<Duration>) -> String {
    hold_off.map(|h| millis(h).to_string()).unwrap_or_default()
}

impl<C> Transport for Connection<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn exchange(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send {
        self.send(request)
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn random(&self) -> u64 {
        rand::random()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_and_missing_ones_named() {
        let info = "# Server\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n# Memory\r\nmaxmemory_policy:noeviction\r\n";
        assert_eq!(
            ServerInfo::parse(info).unwrap(),
            ServerInfo {
                maxmemory_policy: "noeviction".to_owned(),
                uptime: Duration::from_secs(42),
                run_id: "abc123".to_owned(),
            }
        );
        let Err(TransportError::Unexpected(message)) = ServerInfo::parse("run_id:x\r\n") else {
            panic!("an INFO without maxmemory_policy was read");
        };
        assert_eq!(message, "no maxmemory_policy in INFO");
    }
}
