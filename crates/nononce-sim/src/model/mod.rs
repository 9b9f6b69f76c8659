//! Models of each coordinator's server, and the backends' own strategies talking to them.
//!
//! A model is split where the real backend is split: the *server* (a SQL lease table with the
//! database's clock, a Redis hash with field TTLs, an etcd keyspace with leases and revisions)
//! is a plain state machine that applies one request at a time at a given coordinator time; the
//! *client* (the strategy) runs the real backend's client-side logic (retries, the amnesia
//! guard's verdicts, which free ID to try) and sends requests over a [`Link`]. The client is the
//! backend crate's own strategy, over a transport that sends its requests over the link
//! ([`SimTransport`], for SQL [`sql::SqlTransport`], for ZooKeeper [`zookeeper::ZkTransport`]), and each server answers its
//! backend's own request type. In the simulation a link is the simulated network; in the
//! conformance tests it is [`DirectLink`], which applies each request at once on a clock the
//! test controls.

mod client;
pub mod etcd;
pub mod fixed;
pub mod redis;
pub mod sql;
mod store;
pub mod zookeeper;

use core::fmt;

use lease_core::MachineId;

pub use client::{Client, Handles, SimTransport, Simulated};
pub use store::{ClockFn, DirectLink, EtcdStore, RedisStore, SqlStore, ZkStore};

use crate::rng::Rng;

/// Which of the protections under test are on. All are on by default; each can be switched off
/// to prove that the simulation finds the duplicates it prevents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(clippy::struct_excessive_bools)]
pub struct Guards {
    /// A release leaves the ID blocked for the guard interval (off: it frees the ID at once,
    /// as NoNoncense does).
    pub release_guard: bool,
    /// The timestamp floor (off: the strategy's profile says it records none, and it ignores
    /// the floors it is sent and reports floor 0 with every grant, as a store without floors).
    pub floor: bool,
    /// The store's amnesia guard (SQL: server identity; Redis: uptime and run ID; etcd: store
    /// revision and cluster ID; ZooKeeper: the zxids of the floors).
    pub amnesia: bool,
    /// The store's initialization marker, which catches lease data lost while the server stays
    /// up (Redis: field `open_at` of the hash; SQL: rows missing from the seeded table, put back
    /// blocked; etcd: `<prefix>initialized` and `<prefix>hold-off`). Off: a wiped store has
    /// every ID free, as before the marker existed. The real backends switch it with their
    /// amnesia guard, so it is on only where [`amnesia`](Self::amnesia) is too.
    pub marker: bool,
    /// The cached lease's bound of what the factories issued (`LeaseCache::record_issued`),
    /// recorded as the tokio driver does: on every renewal and after a panic. Off: a manager
    /// resumed from the cache with new factories starts them above the granted floor only.
    pub issued_record: bool,
    /// The manager's deadlines, sent as floors with an acquire or renewal, converted to the
    /// floors' terms for factories on another epoch (`LeaseTarget::floor_of`), as the tokio
    /// driver does. Off: sent as clock milliseconds, as before floors knew the epoch.
    pub epoch_floor: bool,
    /// Static node lists give each host the machine ID written beside it (`NAME=ID`, as
    /// `lease-static` reads them). Off: a host's ID is its place in the sorted list, as
    /// `lease-static` derived it before it refused such lists (the IDs its refusal writes
    /// out), so an inserted host moves the IDs after it.
    pub explicit_ids: bool,
}

/// The largest offset of a node's clock from the store's that the Redis and SQL amnesia guards
/// allow for, as lease-redis and lease-sql default to: their hold-off outlasts the longest
/// lease by twice it, and nodes refuse grants read on a store clock further off.
pub const MAX_CLOCK_OFFSET_MS: u64 = 3_600_000;

/// The amnesia hold-off of a store granting at most `max_lease_ms`.
#[must_use]
pub const fn amnesia_hold_off_ms(max_lease_ms: u64) -> u64 {
    max_lease_ms.saturating_add(2 * MAX_CLOCK_OFFSET_MS)
}

