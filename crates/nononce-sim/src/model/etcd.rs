//! A model of `lease-etcd` on etcd v3 (3.4 with its default timings), held to its requests:
//!
//! - the keyspace under the prefix: per ID a lease key (`<prefix><id>`) attached to an etcd
//!   lease, and a floor key (`<prefix>floor/<id>`) on no lease; every key with its create and mod
//!   revisions and version, one store revision that each write transaction raises by one;
//! - etcd leases: granted in whole seconds (at least etcd's minimum TTL, 2 s), ended by their
//!   TTL on the leader's monotonic clock (their keys deleted, one revision per lease), renewed
//!   to their full TTL by a keep-alive (an ended lease answers TTL 0), revoked on request; a new
//!   leader gives every lease its TTL again plus the election timeout (`Promote`), so leases
//!   only ever live longer than granted;
//! - transactions as etcd applies them: every comparison, nested ones included, against the
//!   store before the transaction (a missing key has revisions 0 and lease 0, and fails any
//!   value comparison), a put onto a lease etcd does not know fails the whole transaction,
//!   reads in a transaction see its earlier writes;
//! - every answer's header: store revision, cluster ID and Raft term;
//! - the initialization marker `<prefix>initialized` (on no lease; written by `migrate`, and the
//!   model starts with it, as a deployed prefix does) and the hold-off key `<prefix>hold-off` (on
//!   an etcd lease of the amnesia hold-off);
//! - acquire: a range of the prefix, the amnesia check (a revision below one seen before the
//!   request, or another cluster ID, holds acquisitions off for the longest lease), the marker
//!   check (a hold-off key holds acquisitions off for its lease's time to live; no marker: a
//!   transaction writes the hold-off key on a new lease of the amnesia hold-off and the marker,
//!   unless another node did first), a random free ID (preferring a floor below the acquirer's
//!   clock, as lease-redis), one lease grant per acquire, the claim transaction (`create_revision == 0`, the marker there and no hold-off
//!   key, the floor key's mod revision unchanged, the floor raised), up to three attempts; a
//!   failed acquire revokes its lease;
//! - renew: two keep-alives (the stream's opening answer and the one that reports the TTL and the
//!   term), then the proof transaction (lease and create revision of the key, the floor raised in
//!   a nested transaction), which must be answered in the keep-alive's term; a lost key revokes
//!   the orphaned lease;
//! - release: a guard lease (whole seconds, rounded up), the transaction that moves the key onto
//!   it and sets the floor (a key no longer ours: only the floor raised), then revokes.
//!
//! No coordinator clock: etcd reports no server time, so grants and renewals carry none. The
//! lease handle's identity is the etcd lease ID and the key's create revision; the random token
//! lease-etcd stores as the key's value plays no part in the protocol and is not modelled.
//! Faults: a restart keeps everything (Raft, fsync) and restarts every lease's TTL; a leader
//! change does the same, and its deposed leader may still answer keep-alives in its old term
//! for a moment; a restore goes back to the last backup (or to an empty store), possibly under
//! a new cluster ID. Wall clock steps do not touch etcd's leases (its monotonic clock).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{
    Acquire, ErrorKind, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};
use lease_manager::Failure;

use super::{Guards, Link, ModelLease, Reply, Request, machine_id, pick};
use crate::rng::Rng;

/// etcd's shortest lease with its default timings (heartbeat 100 ms, election timeout 1 s): one
/// and a half election timeouts, in whole seconds rounded up.
pub const MIN_TTL_S: i64 = 2;
/// The election timeout: what a new leader adds to every lease's TTL.
pub const ELECTION_TIMEOUT_MS: u64 = 1_000;
/// How often a backup (`etcdctl snapshot save`) is taken, in server ms.
const BACKUP_EVERY_MS: u64 = 60_000;
/// The first lease ID the model hands out; etcd derives them from the member ID and the time,
/// and never hands one out twice.
const FIRST_LEASE: i64 = 0x694d_0000_0000_0001;
/// Claims tried per acquire (`EtcdOptions::with_acquire_attempts`).
const ACQUIRE_ATTEMPTS: u32 = 3;

/// A key under the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// `<prefix><id>`: the ID's lease key.
    Lease(u16),
    /// `<prefix>floor/<id>`: the ID's timestamp floor.
    Floor(u16),
    /// `<prefix>initialized`: the initialization marker.
    Marker,
    /// `<prefix>hold-off`: the hold-off key, on an etcd lease.
    HoldOff,
}

/// A key as a range returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kv {
    /// The revision that created it.
    pub create_revision: i64,
    /// The revision that last wrote it.
    pub mod_revision: i64,
    /// Writes since it was created.
    pub version: i64,
    /// The etcd lease it is attached to (0: none).
    pub lease: i64,
    /// A floor key's floor (Unix ms; its stored form, 20 digits, orders byte-wise as the numbers
    /// do); 0 for a lease key, whose token is not modelled.
    pub value: u64,
}

/// What a comparison looks at, and the value it compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `create_revision`.
    CreateRevision(i64),
    /// `mod_revision`.
    ModRevision(i64),
    /// The attached lease.
    Lease(i64),
    /// The value (a floor).
    Value(u64),
}

/// A comparison's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// The key's is equal.
    Equal,
    /// The key's is less.
    Less,
    /// The key's is greater.
    Greater,
}

/// One comparison of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compare {
    /// The key.
    pub key: Key,
    /// The operator.
    pub op: CompareOp,
    /// What is compared with what.
    pub target: Target,
}

impl Compare {
    const fn new(key: Key, op: CompareOp, target: Target) -> Self {
        Self { key, op, target }
    }
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// A put, attached to `lease` (0: none).
    Put {
        /// The key.
        key: Key,
        /// The value.
        value: u64,
        /// The lease.
        lease: i64,
    },
    /// A get of one key.
    Get(Key),
    /// A delete of one key.
    Delete(Key),
    /// A nested transaction.
    Txn(Txn),
}

/// A transaction: `if when then ... else ...`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// The comparisons, all of which must hold.
    pub when: Vec<Compare>,
    /// The operations when they do.
    pub then: Vec<TxnOp>,
    /// The operations when they do not.
    pub otherwise: Vec<TxnOp>,
}

/// One operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResponse {
    /// A put.
    Put,
    /// A get: the key, if it exists.
    Get(Option<Kv>),
    /// A delete: whether the key existed.
    Delete(bool),
    /// A nested transaction.
    Txn {
        /// Whether its comparisons held.
        succeeded: bool,
        /// Its operations' results.
        responses: Vec<OpResponse>,
    },
}

/// The header of every answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The store revision (after a write transaction: the transaction's).
    pub revision: i64,
    /// The cluster ID.
    pub cluster_id: u64,
    /// The Raft term of the member that answered.
    pub raft_term: u64,
}

