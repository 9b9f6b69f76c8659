//! [`ZooKeeperStrategy`]: the lease protocol on ephemeral znodes, floors and multi-ops.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lease_core::time::{granted_floor, millis};
use lease_core::{
    Acquire, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy, pick_free,
};

use crate::error::{LostReason, ZooKeeperLeaseError};
use crate::options::{ZooKeeperOptions, granted_ttl};
use crate::paths::{self, Layout};
use crate::transport::{
    Answer, Connection, NodeStat, ReadOp, ReadResult, Refusal, Reply, Request, Session, Transport,
    TransportError, WriteOp, WriteResult,
};

/// This holder's lease: the machine ID, the session whose ephemeral znode holds it, the random
/// token in the znode, and what this holder last wrote to the ID's floor znode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ZooKeeperLease {
    pub(crate) id: MachineId,
    pub(crate) session: i64,
    pub(crate) session_timeout: Duration,
    pub(crate) token: String,
    /// The floor znode's version after this holder's last write of it.
    pub(crate) floor_version: i32,
    /// The floor this holder last wrote.
    pub(crate) floor_ms: u64,
}

impl ZooKeeperLease {
    /// The leased machine ID.
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.id
    }

    /// The session that owns the ID's ephemeral znode.
    #[must_use]
    pub const fn session_id(&self) -> i64 {
        self.session
    }

    /// The random token stored as the znode's data (32 hex digits), shown to operators.
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// What this strategy last saw of the ensemble.
#[derive(Debug, Default)]
struct Seen {
    /// The highest transaction that wrote a floor znode, of every answer so far.
    floor_zxid: i64,
    /// The session whose reads were last synced with the leader.
    synced: Option<i64>,
    /// What showed the ensemble went back in time, and when (the transport's clock).
    rewound: Option<(String, Duration)>,
    /// The hold-off znode (its creating transaction) and when this node first saw it.
    hold_off: Option<(i64, Duration)>,
    /// The shortest TTL the lease manager accepts (from `check_terms`).
    min_ttl: Option<Duration>,
    /// Claims whose answer was lost: the ID and token, to delete if they were applied.
    uncertain: Vec<LostClaim>,
}

/// A claim whose answer was lost: what undoing it, if it was applied, needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LostClaim {
    id: MachineId,
    token: String,
    /// The floor before the claim.
    floor_before: u64,
    /// The floor znode's version the claim would leave.
    floor_version: i32,
}

/// Machine-ID leases on ZooKeeper.
///
/// Each held ID is an ephemeral znode `<root>/leases/<id>` of the holder's session, holding a
/// random token; its timestamp floor is the persistent znode `<root>/floors/<id>`. Acquire reads
/// the IDs and floors in one multi-read and claims a free ID (randomly chosen, preferring one
/// whose floor is below the acquirer's clock) in one multi-op that creates the ephemeral znode and
/// writes the floor at the version read; renew writes the floor at the version this holder last
/// wrote (any other holder's claim writes it too), proving the session alive; release sets the
/// floor and replaces the ephemeral znode with a persistent guard znode in one multi-op. See the
/// crate docs.
///
/// The session opens on first use: an unreachable ensemble makes the first acquire answer
/// `Retry`, not the constructor fail. Must be used inside a tokio runtime.
pub struct ZooKeeperStrategy<T = Connection> {
    transport: T,
    options: ZooKeeperOptions,
    layout: Layout,
    seen: Mutex<Seen>,
}

impl<T> std::fmt::Debug for ZooKeeperStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperStrategy")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ZooKeeperStrategy {
    /// A strategy on the ensemble `options` name; connects on first use.
    ///
    /// # Errors
    /// [`ZooKeeperLeaseError::InvalidOptions`] (kind `Misconfigured`) when `options` are out of
    /// range.
    pub fn new(options: ZooKeeperOptions) -> Result<Self, ZooKeeperLeaseError> {
        options.validate()?;
        Ok(Self::on(Connection::new(options.clone()), options))
    }

    /// A strategy on a store URL, `zk://host:port[,host:port...][/root]` (see
    /// [`ZooKeeperOptions::from_url`]).
    ///
    /// # Errors
    /// [`ZooKeeperLeaseError::InvalidUrl`] (kind `Misconfigured`).
    pub fn from_url(url: &str) -> Result<Self, ZooKeeperLeaseError> {
        Self::new(ZooKeeperOptions::from_url(url)?)
    }
}

/// How many times renew and release read the lease again after their write met a floor version
/// they did not expect (their own earlier write, whose answer was lost).
const REREADS: u32 = 3;

