//! A model of `lease-redis` on Valkey 9 / Redis 8, held to its commands and scripts:
//!
//! - the hash: per ID a lease (the ID field and its ownership marker, written together by one
//!   `HSETEX`, sharing one field TTL on the server's clock) and a floor field without TTL;
//! - the hash's initialization marker `open_at` (a field without TTL: the store time from which
//!   acquisitions may claim), written by `migrate`; the model starts with it, as a deployed
//!   store does. A hash without it lost its lease data (or is new): the first script to find it
//!   missing writes it as now + the amnesia hold-off;
//! - acquire: `INFO server` with the first `HGETALL` (the amnesia guard: uptime below the
//!   longest lease, or a run ID this process saw change; a refusal also runs the script that
//!   starts the marker's hold-off), a random free ID among those whose floor is below the
//!   acquirer's clock (else the lower-floored of two random picks), then the acquire script
//!   (the server's run ID compared with the one the guard checked, the marker's time come,
//!   `HSETEX FNX`, floor raised, `TIME`), up to three attempts;
//! - renew: the renew script (`HSETEX FXX`, floor raised only if that succeeded, `TIME`; a
//!   failed one starts the marker's hold-off if the marker is missing);
//! - release: the release script (`HSETEX FXX PX guard`: the guard becomes the fields' TTL;
//!   then the holder's marker is deleted, so the ID field blocks the ID for the guard while a
//!   renewal arriving later fails; the floor set if the marker was there, else only raised);
//! - floors recorded by acquire and renew are lowered by what `max_lease_duration` cut off the
//!   request (`lease_core::time::granted_floor`), which keeps them at the deadline the grant
//!   allows.
//!
//! A restart may forget everything (no persistence), keep the last snapshot (RDB) or keep
//! everything (AOF with `appendfsync always`); it always gets a new run ID and an uptime of 0.
//! A wipe deletes the hash (`DEL`, `FLUSHALL`, eviction), marker included, while the server
//! stays up: run ID and uptime unchanged.

use std::collections::VecDeque;

use std::time::Duration;

use base64ct::{Base64UrlUnpadded, Encoding};
use lease_core::time::millis;
use lease_core::{ErrorKind, MachineId};
use lease_manager::Failure;
use lease_redis::transport::{
    Claim, FreeIds, Reply as RedisReply, Request as RedisRequest, ServerInfo, Transport,
    TransportError,
};
use lease_redis::{AmnesiaGuard, RedisLease, RedisOptions, RedisStrategy};

use super::client::{Client, SimTransport, Simulated};
use super::{Guards, Link, Reply, Request, machine_id};

/// The ID field and the ownership marker of one lease: set together with one TTL; the
/// release deletes the marker and leaves the ID field for the guard.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fields {
    token: String,
    expires_at: u64,
    marker: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Hash {
    leases: Vec<Option<Fields>>,
    floors: Vec<u64>,
    /// The initialization marker `open_at` (server ms), if the hash has it.
    open_at: Option<u64>,
}

impl Hash {
    /// No hash: every field absent, the marker too.
    fn new(capacity: u16) -> Self {
        let n = usize::from(capacity.min(MachineId::COUNT));
        Self {
            leases: vec![None; n],
            floors: vec![0; n],
            open_at: None,
        }
    }

    /// A hash `migrate` initialized: only the marker, at a time that has come.
    fn initialized(capacity: u16) -> Self {
        Self {
            open_at: Some(0),
            ..Self::new(capacity)
        }
    }

    fn live(&self, index: usize, now: u64) -> Option<&Fields> {
        self.leases
            .get(index)?
            .as_ref()
            .filter(|f| f.expires_at > now)
    }
}

/// How a restart treats the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// `save ""`, `appendonly no`: everything forgotten.
    None,
    /// RDB snapshots: the state of the last snapshot.
    Snapshot,
    /// `appendonly yes`, `appendfsync always`: nothing acknowledged lost.
    Always,
}