/// A request the etcd strategy model sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdRequest {
    /// A linearizable range over the prefix, keys and values.
    Range,
    /// `LeaseGrant`.
    Grant {
        /// Requested TTL in seconds.
        ttl_s: i64,
    },
    /// One keep-alive of a lease.
    KeepAlive {
        /// The lease.
        lease: i64,
    },
    /// `LeaseRevoke`.
    Revoke {
        /// The lease.
        lease: i64,
    },
    /// `LeaseTimeToLive`.
    TimeToLive {
        /// The lease.
        lease: i64,
    },
    /// A transaction.
    Txn(Txn),
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdResponse {
    /// The range: every key under the prefix.
    Range {
        /// The header.
        header: Header,
        /// The keys, in key order.
        kvs: Vec<(Key, Kv)>,
    },
    /// The grant: the new lease and the TTL etcd granted.
    Granted {
        /// The header.
        header: Header,
        /// The lease ID.
        lease: i64,
        /// The granted TTL in seconds.
        ttl_s: i64,
    },
    /// A keep-alive's answer: the lease's TTL, 0 when etcd does not know it.
    KeptAlive {
        /// The header.
        header: Header,
        /// The TTL in seconds.
        ttl_s: i64,
    },
    /// The revoke: whether the lease existed (etcd answers `requested lease not found`
    /// otherwise).
    Revoked {
        /// The header.
        header: Header,
        /// Whether the lease existed.
        found: bool,
    },
    /// A time-to-live answer: whole seconds left, -1 when etcd does not know the lease.
    TimeToLive {
        /// The header.
        header: Header,
        /// The TTL left in seconds.
        ttl_s: i64,
    },
    /// A transaction's answer.
    Txn {
        /// The header.
        header: Header,
        /// Whether its comparisons held.
        succeeded: bool,
        /// Its operations' results.
        responses: Vec<OpResponse>,
    },
    /// `etcdserver: requested lease not found`: a transaction put a key onto a lease etcd does
    /// not know (it ended, or was revoked); nothing of the transaction was applied.
    LeaseNotFound,
    /// The request was for another kind of server.
    WrongServer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LeaseEntry {
    ttl_s: i64,
    expires_at: u64,
    /// The keys attached to it.
    keys: Vec<Key>,
}

/// Keys, leases and the revision: what Raft replicates and a backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Store {
    lease_keys: Vec<Option<Kv>>,
    floors: Vec<Option<Kv>>,
    marker: Option<Kv>,
    hold_off: Option<Kv>,
    leases: BTreeMap<i64, LeaseEntry>,
    /// `(expires_at, lease)` of every lease.
    expiries: BTreeSet<(u64, i64)>,
    revision: i64,
}

impl Store {
    /// A new cluster's store (revision 1), with the initialization marker if `initialized`
    /// (written with the first revision, as `migrate` on a new cluster); IDs from `capacity` on
    /// are held by keys on no lease (another fleet's), written in one transaction.
    fn new(capacity: u16, initialized: bool) -> Self {
        let n = usize::from(MachineId::COUNT);
        let marker = initialized.then_some(Kv {
            create_revision: 1,
            mod_revision: 1,
            version: 1,
            lease: 0,
            value: 0,
        });
        let mut store = Self {
            lease_keys: vec![None; n],
            floors: vec![None; n],
            marker,
            hold_off: None,
            leases: BTreeMap::new(),
            expiries: BTreeSet::new(),
            revision: 1,
        };
        let capacity = usize::from(capacity.min(MachineId::COUNT));
        if capacity < n {
            store.revision = 2;
            for slot in &mut store.lease_keys[capacity..] {
                *slot = Some(Kv {
                    create_revision: 2,
                    mod_revision: 2,
                    version: 1,
                    lease: 0,
                    value: 0,
                });
            }
        }
        store
    }

    fn get(&self, key: Key) -> Option<Kv> {
        match key {
            Key::Lease(id) => self.lease_keys.get(usize::from(id)).copied().flatten(),
            Key::Floor(id) => self.floors.get(usize::from(id)).copied().flatten(),
            Key::Marker => self.marker,
            Key::HoldOff => self.hold_off,
        }
    }

    fn slot(&mut self, key: Key) -> Option<&mut Option<Kv>> {
        match key {
            Key::Lease(id) => self.lease_keys.get_mut(usize::from(id)),
            Key::Floor(id) => self.floors.get_mut(usize::from(id)),
            Key::Marker => Some(&mut self.marker),
            Key::HoldOff => Some(&mut self.hold_off),
        }
    }

    fn detach(&mut self, key: Key, lease: i64) {
        if let Some(entry) = self.leases.get_mut(&lease) {
            entry.keys.retain(|k| *k != key);
        }
    }

    /// Writes `key` at revision `rev`.
    fn put(&mut self, rev: i64, key: Key, value: u64, lease: i64) {
        let old = self.get(key);
        if let Some(old) = old
            && old.lease != lease
        {
            self.detach(key, old.lease);
        }
        let kv = match old {
            Some(old) => Kv {
                mod_revision: rev,
                version: old.version + 1,
                lease,
                value,
                ..old
            },
            None => Kv {
                create_revision: rev,
                mod_revision: rev,
                version: 1,
                lease,
                value,
            },
        };
        if let Some(entry) = self.leases.get_mut(&lease)
            && !entry.keys.contains(&key)
        {
            entry.keys.push(key);
        }
        if let Some(slot) = self.slot(key) {
            *slot = Some(kv);
        }
    }

    /// Deletes `key`; whether it existed.
    fn delete(&mut self, key: Key) -> bool {
        let Some(old) = self.get(key) else {
            return false;
        };
        self.detach(key, old.lease);
        if let Some(slot) = self.slot(key) {
            *slot = None;
        }
        true
    }

    /// Ends `lease` and deletes its keys, in one revision if it had any; whether it existed.
    fn revoke(&mut self, lease: i64) -> bool {
        let Some(entry) = self.leases.remove(&lease) else {
            return false;
        };
        self.expiries.remove(&(entry.expires_at, lease));
        if !entry.keys.is_empty() {
            self.revision += 1;
            for key in entry.keys {
                if let Some(slot) = self.slot(key) {
                    *slot = None;
                }
            }
        }
        true
    }

    fn set_expiry(&mut self, lease: i64, expires_at: u64) {
        if let Some(entry) = self.leases.get_mut(&lease) {
            self.expiries.remove(&(entry.expires_at, lease));
            entry.expires_at = expires_at;
            self.expiries.insert((expires_at, lease));
        }
    }

    /// Ends every lease whose TTL ran out by `now`, in the order they ran out.
    fn expire_until(&mut self, now: u64) {
        while let Some(&(at, lease)) = self.expiries.first() {
            if at > now {
                break;
            }
            self.revoke(lease);
        }
    }

    fn live(&self, lease: i64, now: u64) -> bool {
        self.leases.get(&lease).is_some_and(|l| l.expires_at > now)
    }

