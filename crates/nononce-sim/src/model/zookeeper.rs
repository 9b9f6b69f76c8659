//! A ZooKeeper ensemble (3.6 or later, its default timings scaled to the simulation) as
//! `lease-zookeeper` meets it, answering the requests of `lease_zookeeper::transport`:
//!
//! - a tree of znodes, each with its data, the transactions that created it and last wrote it
//!   (`czxid`, `mzxid`), its version and, for an ephemeral one, the session that owns it; a
//!   zxid is the leader's epoch in the high 32 bits and a counter in the low ones, and every
//!   transaction (a multi-op, a create of `mkdir -p`, a session's end) takes the next;
//! - sessions: granted the timeout asked for, clamped into the server's minimum and maximum;
//!   ended once the ensemble has heard nothing of them for their timeout (the end rounded up
//!   to the next tick, as ZooKeeper's expiry queue does), their ephemeral znodes deleted in the
//!   same transaction; every request on a session touches it; a request on a session that
//!   ended (or that the ensemble never knew) is answered `SESSIONEXPIRED`;
//! - a session's requests applied in the order sent: each carries the number its client gave
//!   it (ZooKeeper's xid), and one that arrives after a later one (its connection was lost, the
//!   client moved on) is never applied, as on ZooKeeper, whose sessions talk over one TCP
//!   connection at a time;
//! - multi-reads (a missing znode answers `Missing`), multi-ops applied whole or not at all
//!   (`Refused` at the first operation that fails, with ZooKeeper's `NONODE`, `NODEEXISTS`,
//!   `BADVERSION`, `NOTEMPTY`; a create needs its parent), `sync`, `mkdir -p`, and the release
//!   guard's request: a session of its own holding one ephemeral znode, never touched again.
//!
//! The client is lease-zookeeper's own [`ZooKeeperStrategy`], over a [`ZkTransport`] that keeps
//! one session as lease-zookeeper's `Connection` does: opened by a round trip of its own before
//! the first request, forgotten when a request is answered `SESSIONEXPIRED` (that request fails
//! with it), and opened again by the next.
//!
//! Not modelled: the client library's pings (a session lives only as long as the strategy's
//! own requests keep it: it ends sooner than in production, never later), followers and their
//! lag behind the leader (`sync` is answered at once: every read sees every write), watches,
//! ACLs, and paths outside the strategy's root beyond what `mkdir -p` creates.
//!
//! Faults: a restart keeps every znode and session (ZooKeeper restores both from its snapshot
//! and log), every session's timer starts again, and the new leader's epoch raises every later
//! zxid; a restart without data (every member's data directory lost) forgets every znode and
//! session, and zxids start again low; a wipe (`deleteall` of the lease data by an operator)
//! deletes the lease, guard and floor znodes, the marker and the hold-off while sessions live
//! on. Coordinator clock jumps do not touch sessions (ZooKeeper times them on its monotonic
//! clock).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lease_core::MachineId;
use lease_manager::Failure;
use lease_zookeeper::transport::{
    Answer, NodeStat, ReadOp, ReadResult, Refusal, Reply as ZkReply, Request as ZkOp, Session,
    Transport, TransportError, WriteOp, WriteResult,
};
use lease_zookeeper::zookeeper_client;
use lease_zookeeper::{ZooKeeperLease, ZooKeeperOptions, ZooKeeperStrategy};

use super::client::{Client, SimTransport, Simulated};
use super::{Guards, Link, Reply, Request, machine_id};

/// The root lease-zookeeper uses by default.
pub const ROOT: &str = "/nononce";
/// The shortest session the model's servers grant (`minSessionTimeout`).
pub const MIN_SESSION_MS: u64 = 1_000;
/// The longest session the model's servers grant (`maxSessionTimeout`, ZooKeeper's default of
/// 20 ticks of 2 s), which lease-zookeeper's `max_session_timeout` defaults to as well.
pub const MAX_SESSION_MS: u64 = 40_000;
/// The leader's tick: sessions end on tick boundaries.
pub const TICK_MS: u64 = 500;
/// What the initialization marker holds (only its presence counts).
const MARKER_DATA: &[u8] = b"nononce machine-id leases";
/// What the znodes of the IDs beyond the capacity hold: another fleet's, never ending.
const OTHER_FLEET: &[u8] = b"another fleet";
/// The epoch of a new ensemble's first leader.
const FIRST_EPOCH: i64 = 1;

/// A message to the ensemble: a new session, or one request on a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkRequest {
    /// Opens a session, asking for `timeout`.
    Connect {
        /// The session timeout asked for.
        timeout: Duration,
    },
    /// One of lease-zookeeper's requests on `session`, the `xid`-th its client sent on it.
    On {
        /// The session.
        session: i64,
        /// Its place among the session's requests (from 1).
        xid: u64,
        /// The request.
        request: ZkOp,
    },
}