/// How often the RDB snapshot is taken, in server ms.
const SNAPSHOT_EVERY_MS: u64 = 60_000;
/// Writes older than this have reached the replica whatever its lag.
const MAX_LAG_MS: u64 = 300_000;

/// One write, as the replica receives it.
#[derive(Debug, Clone)]
enum Change {
    /// An ID's lease fields and floor.
    Entry(usize, Option<Fields>, u64),
    /// The initialization marker.
    OpenAt(u64),
    /// The hash deleted.
    Deleted,
}

/// A Valkey/Redis server holding one lease hash.
#[derive(Debug, Clone)]
pub struct RedisServer {
    hash: Hash,
    snapshot: Hash,
    snapshot_at: u64,
    replica: Hash,
    log: VecDeque<(u64, Change)>,
    run_id: u64,
    started_at: u64,
    /// Whether the scripts check the initialization marker (the marker guard's switch; the
    /// amnesia guard's is the client's).
    checks_marker: bool,
}

/// A model run ID as `INFO` prints one: 40 hex digits.
fn run_id_text(run_id: u64) -> String {
    format!("{run_id:040x}")
}

impl RedisServer {
    /// A hash of `capacity` IDs (at most 512; the rest count as held by foreign owners),
    /// initialized (its marker written by `migrate`) and without leases, on a server started at
    /// `started_at` (server ms) with run ID `run_id`.
    #[must_use]
    pub fn new(capacity: u16, started_at: u64, run_id: u64) -> Self {
        let hash = Hash::initialized(capacity);
        Self {
            snapshot: hash.clone(),
            replica: hash.clone(),
            hash,
            snapshot_at: started_at,
            log: VecDeque::new(),
            run_id,
            started_at,
            checks_marker: true,
        }
    }

    /// Has the server check the initialization marker only while `guards` has the marker
    /// on: with it off, a wiped hash has every ID free at once.
    pub const fn set_guards(&mut self, guards: Guards) {
        self.checks_marker = guards.marker;
    }

    /// The run ID.
    #[must_use]
    pub const fn run_id(&self) -> u64 {
        self.run_id
    }

    /// The server comes back from a restart at server time `now` with run ID `run_id`,
    /// keeping what `persistence` kept. Returns how many leases were forgotten.
    pub fn restart(&mut self, now: u64, run_id: u64, persistence: Persistence) -> usize {
        let before = self.hash.leases.iter().filter(|l| l.is_some()).count();
        match persistence {
            Persistence::None => self.hash = Hash::new(self.capacity()),
            Persistence::Snapshot => self.hash = self.snapshot.clone(),
            Persistence::Always => {}
        }
        let after = self.hash.leases.iter().filter(|l| l.is_some()).count();
        self.run_id = run_id;
        self.started_at = now;
        self.snapshot = self.hash.clone();
        self.snapshot_at = now;
        self.replica = self.hash.clone();
        self.log.clear();
        before.saturating_sub(after)
    }

    /// Fails over to a replica that has every write of at least `lag_ms` before server time
    /// `now`, has been up long, and has its own run ID.
    pub fn fail_over(&mut self, now: u64, lag_ms: u64, run_id: u64) -> usize {
        self.replicate_until(now.saturating_sub(lag_ms));
        let lost = self.log.len();
        self.log.clear();
        self.hash = self.replica.clone();
        self.run_id = run_id;
        self.started_at = 0;
        lost
    }

    fn capacity(&self) -> u16 {
        u16::try_from(self.hash.leases.len()).unwrap_or(MachineId::COUNT)
    }

    fn set(&mut self, now: u64, index: usize, fields: Option<Fields>) {
        let floor = self.hash.floors[index];
        self.log
            .push_back((now, Change::Entry(index, fields.clone(), floor)));
        self.hash.leases[index] = fields;
    }

    /// `HSETEX` of ID `index`'s field holding `token` for `ttl`, with its holder's marker if
    /// `marker`.
    fn put_lease(&mut self, now: u64, index: usize, token: String, ttl: Duration, marker: bool) {
        let expires_at = now.saturating_add(millis(ttl));
        let fields = Fields {
            token,
            expires_at,
            marker,
        };
        self.set(now, index, Some(fields));
    }