    fn compare(&self, c: &Compare) -> bool {
        let kv = self.get(c.key);
        let (have, want) = match (c.target, kv) {
            // A missing key has no value: a value comparison fails.
            (Target::Value(_), None) => return false,
            (Target::Value(v), Some(kv)) => (i128::from(kv.value), i128::from(v)),
            (Target::CreateRevision(v), kv) => (
                i128::from(kv.map_or(0, |k| k.create_revision)),
                i128::from(v),
            ),
            (Target::ModRevision(v), kv) => {
                (i128::from(kv.map_or(0, |k| k.mod_revision)), i128::from(v))
            }
            (Target::Lease(v), kv) => (i128::from(kv.map_or(0, |k| k.lease)), i128::from(v)),
        };
        match c.op {
            CompareOp::Equal => have == want,
            CompareOp::Less => have < want,
            CompareOp::Greater => have > want,
        }
    }

    /// Which branches a transaction takes, nested ones included, all decided on the store
    /// before it (etcd's `compareToPath`).
    fn decide(&self, txn: &Txn) -> Path {
        let succeeded = txn.when.iter().all(|c| self.compare(c));
        let ops = if succeeded { &txn.then } else { &txn.otherwise };
        let nested = ops
            .iter()
            .filter_map(|op| match op {
                TxnOp::Txn(inner) => Some(self.decide(inner)),
                _ => None,
            })
            .collect();
        Path { succeeded, nested }
    }

    /// Whether every put on the path is onto a lease etcd knows (`checkPut`).
    fn leases_known(&self, txn: &Txn, path: &Path) -> bool {
        let ops = if path.succeeded {
            &txn.then
        } else {
            &txn.otherwise
        };
        let mut nested = path.nested.iter();
        ops.iter().all(|op| match op {
            TxnOp::Put { lease, .. } => *lease == 0 || self.leases.contains_key(lease),
            TxnOp::Txn(inner) => nested.next().is_some_and(|p| self.leases_known(inner, p)),
            TxnOp::Get(_) | TxnOp::Delete(_) => true,
        })
    }

    /// Applies the path's operations at revision `rev`; whether anything changed goes to
    /// `changed`.
    fn apply(&mut self, txn: &Txn, path: &Path, rev: i64, changed: &mut bool) -> Vec<OpResponse> {
        let ops = if path.succeeded {
            &txn.then
        } else {
            &txn.otherwise
        };
        let mut nested = path.nested.iter();
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(match op {
                TxnOp::Put { key, value, lease } => {
                    self.put(rev, *key, *value, *lease);
                    *changed = true;
                    OpResponse::Put
                }
                TxnOp::Get(key) => OpResponse::Get(self.get(*key)),
                TxnOp::Delete(key) => {
                    let existed = self.delete(*key);
                    *changed |= existed;
                    OpResponse::Delete(existed)
                }
                TxnOp::Txn(inner) => {
                    let Some(p) = nested.next() else {
                        continue;
                    };
                    OpResponse::Txn {
                        succeeded: p.succeeded,
                        responses: self.apply(inner, p, rev, changed),
                    }
                }
            });
        }
        out
    }
}

/// The branches a transaction takes.
#[derive(Debug)]
struct Path {
    succeeded: bool,
    /// The nested transactions' paths, in the order of the taken branch's operations.
    nested: Vec<Path>,
}

/// A deposed leader that still believes it leads: it answers keep-alives in its old term from
/// its own lessor, which no longer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Deposed {
    term: u64,
    until: u64,
}

/// How the cluster comes back after it was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// The members restarted on their data: nothing lost.
    Restart,
    /// A new leader was elected: nothing lost.
    Election,
    /// An operator restored a backup (`from_backup`: the last one; otherwise the store starts
    /// empty, as a member whose data directory was lost and that was started as a new cluster),
    /// under a new cluster ID when `new_cluster_id`.
    Restore {
        /// The last backup, or nothing.
        from_backup: bool,
        /// Whether the cluster ID changes.
        new_cluster_id: bool,
    },
}

/// An etcd cluster holding one prefix of lease and floor keys.
#[derive(Debug, Clone)]
pub struct EtcdServer {
    store: Store,
    backup: Store,
    backup_at: u64,
    capacity: u16,
    cluster_id: u64,
    term: u64,
    next_lease: i64,
    deposed: Option<Deposed>,
}

impl EtcdServer {
    /// A new cluster `cluster_id` whose prefix offers `capacity` IDs (at most 512; the rest are
    /// held by keys of another fleet that never end).
    #[must_use]
    pub fn new(capacity: u16, cluster_id: u64) -> Self {
        let store = Store::new(capacity, true);
        Self {
            backup: store.clone(),
            store,
            backup_at: 0,
            capacity,
            cluster_id,
            term: 2,
            next_lease: FIRST_LEASE,
            deposed: None,
        }
    }

    /// The store revision.
    #[must_use]
    pub const fn revision(&self) -> i64 {
        self.store.revision
    }

    /// The Raft term.
    #[must_use]
    pub const fn term(&self) -> u64 {
        self.term
    }

    /// The cluster ID.
    #[must_use]
    pub const fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    const fn header(&self) -> Header {
        Header {
            revision: self.store.revision,
            cluster_id: self.cluster_id,
            raft_term: self.term,
        }
    }

    /// Ends the leases whose TTL ran out by `now` (the leader's lessor revokes them).
    pub fn advance(&mut self, now: u64) {
        self.store.expire_until(now);
    }

    /// A new leader at `now` (`Promote`): every lease gets its full TTL again, plus the election
    /// timeout, and the term moves on.
    fn promote(&mut self, now: u64) {
        self.term += 1;
        let leases: Vec<(i64, i64)> = self
            .store
            .leases
            .iter()
            .map(|(id, l)| (*id, l.ttl_s))
            .collect();
        for (lease, ttl_s) in leases {
            let ttl_ms = u64::try_from(ttl_s).unwrap_or(0).saturating_mul(1000);
            self.store
                .set_expiry(lease, now.saturating_add(ELECTION_TIMEOUT_MS + ttl_ms));
        }
    }

    /// The cluster goes down at `now` (a restart, a restore): what expired until then ended.
    pub fn stop(&mut self, now: u64) {
        self.advance(now);
        self.deposed = None;
    }

    /// The leader is cut off from the others at `now`; until `deposed_until` (if any) it
    /// still answers keep-alives in its term.
    pub fn lose_leader(&mut self, now: u64, deposed_until: Option<u64>) {
        self.advance(now);
        self.deposed = deposed_until.map(|until| Deposed {
            term: self.term,
            until,
        });
    }

    /// The cluster is back at `now`, recovered as `recovery`, with a leader. Returns how many
    /// leases it forgot.
    pub fn start(&mut self, now: u64, recovery: Recovery) -> usize {
        self.deposed = None;
        let mut forgotten = 0;
        if let Recovery::Restore {
            from_backup,
            new_cluster_id,
        } = recovery
        {
            let restored = if from_backup {
                self.backup.clone()
            } else {
                // An empty data directory: no marker either.
                Store::new(self.capacity, false)
            };
            forgotten = self
                .store
                .leases
                .keys()
                .filter(|l| !restored.leases.contains_key(l))
                .count();
            self.store = restored;
            self.backup = self.store.clone();
            self.backup_at = now;
            if new_cluster_id {
                self.cluster_id = self
                    .cluster_id
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add(1);
            }
            // A new cluster's first leader.
            self.term = 1;
        }
        self.promote(now);
        forgotten
    }

