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
use std::sync::Mutex;
use std::time::Duration;

use lease_core::time::{granted_floor, millis};
use lease_core::{
    Acquire, ErrorKind, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};
use lease_manager::Failure;

use super::{Guards, Link, ModelLease, Request, Response, machine_id};
use crate::rng::Rng;

/// A command (or script) the Redis strategy model sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisRequest {
    /// `HGETALL`, with `INFO server` in the same pipeline when `info`.
    Read {
        /// Whether `INFO server` goes with it.
        info: bool,
    },
    /// The acquire script.
    Claim {
        /// The ID.
        id: u16,
        /// The new token.
        token: u128,
        /// Field TTL in ms.
        ttl_ms: u64,
        /// The floor to raise to.
        floor_ms: u64,
        /// The run ID the amnesia guard checked: no claim on another server process.
        run_id: Option<u64>,
        /// The amnesia hold-off in ms (`None`: the marker is not checked).
        hold_off_ms: Option<u64>,
    },
    /// The renew script.
    Renew {
        /// The ID.
        id: u16,
        /// The token.
        token: u128,
        /// Field TTL in ms.
        ttl_ms: u64,
        /// The floor to raise to.
        floor_ms: u64,
        /// The amnesia hold-off in ms, which a failed renew script starts when the marker is
        /// missing (`None`: the marker is not checked).
        hold_off_ms: Option<u64>,
    },
    /// The release script.
    Release {
        /// The ID.
        id: u16,
        /// The token.
        token: u128,
        /// The fields' new TTL (`None`: deleted at once, the switched-off guard).
        guard_ms: Option<u64>,
        /// The floor to set (only raised when the lease is no longer this holder's).
        floor_ms: u64,
    },
    /// The script that starts the marker's hold-off if the marker is missing, run when the
    /// restart guard refuses an acquisition.
    StartHoldOff {
        /// The amnesia hold-off in ms.
        hold_off_ms: u64,
    },
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisResponse {
    /// The read: `INFO server` (uptime in whole seconds, run ID) if asked, and the free IDs
    /// with their floors.
    Read {
        /// `uptime_in_seconds` and `run_id`.
        info: Option<(u64, u64)>,
        /// Free IDs and their floors (0 when absent).
        free: Vec<(u16, u64)>,
    },
    /// The claim: whether it won, the floor before, the server's `TIME` in ms.
    Claimed {
        /// Both fields were set.
        won: bool,
        /// The floor stored before.
        floor_before: u64,
        /// `TIME`.
        time_ms: u64,
    },
    /// The claim found another server process than the guard checked: its run ID.
    ServerChanged(u64),
    /// The initialization marker holds acquisitions off until `open_at` (server ms).
    HeldOff {
        /// The marker's time.
        open_at: u64,
        /// `TIME`.
        time_ms: u64,
    },
    /// The marker's time after [`RedisRequest::StartHoldOff`].
    OpenAt(u64),
    /// The renewal.
    Renewed {
        /// Both fields were there and were set.
        ok: bool,
        /// `TIME`.
        time_ms: u64,
    },
    /// Whether the release found this holder's marker.
    Released(bool),
    /// The request was for another kind of server.
    WrongServer,
}