impl Guards {
    /// Every guard on.
    pub const ALL: Self = Self {
        release_guard: true,
        floor: true,
        amnesia: true,
        marker: true,
        issued_record: true,
        epoch_floor: true,
        explicit_ids: true,
    };

    /// Whether the initialization marker is checked: the marker switch, within the amnesia
    /// guard's.
    #[must_use]
    pub const fn marker_checked(self) -> bool {
        self.amnesia && self.marker
    }

    /// A figure in the floors' terms (a request's floor or clock, a stored floor) as a model
    /// strategy uses it: itself, or 0 with the floor switched off, so that the store keeps no
    /// floor, prefers no ID by one and reports none.
    #[must_use]
    pub const fn floor_ms(self, ms: u64) -> u64 {
        if self.floor { ms } else { 0 }
    }

    /// The profile of a model strategy named `name`: recording floors while the floor is on.
    #[must_use]
    pub const fn profile(self, name: &'static str) -> lease_core::Profile {
        let profile = lease_core::Profile::new(name);
        if self.floor {
            profile.recording_floor()
        } else {
            profile
        }
    }
}

impl Default for Guards {
    fn default() -> Self {
        Self::ALL
    }
}

/// The lease handle of every model: the ID and a token unique to one acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelLease {
    /// The leased ID.
    pub id: MachineId,
    /// The acquisition's token (the ID itself for the fixed model).
    pub token: u128,
}

/// The transport could not deliver a request or its reply: refused, reset or unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetError;

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection refused or reset")
    }
}

impl From<NetError> for std::io::Error {
    fn from(e: NetError) -> Self {
        Self::new(std::io::ErrorKind::ConnectionReset, e.to_string())
    }
}

/// A request to a coordinator model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// To the SQL table model: lease-sql's own request, with its statements' hold-off.
    Sql(sql::Statement),
    /// To the Redis hash model: lease-redis's own request.
    Redis(lease_redis::transport::Request),
    /// To the etcd cluster model: lease-etcd's own request.
    Etcd(lease_etcd::transport::Request),
    /// To the ZooKeeper ensemble model: a new session, or lease-zookeeper's own request on one.
    ZooKeeper(zookeeper::ZkRequest),
    /// No message: the node waits this many ms on its own clock (a static strategy's wait of
    /// the margin), answered with [`Reply::Slept`] without the network.
    Sleep(u64),
}

/// A coordinator model's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// From the SQL table model: lease-sql's reply, or the database's error.
    Sql(sql::SqlResponse),
    /// From the Redis hash model: lease-redis's reply.
    Redis(lease_redis::transport::Reply),
    /// From the etcd cluster model.
    Etcd(etcd::EtcdResponse),
    /// From the ZooKeeper ensemble model.
    ZooKeeper(zookeeper::ZkResponse),
    /// The end of a [`Request::Sleep`].
    Slept,
    /// The request was for another kind of server, or of a later protocol than the model's.
    Unanswerable,
}

/// How a model strategy reaches its server.
pub trait Link: Send + Sync + 'static {
    /// Sends `request` and waits for its reply. A request may be applied although the reply
    /// never arrives; the future then never completes (the caller's timeout ends it).
    fn exchange(&self, request: Request) -> impl Future<Output = Result<Reply, NetError>> + Send;

    /// The client's own monotonic clock (Unix ms), for client-side timers such as the Redis
    /// amnesia guard's hold-off after a run-ID change.
    fn now_ms(&self) -> u64;
}

/// A coordinator model's server side.
// One per run: the size of the etcd keyspace inline costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Server {
    /// A SQL lease table.
    Sql(sql::SqlServer),
    /// A Redis hash.
    Redis(redis::RedisServer),
    /// An etcd cluster.
    Etcd(etcd::EtcdServer),
    /// A ZooKeeper ensemble.
    ZooKeeper(zookeeper::ZkServer),
}