    /// What a cluster without a leader still answers: the deposed leader's keep-alives, to
    /// the requests that reach it (one of three members, drawn from `rng`).
    pub fn answer_cut_off(
        &self,
        now: u64,
        request: &EtcdRequest,
        rng: &mut Rng,
    ) -> Option<EtcdResponse> {
        let deposed = self.deposed.filter(|d| now < d.until)?;
        let EtcdRequest::KeepAlive { lease } = request else {
            return None;
        };
        if rng.index(3) != 0 {
            return None;
        }
        // Its lessor still counts the lease; an ended one waits for a revoke that never
        // commits.
        let entry = self
            .store
            .leases
            .get(lease)
            .filter(|l| l.expires_at > now)?;
        Some(EtcdResponse::KeptAlive {
            header: Header {
                raft_term: deposed.term,
                ..self.header()
            },
            ttl_s: entry.ttl_s,
        })
    }

    /// Applies one request at `now` (the leader's monotonic clock, in ms).
    pub fn handle(&mut self, now: u64, request: EtcdRequest) -> EtcdResponse {
        self.advance(now);
        if now.saturating_sub(self.backup_at) >= BACKUP_EVERY_MS {
            self.backup = self.store.clone();
            self.backup_at = now;
        }
        match request {
            EtcdRequest::Range => {
                let lease_keys = self
                    .store
                    .lease_keys
                    .iter()
                    .enumerate()
                    .filter_map(|(i, kv)| kv.map(|kv| (Key::Lease(machine_id(i).get()), kv)));
                let floors = self
                    .store
                    .floors
                    .iter()
                    .enumerate()
                    .filter_map(|(i, kv)| kv.map(|kv| (Key::Floor(machine_id(i).get()), kv)));
                let marker = [
                    (Key::Marker, self.store.marker),
                    (Key::HoldOff, self.store.hold_off),
                ]
                .into_iter()
                .filter_map(|(key, kv)| kv.map(|kv| (key, kv)));
                let kvs = lease_keys.chain(floors).chain(marker).collect();
                EtcdResponse::Range {
                    header: self.header(),
                    kvs,
                }
            }
            EtcdRequest::Grant { ttl_s } => {
                let ttl_s = ttl_s.max(MIN_TTL_S);
                let lease = self.next_lease;
                self.next_lease += 1;
                let ttl_ms = u64::try_from(ttl_s).unwrap_or(0).saturating_mul(1000);
                let expires_at = now.saturating_add(ttl_ms);
                self.store.leases.insert(
                    lease,
                    LeaseEntry {
                        ttl_s,
                        expires_at,
                        keys: Vec::new(),
                    },
                );
                self.store.expiries.insert((expires_at, lease));
                EtcdResponse::Granted {
                    header: self.header(),
                    lease,
                    ttl_s,
                }
            }
            EtcdRequest::KeepAlive { lease } => {
                let ttl_s = match self.store.leases.get(&lease) {
                    Some(entry) => {
                        let ttl_s = entry.ttl_s;
                        let ttl_ms = u64::try_from(ttl_s).unwrap_or(0).saturating_mul(1000);
                        self.store.set_expiry(lease, now.saturating_add(ttl_ms));
                        ttl_s
                    }
                    None => 0,
                };
                EtcdResponse::KeptAlive {
                    header: self.header(),
                    ttl_s,
                }
            }
            EtcdRequest::Revoke { lease } => {
                let found = self.store.revoke(lease);
                EtcdResponse::Revoked {
                    header: self.header(),
                    found,
                }
            }
            EtcdRequest::TimeToLive { lease } => {
                let ttl_s = self.store.leases.get(&lease).map_or(-1, |entry| {
                    i64::try_from(entry.expires_at.saturating_sub(now) / 1000).unwrap_or(i64::MAX)
                });
                EtcdResponse::TimeToLive {
                    header: self.header(),
                    ttl_s,
                }
            }
            EtcdRequest::Txn(txn) => {
                let path = self.store.decide(&txn);
                if !self.store.leases_known(&txn, &path) {
                    return EtcdResponse::LeaseNotFound;
                }
                let rev = self.store.revision + 1;
                let mut changed = false;
                let responses = self.store.apply(&txn, &path, rev, &mut changed);
                if changed {
                    self.store.revision = rev;
                }
                EtcdResponse::Txn {
                    header: self.header(),
                    succeeded: path.succeeded,
                    responses,
                }
            }
        }
    }

    /// Revokes the lease `id`'s key is attached to, as its TTL running out would (a key on no
    /// lease is deleted): the conformance harness.
    pub fn expire(&mut self, now: u64, id: MachineId) {
        self.advance(now);
        let key = Key::Lease(id.get());
        match self.store.get(key) {
            Some(kv) if kv.lease != 0 => {
                self.store.revoke(kv.lease);
            }
            Some(_) => {
                self.store.revision += 1;
                self.store.delete(key);
            }
            None => {}
        }
    }

    /// `force_release`: the key deleted, then its lease revoked; the floor key stays. Whether
    /// the ID was held.
    pub fn force_release(&mut self, now: u64, id: MachineId) -> bool {
        self.advance(now);
        if usize::from(id.get()) >= usize::from(self.capacity) {
            return false;
        }
        let key = Key::Lease(id.get());
        let Some(kv) = self.store.get(key) else {
            return false;
        };
        self.store.revision += 1;
        self.store.delete(key);
        if kv.lease != 0 {
            self.store.revoke(kv.lease);
        }
        true
    }

    /// `etcdctl del --prefix` at `now`, in one revision: the lease and floor keys of the IDs the
    /// prefix offers, the initialization marker and the hold-off key (the keys that hold IDs
    /// from the capacity on stay: they model another fleet, not this one's data). The etcd
    /// leases live on, holding nothing. Returns how many IDs were held.
    pub fn wipe(&mut self, now: u64) -> usize {
        self.advance(now);
        let held = self.held(now).len();
        let capacity = usize::from(self.capacity.min(MachineId::COUNT));
        let mut keys: Vec<Key> = (0..capacity)
            .flat_map(|i| {
                let id = machine_id(i).get();
                [Key::Lease(id), Key::Floor(id)]
            })
            .collect();
        keys.extend([Key::Marker, Key::HoldOff]);
        let mut changed = false;
        for key in keys {
            changed |= self.store.delete(key);
        }
        if changed {
            self.store.revision += 1;
        }
        held
    }

    /// Whether the prefix has its initialization marker.
    #[must_use]
    pub const fn initialized(&self) -> bool {
        self.store.marker.is_some()
    }

    /// The IDs (below the capacity) whose lease key is on a live lease at `now`.
    #[must_use]
    pub fn held(&self, now: u64) -> Vec<MachineId> {
        let capacity = usize::from(self.capacity.min(MachineId::COUNT));
        self.store.lease_keys[..capacity]
            .iter()
            .enumerate()
            .filter(|(_, kv)| kv.is_some_and(|kv| kv.lease == 0 || self.store.live(kv.lease, now)))
            .map(|(i, _)| machine_id(i))
            .collect()
    }