/// The ID field and the ownership marker of one lease: set together with one TTL; the
/// release deletes the marker and leaves the ID field for the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    token: u128,
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

    fn live(&self, index: usize, now: u64) -> Option<Fields> {
        self.leases
            .get(index)
            .copied()
            .flatten()
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
#[derive(Debug, Clone, Copy)]
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
        }
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
        self.hash.leases[index] = fields;
        self.log
            .push_back((now, Change::Entry(index, fields, self.hash.floors[index])));
    }

    fn set_floor(&mut self, now: u64, index: usize, floor: u64) {
        self.hash.floors[index] = floor;
        let fields = self.hash.leases[index];
        self.log
            .push_back((now, Change::Entry(index, fields, floor)));
    }

    fn replicate_until(&mut self, t: u64) {
        while let Some(&(at, change)) = self.log.front() {
            if at > t {
                break;
            }
            match change {
                Change::Entry(index, fields, floor) => {
                    self.replica.leases[index] = fields;
                    self.replica.floors[index] = floor;
                }
                Change::OpenAt(at) => self.replica.open_at = Some(at),
                Change::Deleted => self.replica = Hash::new(self.capacity()),
            }
            self.log.pop_front();
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

    /// Applies one command at server time `now`.
    pub fn handle(&mut self, now: u64, request: RedisRequest) -> RedisResponse {
        self.replicate_until(now.saturating_sub(MAX_LAG_MS));
        if now.saturating_sub(self.snapshot_at) >= SNAPSHOT_EVERY_MS {
            self.snapshot = self.hash.clone();
            self.snapshot_at = now;
        }
        match request {
            RedisRequest::Read { info } => {
                let free = (0..self.hash.leases.len())
                    .filter(|&i| self.hash.live(i, now).is_none())
                    .map(|i| (machine_id(i).get(), self.hash.floors[i]))
                    .collect();
                let uptime = now.saturating_sub(self.started_at) / 1000;
                RedisResponse::Read {
                    info: info.then_some((uptime, self.run_id)),
                    free,
                }
            }
            RedisRequest::Claim {
                id,
                token,
                ttl_ms,
                floor_ms,
                run_id,
                hold_off_ms,
            } => {
                if run_id.is_some_and(|checked| checked != self.run_id) {
                    return RedisResponse::ServerChanged(self.run_id);
                }
                if let Some(hold) = hold_off_ms {
                    let open_at = self.open_at(now, hold);
                    if open_at > now {
                        return RedisResponse::HeldOff {
                            open_at,
                            time_ms: now,
                        };
                    }
                }
                let index = usize::from(id);
                let floor_before = self.hash.floors.get(index).copied().unwrap_or(0);
                let won = index < self.hash.leases.len() && self.hash.live(index, now).is_none();
                if won {
                    let fields = Fields {
                        token,
                        expires_at: now.saturating_add(ttl_ms),
                        marker: true,
                    };
                    self.set(now, index, Some(fields));
                    if floor_ms > floor_before {
                        self.set_floor(now, index, floor_ms);
                    }
                }
                RedisResponse::Claimed {
                    won,
                    floor_before,
                    time_ms: now,
                }
            }
            RedisRequest::Renew {
                id,
                token,
                ttl_ms,
                floor_ms,
                hold_off_ms,
            } => {
                let index = usize::from(id);
                // FXX: both the ID field and this holder's marker must be there.
                let ok = self
                    .hash
                    .live(index, now)
                    .is_some_and(|f| f.token == token && f.marker);
                if ok {
                    let fields = Fields {
                        token,
                        expires_at: now.saturating_add(ttl_ms),
                        marker: true,
                    };
                    self.set(now, index, Some(fields));
                    if floor_ms > self.hash.floors[index] {
                        self.set_floor(now, index, floor_ms);
                    }
                } else if let Some(hold) = hold_off_ms {
                    self.open_at(now, hold);
                }
                RedisResponse::Renewed { ok, time_ms: now }
            }
            RedisRequest::Release {
                id,
                token,
                guard_ms,
                floor_ms,
            } => {
                let index = usize::from(id);
                let ours = self
                    .hash
                    .live(index, now)
                    .is_some_and(|f| f.token == token && f.marker);
                if ours {
                    // HSETEX FXX PX guard, then HDEL of the marker.
                    let fields = guard_ms.map(|guard| Fields {
                        token,
                        expires_at: now.saturating_add(guard),
                        marker: false,
                    });
                    self.set(now, index, fields);
                    self.set_floor(now, index, floor_ms);
                } else if floor_ms > self.hash.floors.get(index).copied().unwrap_or(u64::MAX) {
                    // A lost lease's release only raises the floor.
                    self.set_floor(now, index, floor_ms);
                }
                RedisResponse::Released(ours)
            }
            RedisRequest::StartHoldOff { hold_off_ms } => {
                RedisResponse::OpenAt(self.open_at(now, hold_off_ms))
            }
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

#[derive(Debug, Default)]
struct Seen {
    run_id: Option<u64>,
    /// The run ID before the last change, and this client's clock when the change was seen.
    changed: Option<(u64, u64)>,
}

/// The `lease-redis` strategy's client logic over a [`Link`] to a [`RedisServer`].
#[derive(Debug)]
pub struct RedisModel<L> {
    link: L,
    guards: Guards,
    max_lease_ms: u64,
    rng: Mutex<Rng>,
    seen: Mutex<Seen>,
}

const ACQUIRE_ATTEMPTS: u32 = 3;

impl<L: Link> RedisModel<L> {
    /// A strategy with `guards` and `max_lease_duration` = `max_lease` (the amnesia hold-off
    /// is [`amnesia_hold_off_ms`](super::amnesia_hold_off_ms) of it), its random choices
    /// drawn from `seed`.
    pub fn new(link: L, guards: Guards, max_lease: Duration, seed: u64) -> Self {
        Self {
            link,
            guards,
            max_lease_ms: millis(max_lease).max(1),
            rng: Mutex::new(Rng::new(seed)),
            seen: Mutex::new(Seen::default()),
        }
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, Rng> {
        self.rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn call(&self, request: RedisRequest) -> Result<RedisResponse, Failure> {
        match self.link.call(Request::Redis(request)).await {
            Ok(Response::Redis(RedisResponse::WrongServer) | Response::Sql(_)) => Err(
                Failure::new(ErrorKind::Misconfigured, "not a Redis lease hash"),
            ),
            Ok(Response::Redis(reply)) => Ok(reply),
            Err(e) => Err(Failure::new(
                ErrorKind::Retry,
                format!("redis command failed: {e}"),
            )),
        }
    }

    fn unexpected(reply: &RedisResponse) -> Failure {
        Failure::new(ErrorKind::Other, format!("unexpected reply {reply:?}"))
    }

    /// Records the server's run ID; a new one starts the hold-off (`Seen::record`).
    fn record_run_id(&self, seen: &mut Seen, run_id: u64) {
        if let Some(previous) = seen.run_id.replace(run_id)
            && previous != run_id
        {
            seen.changed = Some((previous, self.link.now_ms()));
        }
    }

    /// `check_amnesia` on an `INFO server` reply.
    fn check_amnesia(&self, uptime_s: u64, run_id: u64) -> Result<(), Failure> {
        let now = self.link.now_ms();
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.record_run_id(&mut seen, run_id);
        if let Some((_, at)) = seen.changed {
            if now.saturating_sub(at) < super::amnesia_hold_off_ms(self.max_lease_ms) {
                return Err(Failure::new(
                    ErrorKind::Retry,
                    "the server's run id changed: acquisitions are held off",
                ));
            }
            seen.changed = None;
        }
        let uptime_ms = uptime_s.saturating_sub(1).saturating_mul(1000);
        if uptime_ms < super::amnesia_hold_off_ms(self.max_lease_ms) {
            return Err(Failure::new(
                ErrorKind::Retry,
                "the server has been up for less than the amnesia hold-off",
            ));
        }
        Ok(())
    }

    /// The hold-off the scripts start when they find the marker missing (`hold_off_arg`):
    /// `None` when the marker is not checked.
    fn hold_off_arg(&self) -> Option<u64> {
        self.guards
            .marker_checked()
            .then(|| super::amnesia_hold_off_ms(self.max_lease_ms))
    }

    /// The backend's `recorded_floor`: the floor less what `max_lease_duration` cut off the
    /// request (without the field's cap, which no simulated clock reaches).
    fn recorded_floor(floor_ms: u64, requested: Duration, ttl_ms: u64) -> u64 {
        granted_floor(floor_ms, requested, Duration::from_millis(ttl_ms))
    }

    /// The `recorded_floor` of what a request asks, with the floor switched off 0.
    fn floor_sent(&self, floor_ms: u64, requested: Duration, ttl_ms: u64) -> u64 {
        Self::recorded_floor(self.guards.floor_ms(floor_ms), requested, ttl_ms)
    }
}

impl<L: Link> Strategy for RedisModel<L> {
    type Lease = ModelLease;
    type Error = Failure;

    async fn acquire(&self, request: Acquire) -> Result<Grant<ModelLease>, Failure> {
        let requested = request.requested;
        let ttl_ms = millis(requested).min(self.max_lease_ms).max(1);
        let floor_ms = self.floor_sent(request.floor_ms, requested, ttl_ms);
        let now_ms = self.guards.floor_ms(request.now_ms);
        let mut checked = None;
        for attempt in 0..ACQUIRE_ATTEMPTS {
            let info = attempt == 0 && self.guards.amnesia;
            let reply = self.call(RedisRequest::Read { info }).await?;
            let RedisResponse::Read { info, free } = reply else {
                return Err(Self::unexpected(&reply));
            };
            if let Some((uptime, run_id)) = info {
                if let Err(refused) = self.check_amnesia(uptime, run_id) {
                    // A restarted server lost the hash too: its marker's hold-off starts now,
                    // beside the restart's. The refusal stands either way.
                    if let Some(hold_off_ms) = self.hold_off_arg() {
                        let _ = self.call(RedisRequest::StartHoldOff { hold_off_ms }).await;
                    }
                    return Err(refused);
                }
                checked = Some(run_id);
            }
            let picked = super::pick(&free, |f| f.1, now_ms, &mut self.rng());
            let Some((id, _)) = picked else {
                return Err(Failure::new(
                    ErrorKind::Exhausted,
                    "all machine ids in the hash are leased",
                ));
            };
            let token = self.rng().next_u128();
            let reply = self
                .call(RedisRequest::Claim {
                    id,
                    token,
                    ttl_ms,
                    floor_ms,
                    run_id: checked,
                    hold_off_ms: self.hold_off_arg(),
                })
                .await?;
            match reply {
                RedisResponse::Claimed {
                    won: true,
                    floor_before,
                    time_ms,
                } => {
                    let id = machine_id(usize::from(id));
                    let grant =
                        Grant::new(id, ModelLease { id, token }, Duration::from_millis(ttl_ms))
                            .with_floor(self.guards.floor_ms(floor_before))
                            .with_coordinator_ms(time_ms);
                    return Ok(super::clock_bound(self.guards, grant));
                }
                RedisResponse::Claimed { won: false, .. } => {}
                RedisResponse::HeldOff { open_at, time_ms } => {
                    return Err(Failure::new(
                        ErrorKind::Retry,
                        format!(
                            "the hash has no initialization marker: acquisition is held off for \
                             {} ms more",
                            open_at.saturating_sub(time_ms)
                        ),
                    ));
                }
                RedisResponse::ServerChanged(current) => {
                    let mut seen = self
                        .seen
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    self.record_run_id(&mut seen, current);
                    return Err(Failure::new(
                        ErrorKind::Retry,
                        "the server changed between the amnesia check and the claim",
                    ));
                }
                other => return Err(Self::unexpected(&other)),
            }
        }
        Err(Failure::new(
            ErrorKind::Conflict,
            "every claim lost its race",
        ))
    }

    async fn renew(
        &self,
        lease: &ModelLease,
        request: Renew,
    ) -> Result<Renewal<ModelLease>, Failure> {
        let ttl_ms = millis(request.requested).min(self.max_lease_ms).max(1);
        let reply = self
            .call(RedisRequest::Renew {
                id: lease.id.get(),
                token: lease.token,
                ttl_ms,
                floor_ms: self.floor_sent(request.floor_ms, request.requested, ttl_ms),
                hold_off_ms: self.hold_off_arg(),
            })
            .await?;
        match reply {
            RedisResponse::Renewed { ok: true, time_ms } => Ok(super::renewal_clock_bound(
                self.guards,
                Renewal::new(*lease, Duration::from_millis(ttl_ms)).with_coordinator_ms(time_ms),
            )),
            RedisResponse::Renewed { ok: false, .. } => Err(Failure::new(
                ErrorKind::Lost,
                format!("lease on machine id {} is no longer ours", lease.id),
            )),
            other => Err(Self::unexpected(&other)),
        }
    }

    async fn release(&self, lease: &ModelLease, request: Release) -> Result<(), Failure> {
        let guard_ms = self
            .guards
            .release_guard
            .then(|| millis(request.guard).max(1));
        match self
            .call(RedisRequest::Release {
                id: lease.id.get(),
                token: lease.token,
                guard_ms,
                floor_ms: self.guards.floor_ms(request.floor_ms),
            })
            .await?
        {
            RedisResponse::Released(_) => Ok(()),
            other => Err(Self::unexpected(&other)),
        }
    }

    /// `RedisOptions::validate_for`: a longest lease below the minimum TTL is refused.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Failure> {
        if self.max_lease_ms < millis(terms.min_ttl) {
            return Err(Failure::new(
                ErrorKind::Misconfigured,
                "max_lease_duration is below the lease manager's min_ttl",
            ));
        }
        Ok(())
    }

    fn profile(&self) -> Profile {
        self.guards.profile("redis-model")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: u16, token: u128, floor: u64) -> RedisRequest {
        RedisRequest::Claim {
            id,
            token,
            ttl_ms: 1000,
            floor_ms: floor,
            run_id: None,
            hold_off_ms: None,
        }
    }

    #[test]
    fn a_claim_lands_only_on_the_server_process_the_guard_checked() {
        let mut s = RedisServer::new(2, 0, 1);
        let checked = |run_id| RedisRequest::Claim {
            id: 0,
            token: 7,
            ttl_ms: 1000,
            floor_ms: 50,
            run_id: Some(run_id),
            hold_off_ms: Some(10_000),
        };
        assert_eq!(s.handle(100, checked(2)), RedisResponse::ServerChanged(1));
        assert!(s.held(100).is_empty());
        assert!(matches!(
            s.handle(100, checked(1)),
            RedisResponse::Claimed { won: true, .. }
        ));
    }

    #[test]
    fn a_lost_lease_release_only_raises_the_floor() {
        let mut s = RedisServer::new(2, 0, 1);
        let release = |floor| RedisRequest::Release {
            id: 1,
            token: 9,
            guard_ms: Some(5000),
            floor_ms: floor,
        };
        assert!(matches!(
            s.handle(100, claim(1, 8, 50)),
            RedisResponse::Claimed { won: true, .. }
        ));
        assert_eq!(s.handle(200, release(40)), RedisResponse::Released(false));
        assert_eq!(s.floor(MachineId::new(1).unwrap()), 50);
        assert_eq!(s.handle(200, release(90)), RedisResponse::Released(false));
        assert_eq!(s.floor(MachineId::new(1).unwrap()), 90);
        // Someone else's lease is untouched.
        assert_eq!(s.held(300), vec![MachineId::new(1).unwrap()]);
    }

    #[test]
    fn fnx_fxx_and_field_ttls() {
        let mut s = RedisServer::new(2, 0, 1);
        let won = |r| matches!(r, RedisResponse::Claimed { won: true, .. });
        assert!(won(s.handle(100, claim(0, 7, 50))));
        assert!(!won(s.handle(200, claim(0, 8, 60))));
        // Release sets the TTL to the guard, even past the lease's own end.
        let release = RedisRequest::Release {
            id: 0,
            token: 7,
            guard_ms: Some(5000),
            floor_ms: 70,
        };
        assert_eq!(
            s.handle(1000, release.clone()),
            RedisResponse::Released(true)
        );
        assert_eq!(s.held(5999), vec![MachineId::new(0).unwrap()]);
        assert_eq!(s.floor(MachineId::new(0).unwrap()), 70);
        // An expired lease cannot be renewed.
        let renew = RedisRequest::Renew {
            id: 0,
            token: 7,
            ttl_ms: 1000,
            floor_ms: 80,
            hold_off_ms: None,
        };
        assert_eq!(
            s.handle(6001, renew),
            RedisResponse::Renewed {
                ok: false,
                time_ms: 6001
            }
        );
        assert_eq!(s.floor(MachineId::new(0).unwrap()), 70);
    }

    #[test]
    fn a_wiped_hash_holds_claims_off_from_the_first_node_that_finds_it() {
        let mut s = RedisServer::new(2, 0, 1);
        let guarded = |token, hold_off_ms| RedisRequest::Claim {
            id: 0,
            token,
            ttl_ms: 1000,
            floor_ms: 50,
            run_id: Some(1),
            hold_off_ms,
        };
        let won = |r| matches!(r, RedisResponse::Claimed { won: true, .. });
        assert!(won(s.handle(100, guarded(7, Some(10_000)))));
        assert_eq!(s.wipe(200), 1);
        assert_eq!(s.marker(), None);
        assert_eq!(s.run_id(), 1);
        // The holder's renewal is lost and starts the hold-off.
        let renew = RedisRequest::Renew {
            id: 0,
            token: 7,
            ttl_ms: 1000,
            floor_ms: 80,
            hold_off_ms: Some(10_000),
        };
        assert_eq!(
            s.handle(300, renew),
            RedisResponse::Renewed {
                ok: false,
                time_ms: 300
            }
        );
        assert_eq!(
            s.handle(400, guarded(8, Some(10_000))),
            RedisResponse::HeldOff {
                open_at: 10_300,
                time_ms: 400
            }
        );
        // Without the marker check the wiped ID is free at once.
        assert!(won(s.handle(500, guarded(9, None))));
        // Once the hold-off has passed (and that lease ended), claims go through again.
        assert!(!won(s.handle(10_299, guarded(10, Some(10_000)))));
        assert!(won(s.handle(10_300, guarded(10, Some(10_000)))));
    }

    #[test]
    fn restarts_forget_what_was_not_persisted() {
        let mut s = RedisServer::new(4, 0, 1);
        s.handle(10, claim(1, 1, 5));
        assert_eq!(s.restart(20, 2, Persistence::Always), 0);
        assert_eq!(s.held(30).len(), 1);
        assert_eq!(s.restart(40, 3, Persistence::None), 1);
        assert!(s.held(50).is_empty());
        assert_eq!(s.floor(MachineId::new(1).unwrap()), 0);
        assert_eq!(s.run_id(), 3);
    }
}