/// The ensemble's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkResponse {
    /// A session was opened.
    Connected(Session),
    /// The request was applied (or refused as a whole): its reply.
    Answer(ZkReply),
    /// The session ended (or was never known): nothing applied.
    SessionExpired,
    /// The request came after a later one of its session: its connection was gone, it was
    /// never applied.
    ConnectionLoss,
}

/// One znode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Znode {
    data: Vec<u8>,
    czxid: i64,
    mzxid: i64,
    version: i32,
    /// The owning session; 0 for a persistent znode.
    owner: i64,
    /// The children's names.
    children: BTreeSet<String>,
}

impl Znode {
    const fn new(data: Vec<u8>, zxid: i64, owner: i64) -> Self {
        Self {
            data,
            czxid: zxid,
            mzxid: zxid,
            version: 0,
            owner,
            children: BTreeSet::new(),
        }
    }

    const fn stat(&self) -> NodeStat {
        NodeStat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            version: self.version,
            ephemeral_owner: self.owner,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionEntry {
    timeout_ms: u64,
    /// When it ends unless touched (ms, on the ensemble's clock).
    deadline: u64,
    /// The highest request number applied on it.
    last_xid: u64,
    /// Its ephemeral znodes.
    ephemerals: BTreeSet<String>,
}

/// What undoes one change of a multi-op that was refused further on.
#[derive(Debug)]
enum Undo {
    /// A znode was created: delete it.
    Created(String),
    /// A znode was written or deleted: put it back as it was.
    Was(String, Znode),
}

/// `path`'s parent and its name in it.
fn split(path: &str) -> Option<(&str, &str)> {
    let (parent, name) = path.rsplit_once('/')?;
    if name.is_empty() || !path.starts_with('/') {
        return None;
    }
    Some((if parent.is_empty() { "/" } else { parent }, name))
}

/// A ZooKeeper ensemble holding one root of lease, guard and floor znodes.
#[derive(Debug, Clone)]
pub struct ZkServer {
    tree: HashMap<String, Znode>,
    sessions: BTreeMap<i64, SessionEntry>,
    /// `(deadline, session)` of every session.
    expiries: BTreeSet<(u64, i64)>,
    epoch: i64,
    counter: i64,
    next_session: i64,
    capacity: u16,
    min_session_ms: u64,
    max_session_ms: u64,
    /// The amnesia guard is off: a loss of data keeps the zxids counting on and leaves a floor
    /// znode of 0 for every ID, written after the loss (as a provisioning script would), so no
    /// check of the strategy can see it.
    hides_rewind: bool,
    /// The marker guard is off: the marker and the folders survive every loss.
    keeps_marker: bool,
}

impl ZkServer {
    /// A new ensemble whose root is deployed (its folders and marker, as `nononce-cli`'s
    /// `init` makes them) and offers `capacity` IDs (at most 512; the rest are held by
    /// persistent znodes of another fleet), granting sessions of `min_session_ms` to
    /// `max_session_ms`.
    #[must_use]
    pub fn new(capacity: u16, min_session_ms: u64, max_session_ms: u64) -> Self {
        let mut server = Self {
            tree: HashMap::new(),
            sessions: BTreeMap::new(),
            expiries: BTreeSet::new(),
            epoch: FIRST_EPOCH,
            counter: 0,
            next_session: 0x0100_0188_0000_0001,
            capacity,
            min_session_ms: min_session_ms.max(1),
            max_session_ms: max_session_ms.max(min_session_ms.max(1)),
            hides_rewind: false,
            keeps_marker: false,
        };
        server.deploy(true);
        server
    }

    /// Holds the ensemble to the guards that lease-zookeeper has no switch for: with the
    /// amnesia guard off no loss of data shows in the zxids of the floors, with the marker
    /// checked off the marker is never lost.
    pub const fn set_guards(&mut self, guards: Guards) {
        self.hides_rewind = !guards.amnesia;
        self.keeps_marker = !guards.marker_checked();
    }

    /// The zxid of the last transaction.
    #[must_use]
    pub const fn zxid(&self) -> i64 {
        (self.epoch << 32) | self.counter
    }

    /// The leader's epoch.
    #[must_use]
    pub const fn epoch(&self) -> i64 {
        self.epoch
    }

    /// How many sessions live.
    #[must_use]
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The next transaction's zxid.
    const fn next_zxid(&mut self) -> i64 {
        self.counter += 1;
        self.zxid()
    }

    /// The root and what lives beside the lease data: the other fleet's znodes, and, if
    /// `initialized`, the folders and the marker, each created in a transaction of its own.
    fn deploy(&mut self, initialized: bool) {
        self.tree
            .insert("/".to_owned(), Znode::new(Vec::new(), 0, 0));
        let capacity = self.capacity.min(MachineId::COUNT);
        let mut paths = Vec::new();
        if initialized || capacity < MachineId::COUNT {
            paths.push(ROOT.to_owned());
            paths.push(format!("{ROOT}/leases"));
        }
        if initialized {
            paths.push(format!("{ROOT}/guards"));
            paths.push(format!("{ROOT}/floors"));
        }
        for path in paths {
            let zxid = self.next_zxid();
            self.insert(&path, Znode::new(Vec::new(), zxid, 0));
        }
        if initialized {
            let zxid = self.next_zxid();
            self.insert(
                &format!("{ROOT}/initialized"),
                Znode::new(MARKER_DATA.to_vec(), zxid, 0),
            );
        }
        if capacity < MachineId::COUNT {
            let zxid = self.next_zxid();
            for id in capacity..MachineId::COUNT {
                let path = format!("{ROOT}/leases/{id}");
                self.insert(&path, Znode::new(OTHER_FLEET.to_vec(), zxid, 0));
            }
        }
    }

    /// Adds `node` at `path` (its parent exists), in its parent's children and its session's
    /// ephemerals.
    fn insert(&mut self, path: &str, node: Znode) {
        if let Some((parent, name)) = split(path)
            && let Some(parent) = self.tree.get_mut(parent)
        {
            parent.children.insert(name.to_owned());
        }
        if let Some(session) = self.sessions.get_mut(&node.owner) {
            session.ephemerals.insert(path.to_owned());
        }
        self.tree.insert(path.to_owned(), node);
    }

    /// Removes the znode at `path`, from its parent's children and its session's ephemerals.
    fn remove(&mut self, path: &str) -> Option<Znode> {
        let node = self.tree.remove(path)?;
        if let Some((parent, name)) = split(path)
            && let Some(parent) = self.tree.get_mut(parent)
        {
            parent.children.remove(name);
        }
        if let Some(session) = self.sessions.get_mut(&node.owner) {
            session.ephemerals.remove(path);
        }
        Some(node)
    }

    /// When a session of `timeout_ms` touched at `now` ends: rounded up to the next tick.
    const fn deadline(now: u64, timeout_ms: u64) -> u64 {
        now.saturating_add(timeout_ms).div_ceil(TICK_MS) * TICK_MS
    }

    fn touch(&mut self, session: i64, now: u64) {
        if let Some(entry) = self.sessions.get_mut(&session) {
            self.expiries.remove(&(entry.deadline, session));
            entry.deadline = Self::deadline(now, entry.timeout_ms);
            self.expiries.insert((entry.deadline, session));
        }
    }

    /// Opens a session asking for `timeout`, clamped into the server's bounds.
    fn open(&mut self, now: u64, timeout: Duration) -> Session {
        let asked = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let timeout_ms = asked.clamp(self.min_session_ms, self.max_session_ms);
        let id = self.next_session;
        self.next_session += 1;
        // Creating a session is a transaction too.
        self.next_zxid();
        let deadline = Self::deadline(now, timeout_ms);
        self.sessions.insert(
            id,
            SessionEntry {
                timeout_ms,
                deadline,
                last_xid: 0,
                ephemerals: BTreeSet::new(),
            },
        );
        self.expiries.insert((deadline, id));
        Session {
            id,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    /// Ends `session` and deletes its ephemeral znodes, in one transaction.
    fn close(&mut self, session: i64) {
        let Some(entry) = self.sessions.remove(&session) else {
            return;
        };
        self.expiries.remove(&(entry.deadline, session));
        self.next_zxid();
        for path in entry.ephemerals {
            self.remove(&path);
        }
    }

    /// Ends every session the ensemble has heard nothing of for its timeout by `now`.
    pub fn advance(&mut self, now: u64) {
        while let Some(&(deadline, session)) = self.expiries.first() {
            if deadline > now {
                break;
            }
            self.close(session);
        }
    }

    /// The ensemble goes down at `now`: what ended until then ended.
    pub fn stop(&mut self, now: u64) {
        self.advance(now);
    }

    /// The ensemble is back at `now` with a new leader: with its data (`keeps_data`), every
    /// session with its timer started again; without, every znode and session forgotten and
    /// the zxids counting from a new ensemble's (unless the amnesia guard is off). Returns how
    /// many sessions it forgot.
    pub fn start(&mut self, now: u64, keeps_data: bool) -> usize {
        if keeps_data {
            self.epoch += 1;
            self.counter = 0;
            let sessions: Vec<(i64, u64)> = self
                .sessions
                .iter()
                .map(|(id, s)| (*id, s.timeout_ms))
                .collect();
            self.expiries.clear();
            for (id, timeout_ms) in sessions {
                let deadline = Self::deadline(now, timeout_ms);
                if let Some(entry) = self.sessions.get_mut(&id) {
                    entry.deadline = deadline;
                }
                self.expiries.insert((deadline, id));
            }
            return 0;
        }
        let forgotten = self.sessions.len();
        self.sessions.clear();
        self.expiries.clear();
        self.tree.clear();
        if self.hides_rewind {
            self.epoch += 1;
        } else {
            self.epoch = FIRST_EPOCH;
        }
        self.counter = 0;
        self.deploy(self.keeps_marker);
        if self.hides_rewind {
            self.refloor();
        }
        forgotten
    }

    /// A floor znode of 0 for every ID the root offers, each written now (the amnesia guard
    /// off: the lost floors are not seen as lost).
    fn refloor(&mut self) {
        let folder = format!("{ROOT}/floors");
        if !self.tree.contains_key(&folder) {
            let zxid = self.next_zxid();
            self.insert(&folder, Znode::new(Vec::new(), zxid, 0));
        }
        let zxid = self.next_zxid();
        for id in 0..self.capacity.min(MachineId::COUNT) {
            let path = format!("{folder}/{id}");
            self.remove(&path);
            self.insert(&path, Znode::new(b"0".to_vec(), zxid, 0));
        }
    }

    /// An operator deletes the lease data at `now` (`deleteall`, one znode at a time): the
    /// lease, guard and floor znodes of the IDs the root offers, the marker and the hold-off
    /// (with the marker checked off the marker stays). Sessions live on. Returns how many IDs
    /// were held.
    pub fn wipe(&mut self, now: u64) -> usize {
        self.advance(now);
        let held = self.held(now).len();
        let mut paths = Vec::new();
        for id in 0..self.capacity.min(MachineId::COUNT) {
            for folder in ["leases", "guards", "floors"] {
                paths.push(format!("{ROOT}/{folder}/{id}"));
            }
        }
        paths.push(format!("{ROOT}/hold-off"));
        if !self.keeps_marker {
            paths.push(format!("{ROOT}/initialized"));
        }
        for path in paths {
            if self.remove(&path).is_some() {
                self.next_zxid();
            }
        }
        if self.hides_rewind {
            self.refloor();
        }
        held
    }

    /// Whether the root has its initialization marker.
    #[must_use]
    pub fn initialized(&self) -> bool {
        self.tree.contains_key(&format!("{ROOT}/initialized"))
    }

    /// The IDs (below the capacity) whose lease znode exists at `now`, on a session that lives.
    #[must_use]
    pub fn held(&self, now: u64) -> Vec<MachineId> {
        (0..usize::from(self.capacity.min(MachineId::COUNT)))
            .filter(|i| {
                self.tree
                    .get(&format!("{ROOT}/leases/{i}"))
                    .is_some_and(|node| {
                        node.owner == 0
                            || self
                                .sessions
                                .get(&node.owner)
                                .is_some_and(|s| s.deadline > now)
                    })
            })
            .map(machine_id)
            .collect()
    }

    /// The floor stored with `id` (0 when none or unreadable).
    #[must_use]
    pub fn floor(&self, id: MachineId) -> u64 {
        self.tree
            .get(&format!("{ROOT}/floors/{id}"))
            .and_then(|node| std::str::from_utf8(&node.data).ok()?.parse().ok())
            .unwrap_or(0)
    }

    /// Deletes `id`'s lease znode as the end of its session would, the session itself left
    /// alive (one node's session may hold many IDs): the conformance harness, as
    /// lease-zookeeper's own suite does on a real ensemble.
    pub fn expire(&mut self, now: u64, id: MachineId) {
        self.advance(now);
        if self.remove(&format!("{ROOT}/leases/{id}")).is_some() {
            self.next_zxid();
        }
    }

    /// An operator deletes `id`'s lease znode (`delete`); its session and floor stay. Whether
    /// the ID was held.
    pub fn force_release(&mut self, now: u64, id: MachineId) -> bool {
        self.advance(now);
        if id.get() >= self.capacity {
            return false;
        }
        if self.remove(&format!("{ROOT}/leases/{id}")).is_none() {
            return false;
        }
        self.next_zxid();
        true
    }

    /// Applies one message at `now` (the leader's monotonic clock, in ms); `None` for a request
    /// of a later protocol than the model's.
    pub fn handle(&mut self, now: u64, message: ZkRequest) -> Option<ZkResponse> {
        self.advance(now);
        let (session, xid, request) = match message {
            ZkRequest::Connect { timeout } => {
                return Some(ZkResponse::Connected(self.open(now, timeout)));
            }
            ZkRequest::On {
                session,
                xid,
                request,
            } => (session, xid, request),
        };
        let Some(entry) = self.sessions.get_mut(&session) else {
            return Some(ZkResponse::SessionExpired);
        };
        if xid <= entry.last_xid {
            return Some(ZkResponse::ConnectionLoss);
        }
        entry.last_xid = xid;
        self.touch(session, now);
        let reply = match request {
            ZkOp::Read(ops) => ZkReply::Read(ops.iter().map(|op| self.read(op)).collect()),
            ZkOp::Write(ops) => self.multi(session, &ops),
            ZkOp::Sync(_) => ZkReply::Done,
            ZkOp::MakePath(path) => {
                self.make_path(&path);
                ZkReply::Done
            }
            ZkOp::Guard {
                path,
                data,
                timeout,
            } => {
                let guard = self.open(now, timeout);
                let create = WriteOp::Create {
                    path,
                    data,
                    ephemeral: true,
                };
                match self.multi(guard.id, &[create]) {
                    ZkReply::Written(_) => ZkReply::Done,
                    refused => refused,
                }
            }
            _ => return None,
        };
        Some(ZkResponse::Answer(reply))
    }

    fn read(&self, op: &ReadOp) -> ReadResult {
        let path = match op {
            ReadOp::Children(path) | ReadOp::Data(path) => path,
        };
        let Some(node) = self.tree.get(path) else {
            return ReadResult::Missing;
        };
        match op {
            ReadOp::Children(_) => ReadResult::Children(node.children.iter().cloned().collect()),
            ReadOp::Data(_) => ReadResult::Data {
                data: node.data.clone(),
                stat: node.stat(),
            },
        }
    }

    /// `mkdir -p`: each missing znode on the way created persistent, in a transaction of its
    /// own.
    fn make_path(&mut self, path: &str) {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            if !self.tree.contains_key(&at) {
                let zxid = self.next_zxid();
                self.insert(&at, Znode::new(Vec::new(), zxid, 0));
            }
        }
    }

    /// A multi-op on `session`: every operation applied in order in one transaction, or none.
    fn multi(&mut self, session: i64, ops: &[WriteOp]) -> ZkReply {
        // Refused or applied, a multi-op is one transaction of the log.
        let zxid = self.next_zxid();
        let mut undo = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match self.apply(session, op, zxid, &mut undo) {
                Ok(result) => results.push(result),
                Err(refusal) => {
                    for step in undo.into_iter().rev() {
                        match step {
                            Undo::Created(path) => {
                                self.remove(&path);
                            }
                            Undo::Was(path, node) => {
                                self.remove(&path);
                                self.insert(&path, node);
                            }
                        }
                    }
                    return ZkReply::Refused { index, refusal };
                }
            }
        }
        ZkReply::Written(results)
    }

    fn apply(
        &mut self,
        session: i64,
        op: &WriteOp,
        zxid: i64,
        undo: &mut Vec<Undo>,
    ) -> Result<WriteResult, Refusal> {
        let at_version = |node: &Znode, version: Option<i32>| {
            if version.is_some_and(|v| v != node.version) {
                Err(Refusal::BadVersion)
            } else {
                Ok(())
            }
        };
        match op {
            WriteOp::Check { path, version } => {
                let node = self.tree.get(path).ok_or(Refusal::NoNode)?;
                at_version(node, *version)?;
                Ok(WriteResult::Checked)
            }
            WriteOp::Create {
                path,
                data,
                ephemeral,
            } => {
                if self.tree.contains_key(path) {
                    return Err(Refusal::NodeExists);
                }
                let (parent, _) = split(path).ok_or(Refusal::NoNode)?;
                if !self.tree.contains_key(parent) {
                    return Err(Refusal::NoNode);
                }
                let owner = if *ephemeral { session } else { 0 };
                self.insert(path, Znode::new(data.clone(), zxid, owner));
                undo.push(Undo::Created(path.clone()));
                Ok(WriteResult::Created)
            }
            WriteOp::SetData {
                path,
                data,
                version,
            } => {
                let node = self.tree.get_mut(path).ok_or(Refusal::NoNode)?;
                at_version(node, *version)?;
                undo.push(Undo::Was(path.clone(), node.clone()));
                node.data.clone_from(data);
                node.mzxid = zxid;
                node.version += 1;
                Ok(WriteResult::Set(node.stat()))
            }
            WriteOp::Delete { path, version } => {
                let node = self.tree.get(path).ok_or(Refusal::NoNode)?;
                at_version(node, *version)?;
                if !node.children.is_empty() {
                    return Err(Refusal::NotEmpty);
                }
                let node = self.remove(path).ok_or(Refusal::NoNode)?;
                undo.push(Undo::Was(path.clone(), node));
                Ok(WriteResult::Deleted)
            }
        }
    }
}

/// lease-zookeeper's transport in the simulation: one session at a time, as its `Connection`
/// keeps one, over a [`Link`], with the node's clock and a seeded random source.
#[derive(Debug)]
pub struct ZkTransport<L> {
    inner: SimTransport<L>,
    /// The session timeout asked for.
    timeout: Duration,
    /// The session and the number of the last request sent on it.
    session: Mutex<Option<(Session, u64)>>,
}

impl<L: Link> ZkTransport<L> {
    /// Requests over `link` on sessions asking for `timeout`, random numbers from `seed`.
    pub fn new(link: L, timeout: Duration, seed: u64) -> Self {
        Self {
            inner: SimTransport::new(link, seed),
            timeout,
            session: Mutex::new(None),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<(Session, u64)>> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session to send on and the request's number: the one held, or a new one.
    async fn session(&self) -> Result<(Session, u64), TransportError> {
        if let Some((session, xid)) = self.held().as_mut() {
            *xid += 1;
            return Ok((*session, *xid));
        }
        let connect = Request::ZooKeeper(ZkRequest::Connect {
            timeout: self.timeout,
        });
        match self.inner.link.exchange(connect).await {
            Ok(Reply::ZooKeeper(ZkResponse::Connected(session))) => {
                let mut held = self.held();
                // Another call may have connected meanwhile: keep the newer session.
                let (session, xid) = held.get_or_insert((session, 0));
                *xid += 1;
                Ok((*session, *xid))
            }
            _ => Err(TransportError::Connect(
                zookeeper_client::Error::ConnectionLoss,
            )),
        }
    }
}

impl<L: Link> Transport for ZkTransport<L> {
    async fn exchange(&self, request: ZkOp) -> Result<Answer, TransportError> {
        let (session, xid) = self.session().await?;
        let message = Request::ZooKeeper(ZkRequest::On {
            session: session.id,
            xid,
            request,
        });
        match self.inner.link.exchange(message).await {
            Ok(Reply::ZooKeeper(ZkResponse::Answer(reply))) => Ok(Answer { session, reply }),
            Ok(Reply::ZooKeeper(ZkResponse::SessionExpired)) => {
                let mut held = self.held();
                if held.is_some_and(|(s, _)| s.id == session.id) {
                    *held = None;
                }
                Err(TransportError::Failed(
                    zookeeper_client::Error::SessionExpired,
                ))
            }
            _ => Err(TransportError::Failed(
                zookeeper_client::Error::ConnectionLoss,
            )),
        }
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.inner.link.now_ms())
    }

    fn random(&self) -> u64 {
        self.inner.next_random()
    }
}

/// The session timeout the simulation's nodes ask for with leases up to `max_lease`: leases
/// of three quarters of it as long as `max_lease` where the server allows, within 4 s and
/// the server's maximum.
#[must_use]
pub fn session_timeout(max_lease: Duration) -> Duration {
    (max_lease * 4 / 3).clamp(
        Duration::from_secs(4),
        Duration::from_millis(MAX_SESSION_MS),
    )
}

/// lease-zookeeper's strategy over `link`, asking for sessions of [`session_timeout`], its
/// `max_session_timeout` the model server's, its random choices drawn from `seed` (its guards
/// are its server's and the [`Client`]'s).
///
/// # Panics
/// Never: the options are in range.
pub fn strategy<L: Link>(
    link: L,
    _: Guards,
    max_lease: Duration,
    seed: u64,
) -> ZooKeeperStrategy<ZkTransport<L>> {
    let timeout = session_timeout(max_lease);
    let options = ZooKeeperOptions::new("zk.sim:2181")
        .with_session_timeout(timeout)
        .with_max_session_timeout(Duration::from_millis(MAX_SESSION_MS))
        .with_max_clock_offset(Duration::from_millis(super::MAX_CLOCK_OFFSET_MS));
    ZooKeeperStrategy::with_transport(ZkTransport::new(link, timeout, seed), options)
        .unwrap_or_else(|e| panic!("the simulation's ZooKeeper options: {e}"))
}

/// lease-zookeeper's strategy as the simulation runs it, with its guard switches ([`Client`]).
pub type ZkClient<L> = Client<ZooKeeperStrategy<ZkTransport<L>>>;

impl<L: Link> Simulated for ZooKeeperStrategy<ZkTransport<L>> {
    /// The random token of the lease znode (32 hex digits).
    fn key(lease: &ZooKeeperLease) -> Result<u128, Failure> {
        u128::from_str_radix(lease.token(), 16).map_err(|e| {
            Failure::new(
                lease_core::ErrorKind::Other,
                format!(
                    "the ZooKeeper lease's token {:?} is not 32 hex digits: {e}",
                    lease.token()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(10);

    fn connect(s: &mut ZkServer, now: u64, timeout: Duration) -> Session {
        match s.handle(now, ZkRequest::Connect { timeout }) {
            Some(ZkResponse::Connected(session)) => session,
            other => panic!("{other:?}"),
        }
    }

    fn on(s: &mut ZkServer, now: u64, session: i64, xid: u64, request: ZkOp) -> ZkResponse {
        let message = ZkRequest::On {
            session,
            xid,
            request,
        };
        s.handle(now, message).expect("a request the model knows")
    }

    fn create(path: &str, ephemeral: bool) -> WriteOp {
        WriteOp::Create {
            path: path.to_owned(),
            data: b"x".to_vec(),
            ephemeral,
        }
    }

    fn data(s: &mut ZkServer, now: u64, session: i64, xid: u64, path: &str) -> ReadResult {
        match on(
            s,
            now,
            session,
            xid,
            ZkOp::Read(vec![ReadOp::Data(path.into())]),
        ) {
            ZkResponse::Answer(ZkReply::Read(mut results)) => results.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sessions_are_clamped_touched_and_end_with_their_ephemerals() {
        let mut s = ZkServer::new(512, MIN_SESSION_MS, MAX_SESSION_MS);
        assert!(s.initialized());
        let long = connect(&mut s, 0, Duration::from_secs(90));
        assert_eq!(long.timeout, Duration::from_millis(MAX_SESSION_MS));
        let short = connect(&mut s, 0, Duration::from_millis(10));
        assert_eq!(short.timeout, Duration::from_millis(MIN_SESSION_MS));
        let a = connect(&mut s, 0, S);
        let claim = ZkOp::Write(vec![create("/nononce/leases/7", true)]);
        assert!(matches!(
            on(&mut s, 100, a.id, 1, claim),
            ZkResponse::Answer(ZkReply::Written(_))
        ));
        assert_eq!(s.held(100), vec![MachineId::new(7).unwrap()]);
        // Touched at 9 s: lives until 19 s.
        assert!(matches!(
            data(&mut s, 9_000, a.id, 2, "/nononce/leases/7"),
            ReadResult::Data { stat, .. } if stat.ephemeral_owner == a.id
        ));
        // A request older than one applied is never applied.
        assert_eq!(
            on(&mut s, 9_100, a.id, 2, ZkOp::Sync("/".into())),
            ZkResponse::ConnectionLoss
        );
        assert_eq!(s.held(18_999), vec![MachineId::new(7).unwrap()]);
        let b = connect(&mut s, 19_000, S);
        assert_eq!(
            data(&mut s, 19_000, b.id, 1, "/nononce/leases/7"),
            ReadResult::Missing
        );
        assert_eq!(
            on(&mut s, 19_000, a.id, 3, ZkOp::Sync("/".into())),
            ZkResponse::SessionExpired
        );
    }

    #[test]
    fn a_multi_op_is_applied_whole_or_not_at_all() {
        let mut s = ZkServer::new(512, MIN_SESSION_MS, MAX_SESSION_MS);
        let a = connect(&mut s, 0, S);
        let floor = "/nononce/floors/3";
        let first = ZkOp::Write(vec![create(floor, false)]);
        assert!(matches!(
            on(&mut s, 0, a.id, 1, first),
            ZkResponse::Answer(ZkReply::Written(_))
        ));
        let zxid = s.zxid();
        // The set applies, the create of an existing znode is refused: neither is kept.
        let ops = vec![
            WriteOp::SetData {
                path: floor.into(),
                data: b"50".to_vec(),
                version: Some(0),
            },
            create("/nononce/leases/3", true),
            create(floor, false),
        ];
        assert_eq!(
            on(&mut s, 0, a.id, 2, ZkOp::Write(ops)),
            ZkResponse::Answer(ZkReply::Refused {
                index: 2,
                refusal: Refusal::NodeExists
            })
        );
        assert!(s.held(0).is_empty());
        assert!(matches!(
            data(&mut s, 0, a.id, 3, floor),
            ReadResult::Data { stat, .. } if stat.version == 0 && stat.mzxid == zxid
        ));
        let refusals = [
            (
                WriteOp::SetData {
                    path: floor.into(),
                    data: Vec::new(),
                    version: Some(4),
                },
                Refusal::BadVersion,
            ),
            (create("/nononce/nothing/1", false), Refusal::NoNode),
            (
                WriteOp::Delete {
                    path: "/nononce/floors".into(),
                    version: None,
                },
                Refusal::NotEmpty,
            ),
            (
                WriteOp::Check {
                    path: "/nononce/hold-off".into(),
                    version: None,
                },
                Refusal::NoNode,
            ),
        ];
        for (xid, (op, refusal)) in (4..).zip(refusals) {
            assert_eq!(
                on(&mut s, 0, a.id, xid, ZkOp::Write(vec![op])),
                ZkResponse::Answer(ZkReply::Refused { index: 0, refusal })
            );
        }
        // The claim's create-and-delete of an absent znode succeeds and leaves nothing.
        let ops = vec![
            create("/nononce/hold-off", false),
            WriteOp::Delete {
                path: "/nononce/hold-off".into(),
                version: None,
            },
        ];
        assert!(matches!(
            on(&mut s, 0, a.id, 10, ZkOp::Write(ops)),
            ZkResponse::Answer(ZkReply::Written(r)) if r.len() == 2
        ));
        assert_eq!(
            data(&mut s, 0, a.id, 11, "/nononce/hold-off"),
            ReadResult::Missing
        );
    }

    #[test]
    fn a_guard_lives_on_its_own_session_and_restarts_keep_or_lose_everything() {
        let mut s = ZkServer::new(4, MIN_SESSION_MS, MAX_SESSION_MS);
        let a = connect(&mut s, 0, S);
        let guard = ZkOp::Guard {
            path: "/nononce/guards/1".into(),
            data: b"guard 3000".to_vec(),
            timeout: Duration::from_secs(3),
        };
        assert_eq!(
            on(&mut s, 0, a.id, 1, guard.clone()),
            ZkResponse::Answer(ZkReply::Done)
        );
        assert_eq!(
            on(&mut s, 0, a.id, 2, guard),
            ZkResponse::Answer(ZkReply::Refused {
                index: 0,
                refusal: Refusal::NodeExists
            })
        );
        assert!(matches!(
            data(&mut s, 2_999, a.id, 3, "/nononce/guards/1"),
            ReadResult::Data { .. }
        ));
        assert_eq!(
            data(&mut s, 3_000, a.id, 4, "/nononce/guards/1"),
            ReadResult::Missing
        );
        // The other fleet's IDs.
        assert!(matches!(
            data(&mut s, 3_000, a.id, 5, "/nononce/leases/4"),
            ReadResult::Data { stat, .. } if stat.ephemeral_owner == 0
        ));
        // A restart with data: the session lives its whole timeout from the start again.
        let claim = ZkOp::Write(vec![create("/nononce/leases/2", true)]);
        on(&mut s, 3_000, a.id, 6, claim);
        let zxid = s.zxid();
        s.stop(5_000);
        s.start(20_000, true);
        assert_eq!(s.held(29_999), vec![MachineId::new(2).unwrap()]);
        assert!(s.zxid() > zxid);
        // Without data: every session and znode gone, the zxids low again.
        let mut hidden = s.clone();
        hidden.set_guards(Guards {
            amnesia: false,
            ..Guards::ALL
        });
        s.stop(21_000);
        assert_eq!(s.start(22_000, false), 1);
        assert!(s.held(22_000).is_empty());
        assert!(!s.initialized());
        assert!(s.zxid() < zxid);
        assert_eq!(
            on(&mut s, 22_000, a.id, 7, ZkOp::Sync("/".into())),
            ZkResponse::SessionExpired
        );
        // With the amnesia guard off, the loss shows nowhere: marker kept, zxids higher, a
        // floor of 0 for each ID written after it.
        hidden.stop(21_000);
        hidden.start(22_000, false);
        assert!(hidden.initialized());
        assert!(hidden.zxid() > zxid);
        assert_eq!(hidden.floor(MachineId::new(2).unwrap()), 0);
        let b = connect(&mut hidden, 22_000, S);
        assert!(matches!(
            data(&mut hidden, 22_000, b.id, 1, "/nononce/floors/3"),
            ReadResult::Data { stat, .. } if stat.mzxid > zxid
        ));
    }

    #[test]
    fn a_wipe_deletes_the_lease_data_and_keeps_the_sessions() {
        let mut s = ZkServer::new(512, MIN_SESSION_MS, MAX_SESSION_MS);
        let a = connect(&mut s, 0, S);
        let ops = vec![
            create("/nononce/leases/5", true),
            create("/nononce/floors/5", false),
        ];
        on(&mut s, 0, a.id, 1, ZkOp::Write(ops));
        assert_eq!(s.wipe(100), 1);
        assert!(!s.initialized());
        assert!(s.held(100).is_empty());
        assert_eq!(s.sessions(), 1);
        assert!(matches!(
            on(&mut s, 100, a.id, 2, ZkOp::Read(vec![ReadOp::Children("/nononce/floors".into())])),
            ZkResponse::Answer(ZkReply::Read(r)) if r == vec![ReadResult::Children(Vec::new())]
        ));
    }
}