    /// The floor stored with `id` (0 when none).
    #[must_use]
    pub fn floor(&self, id: MachineId) -> u64 {
        self.store
            .get(Key::Floor(id.get()))
            .map_or(0, |kv| kv.value)
    }
}

/// What this strategy last saw of the store, for the amnesia check.
#[derive(Debug, Default)]
struct Seen {
    cluster_id: Option<u64>,
    /// The highest revision of a range or transaction answer.
    revision: i64,
    /// When (client ms) the store was seen to go back in time.
    rewound: Option<u64>,
}

/// The free IDs of one range: `(id, stored floor, floor key's mod revision)`, 0 when absent.
type Free = Vec<(u16, u64, i64)>;

/// What one range of the prefix found.
#[derive(Debug, Default)]
struct Snapshot {
    /// The free IDs.
    free: Free,
    /// Whether the initialization marker exists.
    initialized: bool,
    /// The etcd lease of the hold-off key, when it exists.
    hold_off: Option<i64>,
}

/// The `lease-etcd` strategy's client logic over a [`Link`] to an [`EtcdServer`].
#[derive(Debug)]
pub struct EtcdModel<L> {
    link: L,
    guards: Guards,
    max_lease: Duration,
    rng: Mutex<Rng>,
    seen: Mutex<Seen>,
}

/// The lease handle's token: the etcd lease ID and the key's create revision.
fn token(lease: i64, revision: i64) -> u128 {
    (u128::from(lease.cast_unsigned()) << 64) | u128::from(revision.cast_unsigned())
}

/// The etcd lease ID and create revision of a handle.
fn parts(lease: &ModelLease) -> (i64, i64) {
    let high = u64::try_from(lease.token >> 64).unwrap_or(0);
    let low = u64::try_from(lease.token & u128::from(u64::MAX)).unwrap_or(0);
    (high.cast_signed(), low.cast_signed())
}

fn lost(id: MachineId, why: &str) -> Failure {
    Failure::new(
        ErrorKind::Lost,
        format!(
            "lease on machine id {id} is gone ({why}): stop using the id and acquire a new one"
        ),
    )
}

impl<L: Link> EtcdModel<L> {
    /// A strategy with `guards` and `max_lease_duration` = `max_lease` (also the amnesia
    /// hold-off), its random choices drawn from `seed`.
    pub fn new(link: L, guards: Guards, max_lease: Duration, seed: u64) -> Self {
        Self {
            link,
            guards,
            max_lease: max_lease.max(Duration::from_secs(1)),
            rng: Mutex::new(Rng::new(seed)),
            seen: Mutex::new(Seen::default()),
        }
    }