    fn set_floor(&mut self, now: u64, index: usize, floor: u64) {
        self.hash.floors[index] = floor;
        let fields = self.hash.leases[index].clone();
        self.log
            .push_back((now, Change::Entry(index, fields, floor)));
    }

    fn replicate_until(&mut self, t: u64) {
        while let Some((at, _)) = self.log.front() {
            if *at > t {
                break;
            }
            let Some((_, change)) = self.log.pop_front() else {
                break;
            };
            match change {
                Change::Entry(index, fields, floor) => {
                    self.replica.leases[index] = fields;
                    self.replica.floors[index] = floor;
                }
                Change::OpenAt(at) => self.replica.open_at = Some(at),
                Change::Deleted => self.replica = Hash::new(self.capacity()),
            }
        }
    }

    /// The lease hash is deleted at server time `now` (`DEL`, `FLUSHALL`, eviction), its marker
    /// with it; the server stays up. Returns how many leases it held.
    pub fn wipe(&mut self, now: u64) -> usize {
        let held = self.held(now).len();
        self.hash = Hash::new(self.capacity());
        self.log.push_back((now, Change::Deleted));
        held
    }

    /// The scripts' `open_at(now, hold)`: the marker's time, written as `now + hold_off_ms`
    /// first if it is missing.
    fn open_at(&mut self, now: u64, hold_off_ms: u64) -> u64 {
        if let Some(at) = self.hash.open_at {
            return at;
        }
        let at = now.saturating_add(hold_off_ms);
        self.hash.open_at = Some(at);
        self.log.push_back((now, Change::OpenAt(at)));
        at
    }

    /// The initialization marker's time, if the hash has one.
    #[must_use]
    pub const fn marker(&self) -> Option<u64> {
        self.hash.open_at
    }

    /// Applies one request at server time `now`, as the scripts and commands it names do
    /// (`None`: a request of a later protocol, which the model cannot answer).
    pub fn handle(&mut self, now: u64, request: RedisRequest) -> Option<RedisReply> {
        self.replicate_until(now.saturating_sub(MAX_LAG_MS));
        if now.saturating_sub(self.snapshot_at) >= SNAPSHOT_EVERY_MS {
            self.snapshot = self.hash.clone();
            self.snapshot_at = now;
        }
        Some(match request {
            RedisRequest::Read { info } => {
                let readable = (0..self.hash.leases.len())
                    .filter(|&i| self.hash.live(i, now).is_none())
                    .map(|i| (machine_id(i), self.hash.floors[i]))
                    .collect();
                RedisReply::Read {
                    info: info.then(|| ServerInfo {
                        maxmemory_policy: "noeviction".to_owned(),
                        uptime: Duration::from_secs(now.saturating_sub(self.started_at) / 1000),
                        run_id: run_id_text(self.run_id),
                    }),
                    free: FreeIds {
                        readable,
                        unreadable: Vec::new(),
                    },
                    // The model's hash was initialized before the server's run began (or was
                    // wiped since): its uptime always speaks for it.
                    initialized_on: None,
                }
            }
            RedisRequest::Claim {
                id,
                token,
                ttl,
                floor_ms,
                run_id,
                hold_off,
            } => RedisReply::Claim(self.claim(now, id, token, ttl, floor_ms, run_id, hold_off)),
            RedisRequest::Renew {
                id,
                token,
                ttl,
                floor_ms,
                hold_off,
            } => {
                let index = usize::from(id.get());
                // FXX: both the ID field and this holder's marker must be there.
                let renewed = self
                    .hash
                    .live(index, now)
                    .is_some_and(|f| f.token == token && f.marker);
                if renewed {
                    self.put_lease(now, index, token, ttl, true);
                    if floor_ms > self.hash.floors[index] {
                        self.set_floor(now, index, floor_ms);
                    }
                } else if let Some(hold_off) = self.marker_hold_off(hold_off) {
                    self.open_at(now, hold_off);
                }
                RedisReply::Renewed {
                    renewed,
                    server_ms: now,
                }
            }
            RedisRequest::Release {
                id,
                token,
                guard,
                floor_ms,
            } => {
                let index = usize::from(id.get());
                let ours = self
                    .hash
                    .live(index, now)
                    .is_some_and(|f| f.token == token && f.marker);
                if ours {
                    // HSETEX FXX PX guard, then HDEL of the marker.
                    self.put_lease(now, index, token, guard, false);
                    self.set_floor(now, index, floor_ms);
                } else if floor_ms > self.hash.floors.get(index).copied().unwrap_or(u64::MAX) {
                    // A lost lease's release only raises the floor.
                    self.set_floor(now, index, floor_ms);
                }
                RedisReply::Released(ours)
            }
            RedisRequest::StartHoldOff { hold_off } => {
                RedisReply::OpenAt(self.open_at(now, millis(hold_off)))
            }
            RedisRequest::WaitForReplicas { .. } => RedisReply::Replicas(0),
            _ => return None,
        })
    }