impl Server {
    /// Holds the server to the guards that are its own (the initialization markers, etcd's
    /// rewind check).
    pub const fn set_guards(&mut self, guards: Guards) {
        match self {
            Self::Sql(server) => server.set_guards(guards),
            Self::Redis(server) => server.set_guards(guards),
            Self::Etcd(server) => server.set_guards(guards),
            Self::ZooKeeper(server) => server.set_guards(guards),
        }
    }

    /// Applies `request` at true time `t` and coordinator time `now_ms`.
    pub fn handle(&mut self, t: u64, now_ms: u64, request: Request) -> Reply {
        match (self, request) {
            (Self::Sql(server), Request::Sql(r)) => Reply::Sql(server.handle(t, now_ms, r)),
            (Self::Redis(server), Request::Redis(r)) => server
                .handle(now_ms, r)
                .map_or(Reply::Unanswerable, Reply::Redis),
            (Self::Etcd(server), Request::Etcd(r)) => server
                .handle(now_ms, r)
                .map_or(Reply::Unanswerable, Reply::Etcd),
            (Self::ZooKeeper(server), Request::ZooKeeper(r)) => server
                .handle(now_ms, r)
                .map_or(Reply::Unanswerable, Reply::ZooKeeper),
            _ => Reply::Unanswerable,
        }
    }

    /// What the server answers while it is down or without a leader, if anything: an etcd
    /// leader that was cut off still answers keep-alives for a moment (`rng` draws which member
    /// a request reached).
    pub fn answer_while_down(
        &self,
        now_ms: u64,
        request: &Request,
        rng: &mut Rng,
    ) -> Option<Reply> {
        match (self, request) {
            (Self::Etcd(server), Request::Etcd(r)) => {
                server.answer_cut_off(now_ms, r, rng).map(Reply::Etcd)
            }
            _ => None,
        }
    }

    /// Whether the server's leases run on its wall clock, which a clock jump moves (etcd's
    /// leases and ZooKeeper's sessions run on its monotonic clock).
    #[must_use]
    pub const fn leases_on_wall_clock(&self) -> bool {
        !matches!(self, Self::Etcd(_) | Self::ZooKeeper(_))
    }

    /// Ends whatever lease holds `id`, as if its TTL had run out (the conformance harness).
    pub fn expire(&mut self, now_ms: u64, id: MachineId) {
        match self {
            Self::Sql(server) => server.expire(now_ms, id),
            Self::Redis(server) => server.expire(id),
            Self::Etcd(server) => server.expire(now_ms, id),
            Self::ZooKeeper(server) => server.expire(now_ms, id),
        }
    }

    /// An operator frees `id` at once, whoever holds it; its floor stays. Whether it was held.
    pub fn force_release(&mut self, t: u64, now_ms: u64, id: MachineId) -> bool {
        match self {
            Self::Sql(server) => server.force_release(t, now_ms, id),
            Self::Redis(server) => server.force_release(now_ms, id),
            Self::Etcd(server) => server.force_release(now_ms, id),
            Self::ZooKeeper(server) => server.force_release(now_ms, id),
        }
    }

    /// The IDs leased right now.
    #[must_use]
    pub fn held(&self, now_ms: u64) -> Vec<MachineId> {
        match self {
            Self::Sql(server) => server.held(now_ms),
            Self::Redis(server) => server.held(now_ms),
            Self::Etcd(server) => server.held(now_ms),
            Self::ZooKeeper(server) => server.held(now_ms),
        }
    }
}

/// A machine ID from a row index below 512.
pub(crate) fn machine_id(index: usize) -> MachineId {
    MachineId::new(u16::try_from(index).unwrap_or(u16::MAX)).unwrap_or_else(|_| {
        // Tables hold at most one row per ID; an index past them is a bug in the model.
        panic!(
            "model row {index} is outside the {} machine ids",
            MachineId::COUNT
        )
    })
}