    fn rng(&self) -> MutexGuard<'_, Rng> {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn call(&self, request: EtcdRequest) -> Result<EtcdResponse, Failure> {
        match self.link.exchange(Request::Etcd(request)).await {
            Ok(
                Reply::Etcd(EtcdResponse::WrongServer)
                | Reply::Sql(_)
                | Reply::Redis(_)
                | Reply::Slept,
            ) => Err(Failure::new(
                ErrorKind::Misconfigured,
                "not an etcd cluster",
            )),
            Ok(Reply::Etcd(EtcdResponse::LeaseNotFound)) => Err(Failure::new(
                ErrorKind::Other,
                "etcdserver: requested lease not found",
            )),
            Ok(Reply::Etcd(reply)) => Ok(reply),
            Err(e) => Err(Failure::new(
                ErrorKind::Retry,
                format!("etcd request failed: {e}"),
            )),
        }
    }

    fn unexpected(reply: &EtcdResponse) -> Failure {
        Failure::new(ErrorKind::Other, format!("unexpected answer {reply:?}"))
    }

    /// `revision_before`.
    fn revision_before(&self) -> i64 {
        self.seen().revision
    }

    /// `observe`: the header of a range or transaction sent when the highest revision seen was
    /// `before`.
    fn observe(&self, before: i64, header: &Header) {
        if !self.guards.amnesia {
            return;
        }
        let now = self.link.now_ms();
        let mut seen = self.seen();
        if let Some(previous) = seen.cluster_id.replace(header.cluster_id)
            && previous != header.cluster_id
        {
            seen.rewound = Some(now);
            seen.revision = header.revision;
            return;
        }
        if header.revision < before {
            seen.rewound = Some(now);
            seen.revision = header.revision;
            return;
        }
        seen.revision = seen.revision.max(header.revision);
    }

    /// `check_rewound`.
    fn check_rewound(&self) -> Result<(), Failure> {
        let now = self.link.now_ms();
        let mut seen = self.seen();
        if let Some(at) = seen.rewound {
            if now.saturating_sub(at) < millis(self.max_lease) {
                return Err(Failure::new(
                    ErrorKind::Retry,
                    "the etcd store went back in time: acquisition holds off for the longest lease",
                ));
            }
            seen.rewound = None;
        }
        Ok(())
    }

    /// A transaction, its answer recorded for the amnesia check.
    async fn txn(&self, txn: Txn) -> Result<(bool, Vec<OpResponse>, Header), Failure> {
        let before = self.revision_before();
        match self.call(EtcdRequest::Txn(txn)).await? {
            EtcdResponse::Txn {
                header,
                succeeded,
                responses,
            } => {
                self.observe(before, &header);
                Ok((succeeded, responses, header))
            }
            other => Err(Self::unexpected(&other)),
        }
    }

    /// One range of the prefix.
    async fn read(&self) -> Result<Snapshot, Failure> {
        let before = self.revision_before();
        let reply = self.call(EtcdRequest::Range).await?;
        let EtcdResponse::Range { header, kvs } = reply else {
            return Err(Self::unexpected(&reply));
        };
        self.observe(before, &header);
        let n = usize::from(MachineId::COUNT);
        let mut held = vec![false; n];
        let mut stored = vec![(0, 0); n];
        let mut snapshot = Snapshot::default();
        for (key, kv) in kvs {
            match key {
                Key::Lease(id) => held[usize::from(id)] = true,
                Key::Floor(id) => stored[usize::from(id)] = (kv.value, kv.mod_revision),
                Key::Marker => snapshot.initialized = true,
                Key::HoldOff => snapshot.hold_off = Some(kv.lease),
            }
        }
        snapshot.free = (0..n)
            .filter(|&i| !held[i])
            .map(|i| (machine_id(i).get(), stored[i].0, stored[i].1))
            .collect();
        Ok(snapshot)
    }

    /// The amnesia hold-off in whole seconds, rounded up.
    fn hold_off_seconds(&self) -> i64 {
        let ms = super::amnesia_hold_off_ms(millis(self.max_lease));
        i64::try_from(ms.div_ceil(1000).max(1)).unwrap_or(i64::MAX)
    }

    fn not_initialized(remaining_s: i64) -> Failure {
        Failure::new(
            ErrorKind::Retry,
            format!(
                "the prefix was found without its initialization marker: acquisition is held \
                 off for {remaining_s} s more"
            ),
        )
    }

    /// `held_off`: the answer to an acquire while the hold-off key, on etcd lease `lease`,
    /// exists, or `None` when that lease ended since the read (read again).
    async fn held_off(&self, lease: i64) -> Result<Option<Failure>, Failure> {
        if lease == 0 {
            return Ok(Some(Self::not_initialized(i64::MAX)));
        }
        match self.call(EtcdRequest::TimeToLive { lease }).await? {
            EtcdResponse::TimeToLive { ttl_s, .. } if ttl_s < 0 => Ok(None),
            EtcdResponse::TimeToLive { ttl_s, .. } => Ok(Some(Self::not_initialized(ttl_s.max(1)))),
            other => Err(Self::unexpected(&other)),
        }
    }

    /// `begin_hold_off`: if there is still neither marker nor hold-off key, writes the hold-off
    /// key on a new etcd lease of the amnesia hold-off and the marker, in one transaction. Its
    /// answer to the acquire, or `None` when another node began a hold-off or initialized the
    /// prefix since the read (read again).
    async fn begin_hold_off(&self) -> Result<Option<Failure>, Failure> {
        let (lease, granted) = self.grant(self.hold_off_seconds()).await?;
        let absent = |key| Compare::new(key, CompareOp::Equal, Target::CreateRevision(0));
        let txn = Txn {
            when: vec![absent(Key::Marker), absent(Key::HoldOff)],
            then: vec![
                TxnOp::Put {
                    key: Key::HoldOff,
                    value: 0,
                    lease,
                },
                TxnOp::Put {
                    key: Key::Marker,
                    value: 0,
                    lease: 0,
                },
            ],
            otherwise: Vec::new(),
        };
        // An uncertain answer may have written the hold-off key: its etcd lease is left to its
        // TTL, since a revoke would end the hold-off at once.
        let (succeeded, _, _) = self.txn(txn).await?;
        if succeeded {
            let seconds = i64::try_from(granted.as_secs()).unwrap_or(i64::MAX);
            return Ok(Some(Self::not_initialized(seconds)));
        }
        // Not revoked on "failed" either, as lease-etcd: that answer may be a duplicate's, after
        // the first delivery wrote the hold-off key onto this lease.
        Ok(None)
    }

    /// `acquire_seconds`: the request, at most the longest lease, in whole seconds rounded down.
    fn acquire_seconds(&self, requested: Duration) -> Result<i64, Failure> {
        let seconds = requested.min(self.max_lease).as_secs();
        if seconds == 0 {
            return Err(Failure::new(
                ErrorKind::Misconfigured,
                "requested lease duration must be at least 1 s: etcd leases are whole seconds",
            ));
        }
        Ok(i64::try_from(seconds).unwrap_or(i64::MAX))
    }

    async fn grant(&self, seconds: i64) -> Result<(i64, Duration), Failure> {
        match self.call(EtcdRequest::Grant { ttl_s: seconds }).await? {
            EtcdResponse::Granted { lease, ttl_s, .. } if ttl_s > 0 => Ok((
                lease,
                Duration::from_secs(u64::try_from(ttl_s).unwrap_or(0)),
            )),
            other => Err(Self::unexpected(&other)),
        }
    }

    /// `revoke_quietly`: best effort, the answer ignored.
    async fn revoke_quietly(&self, lease: i64) {
        let _ = self.call(EtcdRequest::Revoke { lease }).await;
    }

    /// `acquire_inner`, preferring an ID whose floor is below `now_ms` and raising the
    /// claimed one's to `floor_ms`.
    async fn claim(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> Result<Grant<ModelLease>, Failure> {
        let seconds = self.acquire_seconds(requested)?;
        let mut granted = None;
        let result = self
            .claim_loop(seconds, now_ms, floor_ms, &mut granted)
            .await;
        if result.is_err()
            && let Some((lease, _)) = granted
        {
            // Nothing of ours uses it: an uncertain claim's key goes with it.
            self.revoke_quietly(lease).await;
        }
        result
    }

    async fn claim_loop(
        &self,
        seconds: i64,
        now_ms: u64,
        floor_ms: u64,
        granted: &mut Option<(i64, Duration)>,
    ) -> Result<Grant<ModelLease>, Failure> {
        let marker = self.guards.marker_checked();
        for _ in 0..ACQUIRE_ATTEMPTS {
            let Snapshot {
                free,
                initialized,
                hold_off,
            } = self.read().await?;
            if self.guards.amnesia {
                self.check_rewound()?;
            }
            // The prefix may have lost keys of IDs that running nodes still use: no claim
            // until every such lease has ended.
            if marker && let Some(hold_off_lease) = hold_off {
                match self.held_off(hold_off_lease).await? {
                    Some(held_off) => return Err(held_off),
                    None => continue,
                }
            }
            if marker && !initialized {
                match self.begin_hold_off().await? {
                    Some(held_off) => return Err(held_off),
                    None => continue,
                }
            }
            let picked = pick(&free, |f| f.1, now_ms, &mut self.rng());
            let Some((id, stored, floor_revision)) = picked else {
                return Err(Failure::new(
                    ErrorKind::Exhausted,
                    format!(
                        "all {} machine ids under the prefix are leased",
                        MachineId::COUNT
                    ),
                ));
            };
            let (lease, ttl) = match *granted {
                Some(granted) => granted,
                None => *granted.insert(self.grant(seconds).await?),
            };
            let mut when = vec![Compare::new(
                Key::Lease(id),
                CompareOp::Equal,
                Target::CreateRevision(0),
            )];
            if marker {
                // Decided with the claim: the prefix is initialized and not held off.
                when.extend([
                    Compare::new(Key::Marker, CompareOp::Greater, Target::CreateRevision(0)),
                    Compare::new(Key::HoldOff, CompareOp::Equal, Target::CreateRevision(0)),
                ]);
            }
            let mut then = vec![TxnOp::Put {
                key: Key::Lease(id),
                value: 0,
                lease,
            }];
            // The floor read above, unchanged: the grant reports exactly what was stored.
            when.push(Compare::new(
                Key::Floor(id),
                CompareOp::Equal,
                Target::ModRevision(floor_revision),
            ));
            if floor_revision == 0 || floor_ms > stored {
                then.push(TxnOp::Put {
                    key: Key::Floor(id),
                    value: stored.max(floor_ms),
                    lease: 0,
                });
            }
            let txn = Txn {
                when,
                then,
                otherwise: Vec::new(),
            };
            let (succeeded, _, header) = self.txn(txn).await?;
            if !succeeded {
                // Another node claimed it (or its floor moved) since the read: read again.
                continue;
            }
            // Every write of one transaction has its revision: the key's create revision.
            let id = machine_id(usize::from(id));
            let handle = ModelLease {
                id,
                token: token(lease, header.revision),
            };
            return Ok(Grant::new(id, handle, ttl).with_floor(self.guards.floor_ms(stored)));
        }
        Err(Failure::new(
            ErrorKind::Conflict,
            "lost the race for a free machine id 3 times in a row",
        ))
    }

    /// `keep_alive`: the stream's opening keep-alive, then the one whose answer gives the TTL
    /// and the term.
    async fn keep_alive(&self, handle: &ModelLease) -> Result<(Duration, u64), Failure> {
        let (lease, _) = parts(handle);
        let mut answer = (0, 0);
        for _ in 0..2 {
            match self.call(EtcdRequest::KeepAlive { lease }).await? {
                EtcdResponse::KeptAlive { ttl_s, .. } if ttl_s <= 0 => {
                    return Err(lost(handle.id, "its etcd lease expired or was revoked"));
                }
                EtcdResponse::KeptAlive { header, ttl_s } => answer = (ttl_s, header.raft_term),
                other => return Err(Self::unexpected(&other)),
            }
        }
        let (ttl_s, term) = answer;
        Ok((Duration::from_secs(u64::try_from(ttl_s).unwrap_or(0)), term))
    }

    /// `renew_inner`, raising the floor to `floor_ms`.
    async fn renew_inner(
        &self,
        handle: &ModelLease,
        floor_ms: u64,
    ) -> Result<Renewal<ModelLease>, Failure> {
        let (ttl, keep_alive_term) = self.keep_alive(handle).await?;
        let id = handle.id.get();
        let then = vec![
            TxnOp::Get(Key::Floor(id)),
            TxnOp::Txn(raise_floor(id, floor_ms)),
        ];
        let txn = Txn {
            when: ours(handle),
            then,
            otherwise: vec![TxnOp::Get(Key::Lease(id))],
        };
        let (succeeded, responses, header) = self.txn(txn).await?;
        if !succeeded {
            let why = match responses.first() {
                Some(OpResponse::Get(None)) => "its key was deleted",
                Some(OpResponse::Get(Some(_))) => "its key now belongs to another etcd lease",
                _ => return Err(Failure::new(ErrorKind::Other, "unexpected proof answer")),
            };
            // The etcd lease is alive but holds nothing of ours any more.
            self.revoke_quietly(parts(handle).0).await;
            return Err(lost(handle.id, why));
        }
        if keep_alive_term != header.raft_term {
            return Err(Failure::new(
                ErrorKind::Retry,
                format!(
                    "the leader changed during the renewal of machine id {} (keep-alive in raft \
                     term {keep_alive_term}, ownership proof in term {}): try again",
                    handle.id, header.raft_term
                ),
            ));
        }
        Ok(Renewal::new(*handle, ttl))
    }

    /// `release_inner`, setting the floor to `floor_ms`. With the release guard switched off
    /// the key is deleted instead of moved onto a guard lease.
    async fn release_inner(
        &self,
        handle: &ModelLease,
        guard: Duration,
        floor_ms: u64,
    ) -> Result<(), Failure> {
        let id = handle.id.get();
        let guard_lease = if self.guards.release_guard {
            // Rounded up: the ID stays blocked at least `guard`.
            let seconds = guard.as_secs() + u64::from(guard.subsec_nanos() > 0);
            let seconds = i64::try_from(seconds.max(1)).unwrap_or(i64::MAX);
            Some(self.grant(seconds).await?.0)
        } else {
            None
        };
        let key = match guard_lease {
            Some(lease) => TxnOp::Put {
                key: Key::Lease(id),
                value: 0,
                lease,
            },
            None => TxnOp::Delete(Key::Lease(id)),
        };
        let floor = TxnOp::Put {
            key: Key::Floor(id),
            value: floor_ms,
            lease: 0,
        };
        // Not ours any more (expired, taken over): only raise the floor, so what was issued
        // under the lease is known; the lease manager releases a lost lease too.
        let otherwise = vec![TxnOp::Txn(raise_floor(id, floor_ms))];
        let txn = Txn {
            when: ours(handle),
            then: vec![key, floor],
            otherwise,
        };
        // An uncertain answer may have moved the key onto the guard lease: leave both leases
        // to their TTLs rather than free the ID early.
        // The guard lease is left to expire even on "not ours" (it may be a duplicate's answer,
        // after the first delivery moved the key onto it), as lease-etcd does.
        self.txn(txn).await?;
        self.revoke_quietly(parts(handle).0).await;
        Ok(())
    }
}