    /// The hold-off a script starts on a missing marker: none while the marker is not checked.
    fn marker_hold_off(&self, hold_off: Option<Duration>) -> Option<u64> {
        hold_off.filter(|_| self.checks_marker).map(millis)
    }

    /// The acquire script.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        now: u64,
        id: MachineId,
        token: String,
        ttl: Duration,
        floor_ms: u64,
        run_id: Option<String>,
        hold_off: Option<Duration>,
    ) -> Claim {
        let current = run_id_text(self.run_id);
        if run_id.is_some_and(|checked| checked != current) {
            return Claim::ServerChanged(current);
        }
        if let Some(hold_off) = self.marker_hold_off(hold_off) {
            let open_at_ms = self.open_at(now, hold_off);
            if open_at_ms > now {
                return Claim::HeldOff {
                    open_at_ms,
                    server_ms: now,
                };
            }
        }
        let index = usize::from(id.get());
        let stored = self.hash.floors.get(index).copied().unwrap_or(0);
        if index >= self.hash.leases.len() || self.hash.live(index, now).is_some() {
            return Claim::Taken;
        }
        self.put_lease(now, index, token, ttl, true);
        if floor_ms > stored {
            self.set_floor(now, index, floor_ms);
        }
        Claim::Won {
            floor_ms: stored,
            server_ms: now,
        }
    }

    /// Deletes the ID field and its marker (the conformance harness).
    pub fn expire(&mut self, id: MachineId) {
        let index = usize::from(id.get());
        if index < self.hash.leases.len() {
            self.hash.leases[index] = None;
        }
    }

    /// `force_release`: `HDEL` of the ID field and the holder's marker; the floor stays.
    pub fn force_release(&mut self, now: u64, id: MachineId) -> bool {
        let index = usize::from(id.get());
        if self.hash.live(index, now).is_some() {
            self.set(now, index, None);
            true
        } else {
            false
        }
    }

    /// The IDs leased at `now`.
    #[must_use]
    pub fn held(&self, now: u64) -> Vec<MachineId> {
        (0..self.hash.leases.len())
            .filter(|&i| self.hash.live(i, now).is_some())
            .map(machine_id)
            .collect()
    }

    /// The floor stored with `id`.
    #[must_use]
    pub fn floor(&self, id: MachineId) -> u64 {
        self.hash
            .floors
            .get(usize::from(id.get()))
            .copied()
            .unwrap_or(0)
    }
}

impl<L: Link> Transport for SimTransport<L> {
    fn exchange(
        &self,
        request: RedisRequest,
    ) -> impl Future<Output = Result<RedisReply, TransportError>> + Send {
        let reply = self.link.exchange(Request::Redis(request));
        async move {
            match reply.await {
                Ok(Reply::Redis(reply)) => Ok(reply),
                Ok(other) => Err(TransportError::Unexpected(format!(
                    "not a Redis lease hash: {other:?}"
                ))),
                Err(e) => Err(TransportError::Failed(std::io::Error::from(e).into())),
            }
        }
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.link.now_ms())
    }

    fn random(&self) -> u64 {
        self.next_random()
    }
}

