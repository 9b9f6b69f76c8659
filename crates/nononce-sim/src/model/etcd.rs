//! etcd v3 (3.4 with its default timings) as `lease-etcd` meets it, answering the requests of
//! `lease_etcd::transport`:
//!
//! - the keyspace under lease-etcd's default prefix: per ID a lease key (`<prefix><id>`)
//!   attached to an etcd lease, and a floor key (`<prefix>floor/<id>`) on no lease; every key
//!   with its value, create and mod revisions and version, one store revision that each write
//!   transaction raises by one;
//! - etcd leases: granted in whole seconds (at least etcd's minimum TTL, 2 s), ended by their
//!   TTL on the leader's monotonic clock (their keys deleted, one revision per lease), renewed
//!   to their full TTL by a keep-alive (an ended lease answers TTL 0), revoked on request (an
//!   unknown one answers `requested lease not found`); a new leader gives every lease its TTL
//!   again plus the election timeout (`Promote`), so leases only ever live longer than granted;
//! - transactions as etcd applies them: every comparison, nested ones included, against the
//!   store before the transaction (a missing key has version, revisions and lease 0, and fails
//!   any value comparison; values compare byte-wise), a put onto a lease etcd does not know
//!   fails the whole transaction, reads in a transaction see its earlier writes;
//! - every answer's header: store revision, cluster ID and Raft term;
//! - the initialization marker `<prefix>initialized` (on no lease; the model starts with it, as
//!   a deployed prefix does) and the hold-off key `<prefix>hold-off` the client writes.
//!
//! The client is lease-etcd's own [`EtcdStrategy`], over a [`SimTransport`] that carries each
//! request over a [`Link`] and gives it the node's clock and a seeded random source; [`EtcdClient`]
//! adapts it to the simulation's handles and guard switches.
//!
//! No coordinator clock: etcd reports no server time, so grants and renewals carry none.
//! Faults: a restart keeps everything (Raft, fsync) and restarts every lease's TTL; a leader
//! change does the same, and its deposed leader may still answer keep-alives in its old term
//! for a moment; a restore goes back to the last backup (or to an empty store), possibly under
//! a new cluster ID. Wall clock steps do not touch etcd's leases (its monotonic clock).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::Duration;

use lease_core::{MachineId, Release, Strategy};
use lease_etcd::etcd_client;
use lease_etcd::transport::{
    Compare, CompareOp, Header, Kv as KeyValue, OpResponse, Reply as EtcdReply,
    Request as EtcdRequest, Target, Transport, TransportError, Txn, TxnOp,
};
use lease_etcd::{EtcdLease, EtcdLeaseError, EtcdOptions, EtcdStrategy};
use lease_manager::Failure;

use super::client::{Client, SimTransport, Simulated};
use super::{Guards, Link, Reply, Request, machine_id};
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
/// The key prefix: lease-etcd's default.
pub const PREFIX: &str = "/nononce/leases/";
/// What the initialization marker holds (only its presence counts).
const MARKER_VALUE: &[u8] = b"nononce machine-id leases";

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

impl Key {
    /// The key's name.
    #[must_use]
    pub fn name(self) -> String {
        match self {
            Self::Lease(id) => format!("{PREFIX}{id}"),
            Self::Floor(id) => format!("{PREFIX}floor/{id}"),
            Self::Marker => format!("{PREFIX}initialized"),
            Self::HoldOff => format!("{PREFIX}hold-off"),
        }
    }