/// The comparisons that prove `handle` still holds its key.
fn ours(handle: &ModelLease) -> Vec<Compare> {
    let (lease, revision) = parts(handle);
    let key = Key::Lease(handle.id.get());
    vec![
        Compare::new(key, CompareOp::Equal, Target::Lease(lease)),
        Compare::new(key, CompareOp::Equal, Target::CreateRevision(revision)),
    ]
}

/// A nested transaction that sets `id`'s floor to `floor_ms` if it is absent or lower.
fn raise_floor(id: u16, floor_ms: u64) -> Txn {
    let key = Key::Floor(id);
    let put = TxnOp::Put {
        key,
        value: floor_ms,
        lease: 0,
    };
    let create = Txn {
        when: vec![Compare::new(
            key,
            CompareOp::Equal,
            Target::CreateRevision(0),
        )],
        then: vec![put.clone()],
        otherwise: Vec::new(),
    };
    Txn {
        when: vec![Compare::new(key, CompareOp::Less, Target::Value(floor_ms))],
        then: vec![put],
        otherwise: vec![TxnOp::Txn(create)],
    }
}

impl<L: Link> Strategy for EtcdModel<L> {
    type Lease = ModelLease;
    type Error = Failure;

    async fn acquire(&self, request: Acquire) -> Result<Grant<ModelLease>, Failure> {
        let guards = self.guards;
        self.claim(
            request.requested,
            guards.floor_ms(request.now_ms),
            guards.floor_ms(request.floor_ms),
        )
        .await
    }

    /// etcd keeps a lease's TTL: the duration asked for is not used.
    async fn renew(
        &self,
        lease: &ModelLease,
        request: Renew,
    ) -> Result<Renewal<ModelLease>, Failure> {
        self.renew_inner(lease, self.guards.floor_ms(request.floor_ms))
            .await
    }

    async fn release(&self, lease: &ModelLease, request: Release) -> Result<(), Failure> {
        let floor_ms = self.guards.floor_ms(request.floor_ms);
        self.release_inner(lease, request.guard, floor_ms).await
    }