impl<T: Transport> ZooKeeperStrategy<T> {
    /// A strategy whose requests go over `transport`; `options` supply the root, the attempts
    /// and the session timeouts (the connection settings are the transport's business).
    ///
    /// # Errors
    /// [`ZooKeeperLeaseError::InvalidOptions`] when `options` are out of range.
    pub fn with_transport(
        transport: T,
        options: ZooKeeperOptions,
    ) -> Result<Self, ZooKeeperLeaseError> {
        options.validate()?;
        Ok(Self::on(transport, options))
    }

    fn on(transport: T, options: ZooKeeperOptions) -> Self {
        Self {
            layout: Layout::new(options.root()),
            transport,
            options,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The settings.
    pub const fn options(&self) -> &ZooKeeperOptions {
        &self.options
    }

    /// The transport.
    pub const fn transport(&self) -> &T {
        &self.transport
    }

    pub(crate) const fn layout(&self) -> &Layout {
        &self.layout
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One round trip of `operation`. An answer on a session whose timeout exceeds
    /// `max_session_timeout` is refused: the amnesia hold-off would not outlast its leases.
    pub(crate) async fn exchange(
        &self,
        operation: &'static str,
        request: Request,
    ) -> Result<Answer, ZooKeeperLeaseError> {
        let answer = self
            .transport
            .exchange(request)
            .await
            .map_err(|e| match e {
                TransportError::ConnectTimeout(timeout) => ZooKeeperLeaseError::Timeout {
                    operation: "connect",
                    timeout,
                },
                TransportError::Connect(source) => ZooKeeperLeaseError::Request {
                    operation: "connect",
                    source,
                },
                TransportError::Timeout(timeout) => {
                    ZooKeeperLeaseError::Timeout { operation, timeout }
                }
                TransportError::Failed(source) => {
                    ZooKeeperLeaseError::Request { operation, source }
                }
            })?;
        let granted = answer.session.timeout;
        if granted > self.options.max_session_timeout() {
            return Err(ZooKeeperLeaseError::SessionTimeout {
                granted,
                ttl: granted_ttl(granted),
                why: format!(
                    "above max_session_timeout ({:?}), which the amnesia hold-off lasts: ask for a shorter session (session_timeout_s in the store url) or raise max_session_timeout_s on every node",
                    self.options.max_session_timeout()
                ),
            });
        }
        Ok(answer)
    }

    /// A read of `ops`, its results in order.
    pub(crate) async fn read(
        &self,
        operation: &'static str,
        ops: Vec<ReadOp>,
    ) -> Result<(Session, Vec<ReadResult>), ZooKeeperLeaseError> {
        let expected = ops.len();
        let answer = self.exchange(operation, Request::Read(ops)).await?;
        match answer.reply {
            Reply::Read(results) if results.len() == expected => Ok((answer.session, results)),
            other => Err(ZooKeeperLeaseError::unexpected(
                operation,
                format!("{other:?}"),
            )),
        }
    }

    /// A multi-op: `Ok` with each operation's result when it was applied, `Err` with the index
    /// and cause of the refusal when it was not.
    pub(crate) async fn write(
        &self,
        operation: &'static str,
        ops: Vec<WriteOp>,
    ) -> Result<(Session, Result<Vec<WriteResult>, (usize, Refusal)>), ZooKeeperLeaseError> {
        let expected = ops.len();
        let answer = self.exchange(operation, Request::Write(ops)).await?;
        match answer.reply {
            Reply::Written(results) if results.len() == expected => {
                for result in &results {
                    if let WriteResult::Set(stat) = result {
                        self.note_floor_write(stat.mzxid);
                    }
                }
                Ok((answer.session, Ok(results)))
            }
            Reply::Refused { index, refusal } if index < expected => {
                Ok((answer.session, Err((index, refusal))))
            }
            other => Err(ZooKeeperLeaseError::unexpected(
                operation,
                format!("{other:?}"),
            )),
        }
    }

    /// Records the transaction of a floor write this strategy saw applied.
    fn note_floor_write(&self, zxid: i64) {
        let mut seen = self.seen();
        seen.floor_zxid = seen.floor_zxid.max(zxid);
    }

    /// One read of the root: the held IDs, the marker, the hold-off and every floor, from one
    /// state of a server that has caught up with everything this strategy saw. The first read
    /// on a session is preceded by a `sync`: a new session may land on a follower behind the
    /// leader, whose older floors would look like an ensemble gone back in time.
    async fn snapshot(&self) -> Result<Snapshot, ZooKeeperLeaseError> {
        let layout = &self.layout;
        let mut ops = vec![
            ReadOp::Children(layout.leases()),
            ReadOp::Children(layout.guards()),
            ReadOp::Children(layout.floors()),
            ReadOp::Data(layout.marker()),
            ReadOp::Data(layout.hold_off()),
        ];
        ops.extend(all_ids().map(|id| ReadOp::Data(layout.floor(id))));
        // Before the first read, sync at once (the session is new); later, only when the read
        // came on another session than the last sync's.
        if self.seen().synced.is_none() {
            self.sync().await?;
        }
        let (mut session, mut results) = self.read("multi-read (root)", ops.clone()).await?;
        if self.seen().synced != Some(session.id) {
            self.sync().await?;
            (session, results) = self.read("multi-read (root)", ops).await?;
        }
        let mut results = results.into_iter();
        let mut snapshot = Snapshot {
            session,
            ..Snapshot::default()
        };
        let mut folder = |ids: &mut HashSet<MachineId>| match results.next() {
            Some(ReadResult::Children(children)) => {
                ids.extend(children.iter().filter_map(|c| paths::child_id(c)));
                Ok(true)
            }
            Some(ReadResult::Missing) => Ok(false),
            other => Err(ZooKeeperLeaseError::unexpected(
                "multi-read (root)",
                format!("{other:?}"),
            )),
        };
        snapshot.leases_dir = folder(&mut snapshot.held)?;
        snapshot.guards_dir = folder(&mut snapshot.guarded)?;
        snapshot.floors_dir = folder(&mut HashSet::new())?;
        snapshot.marker = matches!(results.next(), Some(ReadResult::Data { .. }));
        if let Some(ReadResult::Data { data, stat }) = results.next() {
            let length = paths::parse_length("hold-off", &data)
                .map_or(self.options.amnesia_hold_off(), Duration::from_millis);
            snapshot.hold_off = Some((stat, length));
        }
        let mut highest = 0;
        for (id, result) in all_ids().zip(results) {
            let floor = match result {
                ReadResult::Data { data, stat } => {
                    highest = highest.max(stat.mzxid);
                    match paths::parse_floor(&data) {
                        Some(floor) => Some((floor, stat.version)),
                        None => {
                            if !snapshot.taken(id) {
                                snapshot.unreadable.push((id, lossy(&data)));
                            }
                            continue;
                        }
                    }
                }
                _ => None,
            };
            if !snapshot.taken(id) {
                snapshot
                    .free
                    .push((id, floor.map_or(0, |(f, _)| f), floor.map(|(_, v)| v)));
            }
        }
        self.observe_floors(highest);
        Ok(snapshot)
    }

    /// A request answered `Done` (a sync, a path made), with the session it rode.
    async fn done(
        &self,
        operation: &'static str,
        request: Request,
    ) -> Result<Session, ZooKeeperLeaseError> {
        let answer = self.exchange(operation, request).await?;
        if answer.reply != Reply::Done {
            return Err(ZooKeeperLeaseError::unexpected(
                operation,
                format!("{:?}", answer.reply),
            ));
        }
        Ok(answer.session)
    }

    /// The root znode and its ancestors, made where missing.
    pub(crate) async fn make_root(&self) -> Result<(), ZooKeeperLeaseError> {
        let request = Request::MakePath(self.layout.root().to_owned());
        self.done("create (root)", request).await.map(drop)
    }

    /// A `sync` of the root, recorded as the session's.
    async fn sync(&self) -> Result<(), ZooKeeperLeaseError> {
        let request = Request::Sync(self.layout.root().to_owned());
        let session = self.done("sync", request).await?;
        self.seen().synced = Some(session.id);
        Ok(())
    }

    /// Compares the highest floor transaction of a read with the highest this strategy saw:
    /// floors are never deleted by the protocol and each write of one has a higher transaction,
    /// so a lower one means the ensemble lost writes (a restore, a data directory lost on every
    /// member) or the root was deleted.
    fn observe_floors(&self, highest: i64) {
        let now = self.transport.now();
        let mut seen = self.seen();
        if highest < seen.floor_zxid {
            seen.rewound = Some((
                format!(
                    "the newest floor znode was written at transaction {highest:#x}, after this node saw one written at {:#x}",
                    seen.floor_zxid
                ),
                now,
            ));
            // Compare from now on against the ensemble as it is.
            seen.floor_zxid = highest;
        }
    }

    /// Fails while acquisition holds off after the ensemble went back in time.
    fn check_rewound(&self) -> Result<(), ZooKeeperLeaseError> {
        let now = self.transport.now();
        let hold = self.options.amnesia_hold_off();
        let mut seen = self.seen();
        if let Some((what, at)) = &seen.rewound {
            let elapsed = now.saturating_sub(*at);
            if elapsed < hold {
                return Err(ZooKeeperLeaseError::StoreRewound {
                    what: what.clone(),
                    remaining: hold - elapsed,
                });
            }
            seen.rewound = None;
        }
        Ok(())
    }

    /// The answer to an acquire while the hold-off znode exists: its time left on this node's
    /// clock since this node first saw it, or `None` once it has passed and this node deleted the
    /// znode (read again).
    async fn held_off(
        &self,
        stat: NodeStat,
        length: Duration,
    ) -> Result<Option<ZooKeeperLeaseError>, ZooKeeperLeaseError> {
        let now = self.transport.now();
        let first_seen = {
            let mut seen = self.seen();
            match seen.hold_off {
                Some((czxid, at)) if czxid == stat.czxid => at,
                _ => {
                    seen.hold_off = Some((stat.czxid, now));
                    now
                }
            }
        };
        let elapsed = now.saturating_sub(first_seen);
        if elapsed < length {
            return Ok(Some(ZooKeeperLeaseError::NotInitialized {
                root: self.layout.root().to_owned(),
                remaining: length - elapsed,
            }));
        }
        // Over on this node's clock since it first saw the znode, which was after the root
        // lost its marker: every lease from before has ended.
        let delete = vec![WriteOp::Delete {
            path: self.layout.hold_off(),
            version: Some(stat.version),
        }];
        // Refused: another node ended it first (or began a new one): the next read tells.
        let (_, _ended) = self.write("multi (end hold-off)", delete).await?;
        self.seen().hold_off = None;
        Ok(None)
    }

    /// Begins the hold-off after a read found no initialization marker: in one multi-op, the
    /// missing folders, the marker and the hold-off znode, so that the root is usable once the
    /// hold-off has passed. Its answer to the acquire, or `None` when another node began a
    /// hold-off or initialized the root since the read (read again).
    async fn begin_hold_off(
        &self,
        snapshot: &Snapshot,
    ) -> Result<Option<ZooKeeperLeaseError>, ZooKeeperLeaseError> {
        let layout = &self.layout;
        self.make_root().await?;
        let length = self.options.amnesia_hold_off();
        let persistent = |path, data: &[u8]| WriteOp::Create {
            path,
            data: data.to_vec(),
            ephemeral: false,
        };
        let mut ops = Vec::new();
        if !snapshot.leases_dir {
            ops.push(persistent(layout.leases(), b""));
        }
        if !snapshot.guards_dir {
            ops.push(persistent(layout.guards(), b""));
        }
        if !snapshot.floors_dir {
            ops.push(persistent(layout.floors(), b""));
        }
        if !snapshot.marker {
            ops.push(persistent(layout.marker(), paths::MARKER_DATA));
        }
        ops.push(persistent(
            layout.hold_off(),
            &paths::encode_hold_off(millis(length)),
        ));
        let (_, result) = self.write("multi (begin hold-off)", ops).await?;
        match result {
            Ok(_) => {
                self.seen().hold_off = None;
                Ok(Some(ZooKeeperLeaseError::NotInitialized {
                    root: layout.root().to_owned(),
                    remaining: length,
                }))
            }
            Err(_) => Ok(None),
        }
    }

    /// A random number below `n`.
    fn random_below(&self, n: usize) -> usize {
        let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        usize::try_from(self.transport.random() % n).unwrap_or(0)
    }

    /// A fresh random token: 32 hex digits.
    fn new_token(&self) -> String {
        let token =
            (u128::from(self.transport.random()) << 64) | u128::from(self.transport.random());
        format!("{token:032x}")
    }

    /// Undoes earlier claims whose answers were lost, where they were applied and are still
    /// this session's: nobody was granted them, and they would block their IDs for as long as
    /// the session lives. The lease znode is deleted and the floor set back to what it was, in
    /// one multi-op: nothing was issued under the claim. Its requests ride the session the claims
    /// rode, after them (ZooKeeper answers a session's requests in order), so a claim still on
    /// its way is seen. Until every such claim is settled, no new one is made: a node would hold
    /// two IDs.
    async fn clean_uncertain(&self) -> Result<(), ZooKeeperLeaseError> {
        loop {
            let Some(lost) = self.seen().uncertain.last().cloned() else {
                return Ok(());
            };
            let path = self.layout.lease(lost.id);
            let floor = self.layout.floor(lost.id);
            let ops = vec![ReadOp::Data(path.clone()), ReadOp::Data(floor.clone())];
            let (session, results) = self.read("multi-read (lost claim)", ops).await?;
            if let Some(ReadResult::Data { data, stat }) = results.first()
                && stat.ephemeral_owner == session.id
                && *data == lost.token.as_bytes()
            {
                let mut undo = vec![WriteOp::Delete {
                    path,
                    version: Some(stat.version),
                }];
                if let Some(ReadResult::Data { stat, .. }) = results.get(1)
                    && stat.version == lost.floor_version
                {
                    undo.push(WriteOp::SetData {
                        path: floor,
                        data: paths::encode_floor(lost.floor_before),
                        version: Some(stat.version),
                    });
                }
                // Refused: the znode went with its session meanwhile. Settled either way.
                let (_, _undone) = self.write("multi (undo lost claim)", undo).await?;
            }
            // Settled: never applied, undone now, or on a session that ended (and the znode
            // with it).
            self.seen().uncertain.retain(|claim| *claim != lost);
        }
    }

    /// Refuses a session whose leases would be shorter than the manager accepts.
    fn check_session(&self, session: Session) -> Result<(), ZooKeeperLeaseError> {
        let ttl = granted_ttl(session.timeout);
        if let Some(min_ttl) = self.seen().min_ttl
            && ttl < min_ttl
        {
            return Err(ZooKeeperLeaseError::SessionTimeout {
                granted: session.timeout,
                ttl,
                why: format!(
                    "below the lease manager's minimum of {min_ttl:?}: raise maxSessionTimeout on the ZooKeeper servers (20 ticks by default) and session_timeout_s in the store url, or lower the minimum lease (LeaseConfig::with_min_ttl)"
                ),
            });
        }
        Ok(())
    }

    async fn claim_loop(
        &self,
        request: Acquire,
    ) -> Result<Grant<ZooKeeperLease>, ZooKeeperLeaseError> {
        for _ in 0..self.options.acquire_attempts() {
            let snapshot = self.snapshot().await?;
            self.check_session(snapshot.session)?;
            self.check_rewound()?;
            // The root may have lost znodes of IDs that running nodes still use: no claim
            // until every such lease has ended (see the crate docs, "Amnesia").
            if let Some((stat, length)) = snapshot.hold_off {
                match self.held_off(stat, length).await? {
                    Some(held_off) => return Err(held_off),
                    None => continue,
                }
            }
            if !snapshot.marker || !snapshot.leases_dir || !snapshot.guards_dir {
                match self.begin_hold_off(&snapshot).await? {
                    Some(held_off) => return Err(held_off),
                    None => continue,
                }
            }
            // A random free ID, not the lowest: nodes starting together spread out.
            let Some((id, stored, floor_version)) =
                pick_free(&snapshot.free, request.now_ms, &mut |n| {
                    self.random_below(n)
                })
            else {
                let (id, value) = snapshot.unreadable.into_iter().next().ok_or_else(|| {
                    ZooKeeperLeaseError::Exhausted {
                        root: self.layout.root().to_owned(),
                        guarded: snapshot.guarded.len(),
                    }
                })?;
                return Err(ZooKeeperLeaseError::UnreadableFloor {
                    path: self.layout.floor(id),
                    id,
                    value,
                });
            };
            // Never more than asked: a session's leases may be shorter than it lives.
            let ttl = granted_ttl(snapshot.session.timeout).min(request.requested);
            let recorded = granted_floor(request.floor_ms, request.requested, ttl);
            let floor_ms = stored.max(recorded);
            let token = self.new_token();
            let lease_path = self.layout.lease(id);
            let hold_off = self.layout.hold_off();
            let mut ops = vec![
                // Decided with the claim: the root is initialized and not held off (a create
                // and a delete of the hold-off znode succeed only where there is none).
                WriteOp::Check {
                    path: self.layout.marker(),
                    version: None,
                },
                WriteOp::Create {
                    path: hold_off.clone(),
                    data: Vec::new(),
                    ephemeral: false,
                },
                WriteOp::Delete {
                    path: hold_off,
                    version: None,
                },
            ];
            // The floor as read, raised: any claim of the ID since the read wrote it.
            ops.push(match floor_version {
                Some(version) => WriteOp::SetData {
                    path: self.layout.floor(id),
                    data: paths::encode_floor(floor_ms),
                    version: Some(version),
                },
                None => WriteOp::Create {
                    path: self.layout.floor(id),
                    data: paths::encode_floor(floor_ms),
                    ephemeral: false,
                },
            });
            // Not in its release guard: the guard znode, ephemeral on a session of the guard's
            // length, is absent (created and deleted in the same multi-op).
            let guard = self.layout.guard(id);
            ops.push(WriteOp::Create {
                path: guard.clone(),
                data: Vec::new(),
                ephemeral: false,
            });
            ops.push(WriteOp::Delete {
                path: guard,
                version: None,
            });
            ops.push(WriteOp::Create {
                path: lease_path,
                data: token.clone().into_bytes(),
                ephemeral: true,
            });
            let floor_at = 3;
            // Recorded before it is sent, and settled only by an answer: a claim whose answer
            // is lost (or whose acquire is dropped, by the lease manager's call timeout, before
            // the answer) may have been applied, an ephemeral znode nobody was granted.
            let lost = LostClaim {
                id,
                token: token.clone(),
                floor_before: stored,
                floor_version: floor_version.map_or(0, |v| v + 1),
            };
            self.seen().uncertain.push(lost.clone());
            let (session, result) = self.write("multi (claim)", ops).await?;
            self.seen().uncertain.retain(|claim| *claim != lost);
            let Ok(results) = result else {
                // Another node claimed it (or its floor moved, or the marker went, or a hold-off
                // began) since the read: read again.
                continue;
            };
            let floor_version = match results.get(floor_at) {
                Some(WriteResult::Set(stat)) => stat.version,
                _ => 0,
            };
            let lease = ZooKeeperLease {
                id,
                session: session.id,
                session_timeout: session.timeout.min(snapshot.session.timeout),
                token,
                floor_version,
                floor_ms,
            };
            let ttl = granted_ttl(lease.session_timeout).min(request.requested);
            return Ok(Grant::new(id, lease, ttl).with_floor(stored));
        }
        Err(ZooKeeperLeaseError::Conflict {
            attempts: self.options.acquire_attempts(),
        })
    }

    /// What the ID's znodes say of `lease` after a write that expected another floor version:
    /// `Ok` with the floor's version and value when the lease znode is still this holder's,
    /// the reason when it is not.
    async fn recheck(
        &self,
        lease: &ZooKeeperLease,
    ) -> Result<Result<(Option<i32>, u64), LostReason>, ZooKeeperLeaseError> {
        let ops = vec![
            ReadOp::Data(self.layout.lease(lease.id)),
            ReadOp::Data(self.layout.floor(lease.id)),
        ];
        let (session, results) = self.read("multi-read (lease)", ops).await?;
        let reason = match results.first() {
            _ if session.id != lease.session => LostReason::SessionEnded {
                session: lease.session,
            },
            Some(ReadResult::Data { data, stat })
                if stat.ephemeral_owner == lease.session && *data == lease.token.as_bytes() =>
            {
                return Ok(Ok(match results.get(1) {
                    Some(ReadResult::Data { data, stat }) => {
                        let floor = paths::parse_floor(data).ok_or_else(|| {
                            ZooKeeperLeaseError::UnreadableFloor {
                                path: self.layout.floor(lease.id),
                                id: lease.id,
                                value: lossy(data),
                            }
                        })?;
                        (Some(stat.version), floor)
                    }
                    _ => (None, 0),
                }));
            }
            Some(ReadResult::Data { stat, .. }) => LostReason::TakenOver {
                owner: stat.ephemeral_owner,
            },
            _ => LostReason::NodeGone,
        };
        Ok(Err(reason))
    }

    /// Blocks `id` for `guard`: its guard znode on a session of that timeout, left to expire. A
    /// guard znode that exists already (a retried release) blocks it as well.
    async fn guard(&self, id: MachineId, guard: Duration) -> Result<(), ZooKeeperLeaseError> {
        const OPERATION: &str = "create (release guard)";
        let request = Request::Guard {
            path: self.layout.guard(id),
            data: paths::encode_guard(millis(guard)),
            timeout: guard,
        };
        let answer = self.exchange(OPERATION, request).await?;
        match answer.reply {
            Reply::Done
            | Reply::Refused {
                refusal: Refusal::NodeExists,
                ..
            } => Ok(()),
            other => Err(ZooKeeperLeaseError::unexpected(
                OPERATION,
                format!("{other:?}"),
            )),
        }
    }

    /// Raises the floor of `id` to at least `floor_ms`, whoever holds it: the floor of a lease
    /// that is no longer this holder's. Best effort, a few tries.
    async fn raise_floor(&self, id: MachineId, floor_ms: u64) -> Result<(), ZooKeeperLeaseError> {
        let path = self.layout.floor(id);
        for _ in 0..REREADS {
            let (_, results) = self
                .read("get (floor)", vec![ReadOp::Data(path.clone())])
                .await?;
            let op = match results.first() {
                Some(ReadResult::Data { data, stat }) => match paths::parse_floor(data) {
                    Some(stored) if stored >= floor_ms => return Ok(()),
                    _ => WriteOp::SetData {
                        path: path.clone(),
                        data: paths::encode_floor(floor_ms),
                        version: Some(stat.version),
                    },
                },
                // The floors folder may be gone with the root: nothing to raise.
                _ => WriteOp::Create {
                    path: path.clone(),
                    data: paths::encode_floor(floor_ms),
                    ephemeral: false,
                },
            };
            match self.write("multi (raise floor)", vec![op]).await? {
                (_, Ok(_)) => return Ok(()),
                (_, Err((_, Refusal::NoNode))) => return Ok(()),
                (_, Err(_)) => {}
            }
        }
        Ok(())
    }
}

/// What one read of the root showed.
#[derive(Debug, Default)]
struct Snapshot {
    session: Session,
    /// Whether `<root>/leases` exists.
    leases_dir: bool,
    /// Whether some floor znode exists (so `<root>/floors` does).
    floors_dir: bool,
    /// Whether the initialization marker exists.
    marker: bool,
    /// The hold-off znode's stat and length, when it exists.
    hold_off: Option<(NodeStat, Duration)>,
    /// The IDs with a znode under `<root>/leases` (held).
    held: HashSet<MachineId>,
    /// The IDs with a znode under `<root>/guards` (in their release guard).
    guarded: HashSet<MachineId>,
    /// Whether `<root>/guards` exists.
    guards_dir: bool,
    /// Free IDs with their stored floor (0 when none) and the floor znode's version (`None`:
    /// no floor znode).
    free: Vec<(MachineId, u64, Option<i32>)>,
    /// Free IDs whose floor znode holds no readable floor, with what it holds.
    unreadable: Vec<(MachineId, String)>,
}

impl Snapshot {
    /// Whether `id` is held or in its release guard.
    fn taken(&self, id: MachineId) -> bool {
        self.held.contains(&id) || self.guarded.contains(&id)
    }
}

/// Every machine ID, in order.
pub(crate) fn all_ids() -> impl Iterator<Item = MachineId> {
    (0..MachineId::COUNT).filter_map(|n| MachineId::new(n).ok())
}

/// `bytes` as text, invalid UTF-8 replaced.
pub(crate) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl<T: Transport> Strategy for ZooKeeperStrategy<T> {
    type Lease = ZooKeeperLease;
    type Error = ZooKeeperLeaseError;

    /// One multi-read of the root (the held IDs, the marker, the hold-off, every floor), then
    /// the claim multi-op on a random free ID, preferring one whose floor is below `now_ms`: it
    /// checks the marker and the hold-off's absence, writes the floor at the version read
    /// (raised to `floor_ms`, less what the session's shorter lease cut off) and creates the
    /// ephemeral znode. The first read on a session is synced with the leader first.
    async fn acquire(
        &self,
        request: Acquire,
    ) -> Result<Grant<ZooKeeperLease>, ZooKeeperLeaseError> {
        self.clean_uncertain().await?;
        self.claim_loop(request).await
    }

    /// One multi-op: the ephemeral znode exists, and the floor znode is at the version this
    /// holder last wrote (every other claim of the ID writes it), raised to `floor_ms`. It rides
    /// the lease's session, so its answer proves the session alive. A version other than
    /// expected reads the znodes again: the holder's own earlier renewal whose answer was lost
    /// (the lease znode still this session's, with this token) is retried at the new version.
    async fn renew(
        &self,
        lease: &ZooKeeperLease,
        request: Renew,
    ) -> Result<Renewal<ZooKeeperLease>, ZooKeeperLeaseError> {
        let ttl = granted_ttl(lease.session_timeout).min(request.requested);
        let recorded = granted_floor(request.floor_ms, request.requested, ttl);
        let mut floor_version = Some(lease.floor_version);
        let mut floor_ms = lease.floor_ms.max(recorded);
        let lost = |reason| ZooKeeperLeaseError::Lost {
            id: lease.id,
            reason,
        };
        for _ in 0..=REREADS {
            let floor_op = match floor_version {
                Some(version) => WriteOp::SetData {
                    path: self.layout.floor(lease.id),
                    data: paths::encode_floor(floor_ms),
                    version: Some(version),
                },
                None => WriteOp::Create {
                    path: self.layout.floor(lease.id),
                    data: paths::encode_floor(floor_ms),
                    ephemeral: false,
                },
            };
            let ops = vec![
                WriteOp::Check {
                    path: self.layout.lease(lease.id),
                    version: None,
                },
                floor_op,
            ];
            let (session, result) = match self.write("multi (renew)", ops).await {
                Err(ZooKeeperLeaseError::Request {
                    source: zookeeper_client::Error::SessionExpired,
                    ..
                }) => {
                    return Err(lost(LostReason::SessionEnded {
                        session: lease.session,
                    }));
                }
                other => other?,
            };
            if session.id != lease.session {
                // Its session ended, and the ephemeral znode with it.
                return Err(lost(LostReason::SessionEnded {
                    session: lease.session,
                }));
            }
            match result {
                Ok(results) => {
                    let version = match results.get(1) {
                        Some(WriteResult::Set(stat)) => stat.version,
                        _ => 0,
                    };
                    let renewed = ZooKeeperLease {
                        floor_version: version,
                        floor_ms,
                        ..lease.clone()
                    };
                    return Ok(Renewal::new(renewed, ttl));
                }
                Err((0, _)) => return Err(lost(LostReason::NodeGone)),
                Err(_) => match self.recheck(lease).await? {
                    Ok((version, stored)) => {
                        floor_version = version;
                        floor_ms = floor_ms.max(stored);
                    }
                    Err(reason) => return Err(lost(reason)),
                },
            }
        }
        Err(ZooKeeperLeaseError::unexpected(
            "multi (renew)",
            "the floor znode's version kept changing while the lease znode stayed this holder's",
        ))
    }

    /// One read of the lease and floor znodes; when the lease is still ours, the guard (the
    /// ephemeral znode `<root>/guards/<id>` on a session of its own whose timeout is the guard,
    /// left to expire, which keeps the ID from being claimed until then), then one multi-op: the
    /// lease znode exists and the floor is at the version read; the floor is set to `floor_ms`
    /// and the lease znode deleted. When the lease is no longer ours, only the floor is raised.
    async fn release(
        &self,
        lease: &ZooKeeperLease,
        request: Release,
    ) -> Result<(), ZooKeeperLeaseError> {
        let mut guarded = request.guard.is_zero();
        for _ in 0..=REREADS {
            let floor_version = match self.recheck(lease).await {
                Ok(Ok((version, _))) => version,
                Ok(Err(_))
                | Err(ZooKeeperLeaseError::Request {
                    source: zookeeper_client::Error::SessionExpired,
                    ..
                }) => break,
                Err(e) => return Err(e),
            };
            if !guarded {
                self.guard(lease.id, request.guard).await?;
                guarded = true;
            }
            let floor_op = match floor_version {
                Some(version) => WriteOp::SetData {
                    path: self.layout.floor(lease.id),
                    data: paths::encode_floor(request.floor_ms),
                    version: Some(version),
                },
                None => WriteOp::Create {
                    path: self.layout.floor(lease.id),
                    data: paths::encode_floor(request.floor_ms),
                    ephemeral: false,
                },
            };
            let lease_path = self.layout.lease(lease.id);
            let ops = vec![
                WriteOp::Check {
                    path: lease_path.clone(),
                    version: None,
                },
                floor_op,
                WriteOp::Delete {
                    path: lease_path,
                    version: None,
                },
            ];
            let (session, result) = match self.write("multi (release)", ops).await {
                Err(ZooKeeperLeaseError::Request {
                    source: zookeeper_client::Error::SessionExpired,
                    ..
                }) => break,
                other => other?,
            };
            if session.id != lease.session {
                break;
            }
            match result {
                Ok(_) => return Ok(()),
                Err((0, _)) => break,
                // The floor moved since the read: read again.
                Err(_) => {}
            }
        }
        // Not ours any more (expired, released by an operator, taken over): only raise the
        // floor, so what was issued under the lease is known; the lease manager releases a
        // lost lease too.
        self.raise_floor(lease.id, request.floor_ms).await
    }

    /// Refuses terms whose leases, three quarters of the session timeout asked for, are below
    /// the manager's minimum TTL; remembers the minimum to check the session the ensemble
    /// grants.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), ZooKeeperLeaseError> {
        let ttl = granted_ttl(self.options.session_timeout());
        if ttl < terms.min_ttl {
            return Err(ZooKeeperLeaseError::InvalidOptions(format!(
                "leases would last {ttl:?} (three quarters of the session timeout {:?}), below the lease manager's min_ttl ({:?}): raise the session timeout (session_timeout_s in the store url, and maxSessionTimeout on the servers) or lower LeaseConfig::with_min_ttl",
                self.options.session_timeout(),
                terms.min_ttl
            )));
        }
        self.seen().min_ttl = Some(terms.min_ttl);
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile::new("zookeeper").recording_floor()
    }
}