/// lease-redis's strategy over `link`, with `max_lease_duration` = `max_lease`, the clock
/// offset the simulation's amnesia hold-off allows for, the amnesia guard of `guards`, and its
/// random choices drawn from `seed`.
///
/// # Panics
/// Never: the options are in range.
pub fn strategy<L: Link>(
    link: L,
    guards: Guards,
    max_lease: Duration,
    seed: u64,
) -> RedisStrategy<SimTransport<L>> {
    let options = RedisOptions::new()
        .with_max_lease_duration(max_lease.max(Duration::from_millis(1)))
        .with_max_clock_offset(Duration::from_millis(super::MAX_CLOCK_OFFSET_MS))
        .with_amnesia_guard(if guards.amnesia {
            AmnesiaGuard::HoldOff
        } else {
            AmnesiaGuard::Off
        });
    RedisStrategy::with_transport(SimTransport::new(link, seed), options)
        .unwrap_or_else(|e| panic!("the simulation's redis options: {e}"))
}

/// lease-redis's strategy as the simulation runs it, with its guard switches ([`Client`]).
pub type RedisClient<L> = Client<RedisStrategy<SimTransport<L>>>;

impl<L: Link> Simulated for RedisStrategy<SimTransport<L>> {
    /// The token's 16 bytes.
    fn key(lease: &RedisLease) -> Result<u128, Failure> {
        let mut bytes = [0u8; 16];
        match Base64UrlUnpadded::decode(lease.token(), &mut bytes).map(<[u8]>::len) {
            Ok(16) => Ok(u128::from_le_bytes(bytes)),
            _ => Err(Failure::new(
                ErrorKind::Other,
                format!(
                    "lease token {:?} is not 16 bytes of base64url",
                    lease.token()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn id(n: u16) -> MachineId {
        MachineId::new(n).unwrap()
    }

    fn claim(n: u16, token: &str, floor_ms: u64) -> RedisRequest {
        guarded_claim(n, token, floor_ms, None, None)
    }

    fn guarded_claim(
        n: u16,
        token: &str,
        floor_ms: u64,
        run_id: Option<u64>,
        hold_off_ms: Option<u64>,
    ) -> RedisRequest {
        RedisRequest::Claim {
            id: id(n),
            token: token.to_owned(),
            ttl: SECOND,
            floor_ms,
            run_id: run_id.map(run_id_text),
            hold_off: hold_off_ms.map(Duration::from_millis),
        }
    }

    fn renew(n: u16, token: &str, floor_ms: u64, hold_off_ms: Option<u64>) -> RedisRequest {
        RedisRequest::Renew {
            id: id(n),
            token: token.to_owned(),
            ttl: SECOND,
            floor_ms,
            hold_off: hold_off_ms.map(Duration::from_millis),
        }
    }

    fn release(n: u16, token: &str, guard_ms: u64, floor_ms: u64) -> RedisRequest {
        RedisRequest::Release {
            id: id(n),
            token: token.to_owned(),
            guard: Duration::from_millis(guard_ms),
            floor_ms,
        }
    }

    fn won(response: Option<RedisReply>) -> bool {
        matches!(response, Some(RedisReply::Claim(Claim::Won { .. })))
    }

    #[test]
    fn a_claim_lands_only_on_the_server_process_the_guard_checked() {
        let mut s = RedisServer::new(2, 0, 1);
        assert_eq!(
            s.handle(100, guarded_claim(0, "a", 50, Some(2), Some(10_000))),
            Some(RedisReply::Claim(Claim::ServerChanged(run_id_text(1))))
        );
        assert!(s.held(100).is_empty());
        assert!(won(
            s.handle(100, guarded_claim(0, "a", 50, Some(1), Some(10_000)))
        ));
    }

    #[test]
    fn a_lost_lease_release_only_raises_the_floor() {
        let mut s = RedisServer::new(2, 0, 1);
        assert!(won(s.handle(100, claim(1, "a", 50))));
        let released = |ours| Some(RedisReply::Released(ours));
        assert_eq!(s.handle(200, release(1, "b", 5000, 40)), released(false));
        assert_eq!(s.floor(id(1)), 50);
        assert_eq!(s.handle(200, release(1, "b", 5000, 90)), released(false));
        assert_eq!(s.floor(id(1)), 90);
        // Someone else's lease is untouched.
        assert_eq!(s.held(300), vec![id(1)]);
    }

    #[test]
    fn fnx_fxx_and_field_ttls() {
        let mut s = RedisServer::new(2, 0, 1);
        assert!(won(s.handle(100, claim(0, "a", 50))));
        assert!(!won(s.handle(200, claim(0, "b", 60))));
        // Release sets the TTL to the guard, even past the lease's own end.
        assert_eq!(
            s.handle(1000, release(0, "a", 5000, 70)),
            Some(RedisReply::Released(true))
        );
        assert_eq!(s.held(5999), vec![id(0)]);
        assert_eq!(s.floor(id(0)), 70);
        // An expired lease cannot be renewed.
        assert_eq!(
            s.handle(6001, renew(0, "a", 80, None)),
            Some(RedisReply::Renewed {
                renewed: false,
                server_ms: 6001
            })
        );
        assert_eq!(s.floor(id(0)), 70);
    }

    #[test]
    fn a_wiped_hash_holds_claims_off_from_the_first_node_that_finds_it() {
        let mut s = RedisServer::new(2, 0, 1);
        let guarded = |token, hold_off_ms| guarded_claim(0, token, 50, Some(1), hold_off_ms);
        assert!(won(s.handle(100, guarded("a", Some(10_000)))));
        assert_eq!(s.wipe(200), 1);
        assert_eq!(s.marker(), None);
        assert_eq!(s.run_id(), 1);
        // The holder's renewal is lost and starts the hold-off.
        assert_eq!(
            s.handle(300, renew(0, "a", 80, Some(10_000))),
            Some(RedisReply::Renewed {
                renewed: false,
                server_ms: 300
            })
        );
        assert_eq!(
            s.handle(400, guarded("b", Some(10_000))),
            Some(RedisReply::Claim(Claim::HeldOff {
                open_at_ms: 10_300,
                server_ms: 400
            }))
        );
        // Without the marker check the wiped ID is free at once.
        assert!(won(s.handle(500, guarded("c", None))));
        // Once the hold-off has passed (and that lease ended), claims go through again.
        assert!(!won(s.handle(10_299, guarded("d", Some(10_000)))));
        assert!(won(s.handle(10_300, guarded("d", Some(10_000)))));
    }

    #[test]
    fn with_the_marker_guard_off_a_wiped_hash_is_free_at_once() {
        let mut s = RedisServer::new(2, 0, 1);
        s.set_guards(Guards {
            marker: false,
            ..Guards::ALL
        });
        assert!(won(
            s.handle(100, guarded_claim(0, "a", 50, Some(1), Some(10_000)))
        ));
        s.wipe(200);
        assert!(won(
            s.handle(300, guarded_claim(0, "b", 50, Some(1), Some(10_000)))
        ));
        assert_eq!(s.marker(), None);
    }

    #[test]
    fn restarts_forget_what_was_not_persisted() {
        let mut s = RedisServer::new(4, 0, 1);
        s.handle(10, claim(1, "a", 5));
        assert_eq!(s.restart(20, 2, Persistence::Always), 0);
        assert_eq!(s.held(30).len(), 1);
        assert_eq!(s.restart(40, 3, Persistence::None), 1);
        assert!(s.held(50).is_empty());
        assert_eq!(s.floor(id(1)), 0);
        assert_eq!(s.run_id(), 3);
    }
}