    /// `EtcdStrategy::check_terms`: leases whose whole-second grants fall below the minimum
    /// TTL are refused.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Failure> {
        let asked = terms.lease_duration.min(self.max_lease);
        if Duration::from_secs(asked.as_secs()) < terms.min_ttl {
            return Err(Failure::new(
                ErrorKind::Misconfigured,
                "leases would be granted below the lease manager's min_ttl",
            ));
        }
        Ok(())
    }

    fn profile(&self) -> Profile {
        self.guards.profile("etcd-model")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: u16, lease: i64) -> EtcdRequest {
        EtcdRequest::Txn(Txn {
            when: vec![Compare::new(
                Key::Lease(id),
                CompareOp::Equal,
                Target::CreateRevision(0),
            )],
            then: vec![TxnOp::Put {
                key: Key::Lease(id),
                value: 0,
                lease,
            }],
            otherwise: Vec::new(),
        })
    }

    fn grant(s: &mut EtcdServer, now: u64, ttl_s: i64) -> (i64, i64) {
        match s.handle(now, EtcdRequest::Grant { ttl_s }) {
            EtcdResponse::Granted { lease, ttl_s, .. } => (lease, ttl_s),
            other => panic!("{other:?}"),
        }
    }

    fn txn(s: &mut EtcdServer, now: u64, request: EtcdRequest) -> (bool, i64) {
        match s.handle(now, request) {
            EtcdResponse::Txn {
                header, succeeded, ..
            } => (succeeded, header.revision),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn claims_revisions_and_lease_ttls() {
        let mut s = EtcdServer::new(512, 1);
        assert_eq!(s.revision(), 1);
        // etcd's minimum TTL.
        let (a, ttl) = grant(&mut s, 0, 1);
        assert_eq!(ttl, MIN_TTL_S);
        assert_eq!(txn(&mut s, 10, claim(7, a)), (true, 2));
        // Taken: no write, no new revision.
        let (b, _) = grant(&mut s, 20, 5);
        assert_eq!(txn(&mut s, 30, claim(7, b)), (false, 2));
        assert_eq!(s.held(1_999), vec![MachineId::new(7).unwrap()]);
        // The lease ends at its TTL and its key with it, in a revision of its own.
        assert!(s.held(2_000).is_empty());
        assert_eq!(txn(&mut s, 2_000, claim(7, b)), (true, 4));
        // A put onto a lease that ended fails the whole transaction.
        assert_eq!(s.handle(2_001, claim(8, a)), EtcdResponse::LeaseNotFound);
        assert_eq!(s.revision(), 4);
        // A keep-alive restores the full TTL; an ended lease answers 0.
        let kept = |s: &mut EtcdServer, now, lease| match s
            .handle(now, EtcdRequest::KeepAlive { lease })
        {
            EtcdResponse::KeptAlive { ttl_s, .. } => ttl_s,
            other => panic!("{other:?}"),
        };
        assert_eq!(kept(&mut s, 4_000, b), 5);
        assert_eq!(kept(&mut s, 4_000, a), 0);
        assert_eq!(s.held(8_999), vec![MachineId::new(7).unwrap()]);
        assert!(s.held(9_000).is_empty());
    }

    #[test]
    fn nested_comparisons_see_the_store_before_the_transaction() {
        let mut s = EtcdServer::new(512, 1);
        let raise = |floor| EtcdRequest::Txn(raise_floor(3, floor));
        // Absent: the value comparison fails, the nested creation writes it.
        assert_eq!(txn(&mut s, 0, raise(50)), (false, 2));
        assert_eq!(s.floor(MachineId::new(3).unwrap()), 50);
        // Not below: nothing written, the revision stays.
        assert_eq!(txn(&mut s, 0, raise(40)), (false, 2));
        assert_eq!(s.floor(MachineId::new(3).unwrap()), 50);
        assert_eq!(txn(&mut s, 0, raise(60)), (true, 3));
        assert_eq!(s.floor(MachineId::new(3).unwrap()), 60);
    }

    #[test]
    fn a_new_leader_restarts_every_ttl_and_a_restore_goes_back() {
        let mut s = EtcdServer::new(4, 9);
        let (a, _) = grant(&mut s, 0, 10);
        txn(&mut s, 0, claim(1, a));
        assert_eq!(s.held(0), vec![MachineId::new(1).unwrap()]);
        // IDs from the capacity on are held by another fleet's keys.
        match s.handle(0, EtcdRequest::Range) {
            // The lease key, the marker, and the other fleet's keys.
            EtcdResponse::Range { kvs, .. } => assert_eq!(kvs.len(), 2 + 512 - 4),
            other => panic!("{other:?}"),
        }
        s.lose_leader(9_000, None);
        s.start(10_000, Recovery::Election);
        // 10 s + the election timeout from the new leader's start.
        assert!(s.held(20_999).contains(&MachineId::new(1).unwrap()));
        assert!(!s.held(21_000).contains(&MachineId::new(1).unwrap()));
        // A restore to an empty store, under a new cluster ID: the revision goes back.
        let revision = s.revision();
        s.stop(11_000);
        assert_eq!(
            s.start(
                12_000,
                Recovery::Restore {
                    from_backup: false,
                    new_cluster_id: true
                }
            ),
            1
        );
        assert!(s.revision() < revision);
        assert_ne!(s.cluster_id(), 9);
        assert!(!s.held(12_000).contains(&MachineId::new(1).unwrap()));
        assert!(!s.initialized());
    }

    #[test]
    fn a_wipe_deletes_the_prefix_in_one_revision_and_the_hold_off_key_ends_with_its_lease() {
        let mut s = EtcdServer::new(4, 9);
        assert!(s.initialized());
        let (a, _) = grant(&mut s, 0, 10);
        txn(&mut s, 0, claim(1, a));
        txn(&mut s, 0, EtcdRequest::Txn(raise_floor(1, 70)));
        let revision = s.revision();
        assert_eq!(s.wipe(100), 1);
        assert_eq!(s.revision(), revision + 1);
        assert!(!s.initialized());
        assert!(s.held(100).is_empty());
        assert_eq!(s.floor(MachineId::new(1).unwrap()), 0);
        // The other fleet's keys stay.
        match s.handle(100, EtcdRequest::Range) {
            EtcdResponse::Range { kvs, .. } => assert_eq!(kvs.len(), 512 - 4),
            other => panic!("{other:?}"),
        }
        // The hold-off key and the marker; the key goes when its lease ends.
        let (h, _) = grant(&mut s, 200, 3);
        let begin = EtcdRequest::Txn(Txn {
            when: vec![Compare::new(
                Key::Marker,
                CompareOp::Equal,
                Target::CreateRevision(0),
            )],
            then: vec![
                TxnOp::Put {
                    key: Key::HoldOff,
                    value: 0,
                    lease: h,
                },
                TxnOp::Put {
                    key: Key::Marker,
                    value: 0,
                    lease: 0,
                },
            ],
            otherwise: Vec::new(),
        });
        assert!(txn(&mut s, 200, begin).0);
        let ttl =
            |s: &mut EtcdServer, now| match s.handle(now, EtcdRequest::TimeToLive { lease: h }) {
                EtcdResponse::TimeToLive { ttl_s, .. } => ttl_s,
                other => panic!("{other:?}"),
            };
        assert_eq!(ttl(&mut s, 1_200), 2);
        assert_eq!(ttl(&mut s, 3_200), -1);
        assert!(s.initialized());
        match s.handle(3_200, EtcdRequest::Range) {
            EtcdResponse::Range { kvs, .. } => {
                assert!(kvs.iter().all(|(key, _)| *key != Key::HoldOff));
            }
            other => panic!("{other:?}"),
        }
    }
}