    /// The key's name, from a table made once: every acquire reads the whole prefix, and
    /// formatting its 1,000-odd names each time was most of what an etcd seed cost.
    fn name_bytes(self) -> &'static [u8] {
        static NAMES: OnceLock<Vec<Box<[u8]>>> = OnceLock::new();
        let names = NAMES.get_or_init(|| {
            let ids = 0..MachineId::COUNT;
            ids.clone()
                .map(Self::Lease)
                .chain(ids.map(Self::Floor))
                .chain([Self::Marker, Self::HoldOff])
                .map(|key| key.name().into_bytes().into_boxed_slice())
                .collect()
        });
        let count = usize::from(MachineId::COUNT);
        let index = match self {
            Self::Lease(id) => usize::from(id),
            Self::Floor(id) => count + usize::from(id),
            Self::Marker => 2 * count,
            Self::HoldOff => 2 * count + 1,
        };
        &names[index]
    }

    /// The key named `name`, if it is one of the prefix's.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix(PREFIX)?;
        let id = |text: &str| {
            let canonical = !text.is_empty()
                && text.bytes().all(|b| b.is_ascii_digit())
                && (text.len() == 1 || !text.starts_with('0'));
            text.parse::<u16>()
                .ok()
                .filter(|n| canonical && *n < MachineId::COUNT)
        };
        match rest {
            "initialized" => Some(Self::Marker),
            "hold-off" => Some(Self::HoldOff),
            _ => match rest.strip_prefix("floor/") {
                Some(n) => id(n).map(Self::Floor),
                None => id(rest).map(Self::Lease),
            },
        }
    }
}

/// A key's state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kv {
    /// The revision that created it.
    create_revision: i64,
    /// The revision that last wrote it.
    mod_revision: i64,
    /// Writes since it was created.
    version: i64,
    /// The etcd lease it is attached to (0: none).
    lease: i64,
    /// Its value.
    value: Vec<u8>,
}

impl Kv {
    /// A key created at revision `rev`.
    const fn new(rev: i64, value: Vec<u8>, lease: i64) -> Self {
        Self {
            create_revision: rev,
            mod_revision: rev,
            version: 1,
            lease,
            value,
        }
    }

    fn answer(&self, key: Key) -> KeyValue {
        KeyValue {
            key: key.name_bytes().to_vec(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: self.lease,
        }
    }
}

/// What the cluster does with a request: an answer, or one of etcd's refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdResponse {
    /// etcd's answer.
    Answer(EtcdReply),
    /// `etcdserver: requested lease not found`: a transaction put a key onto a lease etcd does
    /// not know (it ended, or was revoked), or a revoke named one; nothing was applied.
    LeaseNotFound,
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
        let marker = initialized.then(|| Kv::new(1, MARKER_VALUE.to_vec(), 0));
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
                *slot = Some(Kv::new(2, b"another fleet".to_vec(), 0));
            }
        }
        store
    }

    fn get(&self, key: Key) -> Option<&Kv> {
        match key {
            Key::Lease(id) => self.lease_keys.get(usize::from(id))?.as_ref(),
            Key::Floor(id) => self.floors.get(usize::from(id))?.as_ref(),
            Key::Marker => self.marker.as_ref(),
            Key::HoldOff => self.hold_off.as_ref(),
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
    fn put(&mut self, rev: i64, key: Key, value: Vec<u8>, lease: i64) {
        let old = self
            .get(key)
            .map(|kv| (kv.create_revision, kv.version, kv.lease));
        if let Some((_, _, old_lease)) = old
            && old_lease != lease
        {
            self.detach(key, old_lease);
        }
        let kv = match old {
            Some((create_revision, version, _)) => Kv {
                create_revision,
                version: version + 1,
                ..Kv::new(rev, value, lease)
            },
            None => Kv::new(rev, value, lease),
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
        let Some(lease) = self.get(key).map(|kv| kv.lease) else {
            return false;
        };
        self.detach(key, lease);
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
        let kv = Key::parse(&c.key).and_then(|key| self.get(key));
        let ordering = match (&c.target, kv) {
            // A missing key has no value: a value comparison fails.
            (Target::Value(_), None) => return false,
            (Target::Value(v), Some(kv)) => kv.value.as_slice().cmp(v.as_slice()),
            (Target::Version(v), kv) => kv.map_or(0, |k| k.version).cmp(v),
            (Target::CreateRevision(v), kv) => kv.map_or(0, |k| k.create_revision).cmp(v),
            (Target::ModRevision(v), kv) => kv.map_or(0, |k| k.mod_revision).cmp(v),
            (Target::Lease(v), kv) => kv.map_or(0, |k| k.lease).cmp(v),
        };
        match c.op {
            CompareOp::Equal => ordering.is_eq(),
            CompareOp::Less => ordering.is_lt(),
            CompareOp::Greater => ordering.is_gt(),
        }
    }

    /// Which branches a transaction takes, nested ones included, all decided on the store
    /// before it (etcd's `compareToPath`).
    fn decide(&self, txn: &Txn) -> Path {
        let succeeded = txn.when.iter().all(|c| self.compare(c));
        let nested = branch(txn, succeeded)
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
        let ops = branch(txn, path.succeeded);
        let mut nested = path.nested.iter();
        ops.iter().all(|op| match op {
            TxnOp::Put { lease, .. } => *lease == 0 || self.leases.contains_key(lease),
            TxnOp::Txn(inner) => nested.next().is_some_and(|p| self.leases_known(inner, p)),
            _ => true,
        })
    }

    /// Applies the path's operations at revision `rev`; whether anything changed goes to
    /// `changed`. Keys outside the prefix's are not modelled: writes to them change nothing,
    /// reads find nothing.
    fn apply(&mut self, txn: &Txn, path: &Path, rev: i64, changed: &mut bool) -> Vec<OpResponse> {
        let ops = branch(txn, path.succeeded);
        let mut nested = path.nested.iter();
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(match op {
                TxnOp::Put { key, value, lease } => {
                    if let Some(key) = Key::parse(key) {
                        self.put(rev, key, value.clone(), *lease);
                        *changed = true;
                    }
                    OpResponse::Put
                }
                TxnOp::Get(key) => OpResponse::Get(
                    Key::parse(key).and_then(|key| self.get(key).map(|kv| kv.answer(key))),
                ),
                TxnOp::Delete(key) => {
                    let existed = Key::parse(key).is_some_and(|key| self.delete(key));
                    *changed |= existed;
                    OpResponse::Delete(i64::from(existed))
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

/// The keys of `kvs` that exist, the `i`-th named `key(i)`.
fn per_id(kvs: &[Option<Kv>], key: fn(u16) -> Key) -> impl Iterator<Item = KeyValue> {
    let kvs = kvs.iter().enumerate();
    kvs.filter_map(move |(i, kv)| Some(kv.as_ref()?.answer(key(machine_id(i).get()))))
}

/// `s` seconds in ms.
fn ms(s: i64) -> u64 {
    u64::try_from(s).unwrap_or(0).saturating_mul(1000)
}

/// A transaction's operations if its comparisons `succeeded`, or else.
fn branch(txn: &Txn, succeeded: bool) -> &[TxnOp] {
    if succeeded { &txn.then } else { &txn.otherwise }
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
    /// The amnesia guard is off: a restore keeps the cluster ID and the revision counts on, so
    /// that no client sees the store go back in time.
    hides_rewind: bool,
    /// The marker guard is off: the initialization marker is never lost, so that no client
    /// sees a prefix without it.
    keeps_marker: bool,
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
            hides_rewind: false,
            keeps_marker: false,
        }
    }

    /// Holds the cluster to the guards that lease-etcd has no switch for: with the amnesia guard
    /// off it never shows a client that it went back in time (a restore keeps the cluster
    /// ID and counts revisions on), with the marker checked off it never loses the marker (a
    /// wipe or a restore to an empty store keeps it), as a store before either check existed.
    pub const fn set_guards(&mut self, guards: Guards) {
        self.hides_rewind = !guards.amnesia;
        self.keeps_marker = !guards.marker_checked();
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
            let expires_at = now.saturating_add(ELECTION_TIMEOUT_MS + ms(ttl_s));
            self.store.set_expiry(lease, expires_at);
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
            let mut restored = if from_backup {
                self.backup.clone()
            } else {
                // An empty data directory: no marker either.
                Store::new(self.capacity, self.keeps_marker)
            };
            forgotten = self
                .store
                .leases
                .keys()
                .filter(|l| !restored.leases.contains_key(l))
                .count();
            if self.hides_rewind {
                restored.revision = restored.revision.max(self.store.revision);
            }
            self.store = restored;
            self.backup = self.store.clone();
            self.backup_at = now;
            if new_cluster_id && !self.hides_rewind {
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
        Some(EtcdResponse::Answer(EtcdReply::KeptAlive {
            header: Some(Header {
                raft_term: deposed.term,
                ..self.header()
            }),
            ttl_s: entry.ttl_s,
        }))
    }

    /// Every key under the prefix, in the model's order (leases, floors, marker, hold-off).
    fn range(&self) -> Vec<KeyValue> {
        let store = &self.store;
        // Sized once: a range answers every acquire, and growing a vector of a thousand keys
        // step by step was a fifth of an etcd seed's time.
        let mut kvs = Vec::with_capacity(store.lease_keys.len() + store.floors.len() + 2);
        kvs.extend(per_id(&store.lease_keys, Key::Lease));
        kvs.extend(per_id(&store.floors, Key::Floor));
        kvs.extend(store.marker.as_ref().map(|kv| kv.answer(Key::Marker)));
        kvs.extend(store.hold_off.as_ref().map(|kv| kv.answer(Key::HoldOff)));
        kvs
    }

    /// Applies one request at `now` (the leader's monotonic clock, in ms); `None` for a request
    /// of a later protocol than the model's.
    pub fn handle(&mut self, now: u64, request: EtcdRequest) -> Option<EtcdResponse> {
        self.advance(now);
        if now.saturating_sub(self.backup_at) >= BACKUP_EVERY_MS {
            self.backup = self.store.clone();
            self.backup_at = now;
        }
        let reply = match request {
            // Only the prefix lease-etcd uses by default is modelled.
            EtcdRequest::Range { .. } => EtcdReply::Range {
                header: Some(self.header()),
                kvs: self.range(),
            },
            EtcdRequest::Grant { ttl_s } => {
                let ttl_s = ttl_s.max(MIN_TTL_S);
                let lease = self.next_lease;
                self.next_lease += 1;
                let expires_at = now.saturating_add(ms(ttl_s));
                self.store.leases.insert(
                    lease,
                    LeaseEntry {
                        ttl_s,
                        expires_at,
                        keys: Vec::new(),
                    },
                );
                self.store.expiries.insert((expires_at, lease));
                EtcdReply::Granted {
                    lease,
                    ttl_s,
                    error: String::new(),
                }
            }
            EtcdRequest::KeepAlive { lease } => {
                let ttl_s = self.store.leases.get(&lease).map_or(0, |entry| entry.ttl_s);
                self.store.set_expiry(lease, now.saturating_add(ms(ttl_s)));
                EtcdReply::KeptAlive {
                    header: Some(self.header()),
                    ttl_s,
                }
            }
            EtcdRequest::Revoke { lease } => {
                if !self.store.revoke(lease) {
                    return Some(EtcdResponse::LeaseNotFound);
                }
                EtcdReply::Revoked
            }
            EtcdRequest::TimeToLive { lease } => {
                let ttl_s = self.store.leases.get(&lease).map_or(-1, |entry| {
                    i64::try_from(entry.expires_at.saturating_sub(now) / 1000).unwrap_or(i64::MAX)
                });
                EtcdReply::TimeToLive { ttl_s }
            }
            EtcdRequest::Txn(txn) => {
                let path = self.store.decide(&txn);
                if !self.store.leases_known(&txn, &path) {
                    return Some(EtcdResponse::LeaseNotFound);
                }
                let rev = self.store.revision + 1;
                let mut changed = false;
                let responses = self.store.apply(&txn, &path, rev, &mut changed);
                if changed {
                    self.store.revision = rev;
                }
                EtcdReply::Txn {
                    header: Some(self.header()),
                    succeeded: path.succeeded,
                    responses,
                }
            }
            _ => return None,
        };
        Some(EtcdResponse::Answer(reply))
    }

    /// Revokes the lease `id`'s key is attached to, as its TTL running out would (a key on no
    /// lease is deleted): the conformance harness.
    pub fn expire(&mut self, now: u64, id: MachineId) {
        self.advance(now);
        let key = Key::Lease(id.get());
        match self.store.get(key).map(|kv| kv.lease) {
            Some(lease) if lease != 0 => {
                self.store.revoke(lease);
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
        let Some(lease) = self.store.get(key).map(|kv| kv.lease) else {
            return false;
        };
        self.store.revision += 1;
        self.store.delete(key);
        if lease != 0 {
            self.store.revoke(lease);
        }
        true
    }

    /// `etcdctl del --prefix` at `now`, in one revision: the lease and floor keys of the IDs the
    /// prefix offers, the initialization marker and the hold-off key (the keys that hold IDs
    /// from the capacity on stay: they model another fleet, not this one's data; with the
    /// marker checked off the marker stays too). The etcd leases live on, holding nothing.
    /// Returns how many IDs were held.
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
        keys.push(Key::HoldOff);
        if !self.keeps_marker {
            keys.push(Key::Marker);
        }
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
            .filter(|(_, kv)| {
                kv.as_ref()
                    .is_some_and(|kv| kv.lease == 0 || self.store.live(kv.lease, now))
            })
            .map(|(i, _)| machine_id(i))
            .collect()
    }

    /// The floor stored with `id` (0 when none or unreadable).
    #[must_use]
    pub fn floor(&self, id: MachineId) -> u64 {
        self.store
            .get(Key::Floor(id.get()))
            .and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse().ok())
            .unwrap_or(0)
    }
}

/// A gRPC status as etcd answers it.
fn status(code: tonic::Code, message: &str) -> TransportError {
    TransportError::Failed(etcd_client::Error::GRpcStatus(tonic::Status::new(
        code, message,
    )))
}

impl<L: Link> Transport for SimTransport<L> {
    fn exchange(
        &self,
        request: EtcdRequest,
    ) -> impl Future<Output = Result<EtcdReply, TransportError>> + Send {
        let reply = self.link.exchange(Request::Etcd(request));
        async move {
            match reply.await {
                Ok(Reply::Etcd(EtcdResponse::Answer(reply))) => Ok(reply),
                Ok(Reply::Etcd(EtcdResponse::LeaseNotFound)) => Err(status(
                    tonic::Code::NotFound,
                    "etcdserver: requested lease not found",
                )),
                Ok(_) => Err(status(
                    tonic::Code::Unimplemented,
                    "unknown service etcdserverpb.KV",
                )),
                Err(e) => Err(TransportError::Failed(etcd_client::Error::IoError(
                    e.into(),
                ))),
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

/// lease-etcd's strategy over `link`, with `max_lease_duration` = `max_lease`, the clock offset
/// the simulation's amnesia hold-off allows for, and its random choices drawn from `seed` (its
/// guards are its server's and the [`Client`]'s).
///
/// # Panics
/// Never: the options are in range.
pub fn strategy<L: Link>(
    link: L,
    _: Guards,
    max_lease: Duration,
    seed: u64,
) -> EtcdStrategy<SimTransport<L>> {
    let options = EtcdOptions::new(["http://etcd.sim:2379"])
        .with_max_lease_duration(max_lease.max(Duration::from_secs(1)))
        .with_max_clock_offset(Duration::from_millis(super::MAX_CLOCK_OFFSET_MS));
    EtcdStrategy::with_transport(SimTransport::new(link, seed), options)
        .unwrap_or_else(|e| panic!("the simulation's etcd options: {e}"))
}

/// lease-etcd's strategy as the simulation runs it, with its guard switches ([`Client`]).
pub type EtcdClient<L> = Client<EtcdStrategy<SimTransport<L>>>;

impl<L: Link> Simulated for EtcdStrategy<SimTransport<L>> {
    /// The etcd lease ID and the key's create revision.
    fn key(lease: &EtcdLease) -> Result<u128, Failure> {
        Ok((u128::from(lease.etcd_lease_id().cast_unsigned()) << 64)
            | u128::from(lease.revision().cast_unsigned()))
    }

    /// The release, then, as a store without a guard, the key deleted (if its create revision
    /// is still this lease's): etcd grants no lease shorter than 2 s, so a guard of 0 is not.
    async fn release_unguarded(
        &self,
        lease: &EtcdLease,
        request: Release,
    ) -> Result<(), EtcdLeaseError> {
        self.release(lease, request).await?;
        let key = Key::Lease(lease.machine_id().get()).name();
        let txn = Txn {
            when: vec![Compare::new(
                key.clone(),
                CompareOp::Equal,
                Target::CreateRevision(lease.revision()),
            )],
            then: vec![TxnOp::Delete(key)],
            otherwise: Vec::new(),
        };
        // Best effort: a lost delete leaves the guard in place, as with the guard on.
        let _ = self.transport().exchange(EtcdRequest::Txn(txn)).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: u16, lease: i64) -> EtcdRequest {
        let key = Key::Lease(id).name();
        EtcdRequest::Txn(Txn {
            when: vec![Compare::new(
                key.clone(),
                CompareOp::Equal,
                Target::CreateRevision(0),
            )],
            then: vec![TxnOp::Put {
                key,
                value: b"token".to_vec(),
                lease,
            }],
            otherwise: Vec::new(),
        })
    }

    /// A nested transaction that sets `id`'s floor to `floor` if it is absent or lower, as
    /// lease-etcd sends it.
    fn raise_floor(id: u16, floor: u64) -> Txn {
        let key = Key::Floor(id).name();
        let value = format!("{floor:020}").into_bytes();
        let put = TxnOp::Put {
            key: key.clone(),
            value: value.clone(),
            lease: 0,
        };
        let create = Txn {
            when: vec![Compare::new(
                key.clone(),
                CompareOp::Equal,
                Target::CreateRevision(0),
            )],
            then: vec![put.clone()],
            otherwise: Vec::new(),
        };
        Txn {
            when: vec![Compare::new(key, CompareOp::Less, Target::Value(value))],
            then: vec![put],
            otherwise: vec![TxnOp::Txn(create)],
        }
    }

    /// The server's answer to `request` at `now`, taken apart by `reply`.
    macro_rules! ask {
        ($s:expr, $now:expr, $request:expr, $reply:pat => $out:expr) => {
            match $s.handle($now, $request) {
                Some(EtcdResponse::Answer($reply)) => $out,
                other => panic!("{other:?}"),
            }
        };
    }

    fn grant(s: &mut EtcdServer, now: u64, ttl_s: i64) -> (i64, i64) {
        ask!(s, now, EtcdRequest::Grant { ttl_s }, EtcdReply::Granted { lease, ttl_s, .. } =>
            (lease, ttl_s))
    }

    fn txn(s: &mut EtcdServer, now: u64, request: EtcdRequest) -> (bool, i64) {
        ask!(s, now, request, EtcdReply::Txn { header: Some(h), succeeded, .. } =>
            (succeeded, h.revision))
    }

    fn range(s: &mut EtcdServer, now: u64) -> Vec<KeyValue> {
        let prefix = PREFIX.to_owned();
        ask!(s, now, EtcdRequest::Range { prefix }, EtcdReply::Range { kvs, .. } => kvs)
    }

    #[test]
    fn key_names_are_lease_etcds() {
        for key in [
            Key::Lease(0),
            Key::Lease(511),
            Key::Floor(7),
            Key::Marker,
            Key::HoldOff,
        ] {
            assert_eq!(Key::parse(&key.name()), Some(key));
        }
        for id in 0..MachineId::COUNT {
            for key in [Key::Lease(id), Key::Floor(id)] {
                assert_eq!(key.name_bytes(), key.name().as_bytes());
            }
        }
        for key in [Key::Marker, Key::HoldOff] {
            assert_eq!(key.name_bytes(), key.name().as_bytes());
        }
        assert_eq!(Key::Lease(7).name(), "/nononce/leases/7");
        assert_eq!(Key::Floor(511).name(), "/nononce/leases/floor/511");
        for other in [
            "/nononce/leases/512",
            "/nononce/leases/07",
            "/other/1",
            "/nononce/leases/",
        ] {
            assert_eq!(Key::parse(other), None, "{other}");
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
        assert_eq!(
            s.handle(2_001, claim(8, a)),
            Some(EtcdResponse::LeaseNotFound)
        );
        assert_eq!(s.revision(), 4);
        // A keep-alive restores the full TTL; an ended lease answers 0.
        let kept = |s: &mut EtcdServer, now, lease| {
            ask!(s, now, EtcdRequest::KeepAlive { lease }, EtcdReply::KeptAlive { ttl_s, .. } =>
                ttl_s)
        };
        assert_eq!(kept(&mut s, 4_000, b), 5);
        assert_eq!(kept(&mut s, 4_000, a), 0);
        assert_eq!(s.held(8_999), vec![MachineId::new(7).unwrap()]);
        assert!(s.held(9_000).is_empty());
        // A revoke of a lease etcd does not know is refused.
        assert_eq!(
            s.handle(9_000, EtcdRequest::Revoke { lease: b }),
            Some(EtcdResponse::LeaseNotFound)
        );
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
        // The lease key, the marker, and the other fleet's keys.
        assert_eq!(range(&mut s, 0).len(), 2 + 512 - 4);
        s.lose_leader(9_000, None);
        s.start(10_000, Recovery::Election);
        // 10 s + the election timeout from the new leader's start.
        assert!(s.held(20_999).contains(&MachineId::new(1).unwrap()));
        assert!(!s.held(21_000).contains(&MachineId::new(1).unwrap()));
        // A restore to an empty store, under a new cluster ID: the revision goes back.
        let revision = s.revision();
        let mut hidden = s.clone();
        hidden.set_guards(Guards {
            amnesia: false,
            ..Guards::ALL
        });
        let restore = Recovery::Restore {
            from_backup: false,
            new_cluster_id: true,
        };
        s.stop(11_000);
        assert_eq!(s.start(12_000, restore), 1);
        assert!(s.revision() < revision);
        assert_ne!(s.cluster_id(), 9);
        assert!(!s.held(12_000).contains(&MachineId::new(1).unwrap()));
        assert!(!s.initialized());
        // With the amnesia guard off the same restore shows no client it went back, and with
        // it (the marker checked within it) the marker stays.
        hidden.stop(11_000);
        assert_eq!(hidden.start(12_000, restore), 1);
        assert_eq!((hidden.revision(), hidden.cluster_id()), (revision, 9));
        assert!(hidden.initialized());
    }

    #[test]
    fn a_wipe_deletes_the_prefix_in_one_revision_and_the_hold_off_key_ends_with_its_lease() {
        let mut s = EtcdServer::new(4, 9);
        assert!(s.initialized());
        let (a, _) = grant(&mut s, 0, 10);
        txn(&mut s, 0, claim(1, a));
        txn(&mut s, 0, EtcdRequest::Txn(raise_floor(1, 70)));
        let revision = s.revision();
        let mut kept = s.clone();
        kept.set_guards(Guards {
            marker: false,
            ..Guards::ALL
        });
        assert_eq!(kept.wipe(100), 1);
        assert!(kept.initialized());
        assert_eq!(s.wipe(100), 1);
        assert_eq!(s.revision(), revision + 1);
        assert!(!s.initialized());
        assert!(s.held(100).is_empty());
        assert_eq!(s.floor(MachineId::new(1).unwrap()), 0);
        // The other fleet's keys stay.
        assert_eq!(range(&mut s, 100).len(), 512 - 4);
        // The hold-off key and the marker; the key goes when its lease ends.
        let (h, _) = grant(&mut s, 200, 3);
        let begin = EtcdRequest::Txn(Txn {
            when: vec![Compare::new(
                Key::Marker.name(),
                CompareOp::Equal,
                Target::Version(0),
            )],
            then: vec![
                TxnOp::Put {
                    key: Key::HoldOff.name(),
                    value: b"held off".to_vec(),
                    lease: h,
                },
                TxnOp::Put {
                    key: Key::Marker.name(),
                    value: MARKER_VALUE.to_vec(),
                    lease: 0,
                },
            ],
            otherwise: Vec::new(),
        });
        assert!(txn(&mut s, 200, begin).0);
        let ttl = |s: &mut EtcdServer, now| {
            ask!(s, now, EtcdRequest::TimeToLive { lease: h }, EtcdReply::TimeToLive { ttl_s } =>
                ttl_s)
        };
        assert_eq!(ttl(&mut s, 1_200), 2);
        assert_eq!(ttl(&mut s, 3_200), -1);
        assert!(s.initialized());
        assert!(
            range(&mut s, 3_200)
                .iter()
                .all(|kv| kv.key != Key::HoldOff.name().into_bytes())
        );
    }
}
