//! [`EtcdStrategy`]: the lease protocol on etcd keys, leases and transactions.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use etcd_client::Client;
use lease_core::{
    Acquire, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};

use crate::error::{EtcdLeaseError, LostReason};
use crate::keys::{self, Entry};
use crate::options::EtcdOptions;
use crate::transport::{
    Compare, CompareOp, Connection, Header, OpResponse, Reply, Request, Target, Transport,
    TransportError, Txn, TxnOp,
};

/// This holder's lease: the machine ID, the etcd lease its key is attached to, the key's create
/// revision and the random token in the key's value.
///
/// The etcd lease ID and the create revision together identify the holding: a key taken over by
/// another holder has another lease, and a key deleted and created again has another create
/// revision, even when it is attached to the same etcd lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EtcdLease {
    pub(crate) id: MachineId,
    pub(crate) lease: i64,
    pub(crate) revision: i64,
    pub(crate) token: String,
}

impl EtcdLease {
    /// The leased machine ID.
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.id
    }

    /// The etcd lease the ID's key is attached to.
    #[must_use]
    pub const fn etcd_lease_id(&self) -> i64 {
        self.lease
    }

    /// The create revision of the ID's key.
    #[must_use]
    pub const fn revision(&self) -> i64 {
        self.revision
    }

    /// The random token stored as the key's value (32 hex digits), shown to operators.
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// What this strategy last saw of the store, for the amnesia check.
#[derive(Debug, Default)]
struct Seen {
    cluster_id: Option<u64>,
    /// The highest revision of an answer to a linearizable request.
    revision: i64,
    /// What showed the store went back in time, and when (the transport's clock).
    rewound: Option<(String, Duration)>,
}

/// Machine-ID leases on etcd v3.
///
/// Each held ID is one key, `<prefix><id>`, attached to an etcd lease of the granted TTL; its
/// value is a random token. Each ID's timestamp floor is a key without a lease,
/// `<prefix>floor/<id>`, written in the same transactions as the lease key. Acquire grants an
/// etcd lease and claims a free ID (randomly chosen, preferring one whose floor is below the
/// acquirer's clock) in one transaction that succeeds only if the key does not exist and the
/// floor is as read, raising the floor; renew sends one keep-alive and proves in a transaction
/// that the key is still attached to this holder's etcd lease, raising the floor; release moves
/// the key onto a new etcd lease of the guard's length, sets the floor, and revokes the
/// holder's etcd lease. See the crate docs.
///
/// The client connects on first use: an unreachable cluster makes the first acquire answer
/// `Retry`, not the constructor fail. Must be used inside a tokio runtime.
///
/// The protocol runs over a [`Transport`]: by default a [`Connection`] to the cluster; any
/// other transport ([`with_transport`](Self::with_transport)) carries the same requests.
pub struct EtcdStrategy<T = Connection> {
    transport: T,
    options: EtcdOptions,
    seen: Mutex<Seen>,
}

impl<T> std::fmt::Debug for EtcdStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStrategy")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl EtcdStrategy {
    /// A strategy on the cluster `options` name; connects on first use.
    ///
    /// # Errors
    /// [`EtcdLeaseError::InvalidOptions`] (kind `Misconfigured`) when `options` are out of range.
    pub fn new(options: EtcdOptions) -> Result<Self, EtcdLeaseError> {
        options.validate()?;
        Ok(Self::on(Connection::new(options.clone()), options))
    }

    /// A strategy on a store URL, `etcd://host:port[,host:port...][/prefix/]` (see
    /// [`EtcdOptions::from_url`]), with the other options at their defaults.
    ///
    /// # Errors
    /// [`EtcdLeaseError::InvalidUrl`] (kind `Misconfigured`).
    pub fn from_url(url: &str) -> Result<Self, EtcdLeaseError> {
        Self::new(EtcdOptions::from_url(url)?)
    }

    /// A strategy on a client you connected yourself; `options` supply the prefix, the attempts,
    /// the longest lease and the request timeout (their endpoints, user and TLS are not used).
    ///
    /// # Errors
    /// [`EtcdLeaseError::InvalidOptions`] when `options` are out of range.
    pub fn with_client(client: Client, options: EtcdOptions) -> Result<Self, EtcdLeaseError> {
        options.validate()?;
        let connection = Connection::with_client(client, options.clone());
        Ok(Self::on(connection, options))
    }

    /// The client, connected on first use.
    pub(crate) async fn client(&self) -> Result<Client, EtcdLeaseError> {
        self.transport
            .client()
            .await
            .map_err(|e| e.into_error("connect"))
    }

    /// One request of the operator commands, bounded by the request timeout.
    pub(crate) async fn call<R>(
        &self,
        operation: &'static str,
        request: impl Future<Output = Result<R, etcd_client::Error>>,
    ) -> Result<R, EtcdLeaseError> {
        self.transport
            .call(request)
            .await
            .map_err(|e| e.into_error(operation))
    }
}

impl TransportError {
    /// The strategy's error for a round trip of `operation` that brought no reply.
    fn into_error(self, operation: &'static str) -> EtcdLeaseError {
        match self {
            Self::ConnectTimeout(timeout) => EtcdLeaseError::Timeout {
                operation: "connect",
                timeout,
            },
            Self::Connect(source) => EtcdLeaseError::request("connect", source),
            Self::Timeout(timeout) => EtcdLeaseError::Timeout { operation, timeout },
            Self::Failed(source) => EtcdLeaseError::request(operation, source),
        }
    }
}

impl<T: Transport> EtcdStrategy<T> {
    /// A strategy whose requests go over `transport`; `options` supply the prefix, the
    /// attempts, the longest lease and the largest clock offset (the connection settings are
    /// the transport's business).
    ///
    /// # Errors
    /// [`EtcdLeaseError::InvalidOptions`] when `options` are out of range.
    pub fn with_transport(transport: T, options: EtcdOptions) -> Result<Self, EtcdLeaseError> {
        options.validate()?;
        Ok(Self::on(transport, options))
    }

    fn on(transport: T, options: EtcdOptions) -> Self {
        Self {
            transport,
            options,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The settings.
    pub const fn options(&self) -> &EtcdOptions {
        &self.options
    }

    /// The transport.
    pub const fn transport(&self) -> &T {
        &self.transport
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.options.prefix
    }

    /// One round trip of `operation`.
    async fn exchange(
        &self,
        operation: &'static str,
        request: Request,
    ) -> Result<Reply, EtcdLeaseError> {
        self.transport
            .exchange(request)
            .await
            .map_err(|e| e.into_error(operation))
    }

    fn unexpected(operation: &'static str, reply: &Reply) -> EtcdLeaseError {
        EtcdLeaseError::unexpected(operation, format!("{reply:?}"))
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The highest revision seen so far: taken before a linearizable request, whose answer
    /// can then never carry a lower one from an intact store.
    pub(crate) fn revision_before(&self) -> i64 {
        self.seen().revision
    }

    /// Records the header of a linearizable answer (a range or a transaction) to a request sent
    /// when the highest revision seen was `before`.
    pub(crate) fn observe(&self, before: i64, header: Option<&Header>) {
        let Some(header) = header else { return };
        let now = self.transport.now();
        let mut seen = self.seen();
        let (cluster, revision) = (header.cluster_id, header.revision);
        let rewound = match seen.cluster_id.replace(cluster) {
            Some(previous) if previous != cluster => {
                format!("the cluster id was {previous:x}, is now {cluster:x}")
            }
            _ if revision < before => {
                format!("revision {revision} after revision {before} was seen")
            }
            _ => {
                seen.revision = seen.revision.max(revision);
                return;
            }
        };
        seen.rewound = Some((rewound, now));
        // Compare from now on against the store as it is.
        seen.revision = revision;
    }

    /// Fails while acquisition holds off after the store went back in time.
    fn check_rewound(&self) -> Result<(), EtcdLeaseError> {
        let now = self.transport.now();
        let mut seen = self.seen();
        if let Some((what, at)) = &seen.rewound {
            let elapsed = now.saturating_sub(*at);
            let hold = self.options.amnesia_hold_off();
            if elapsed < hold {
                return Err(EtcdLeaseError::StoreRewound {
                    what: what.clone(),
                    remaining: hold - elapsed,
                });
            }
            seen.rewound = None;
        }
        Ok(())
    }

    /// Grants an etcd lease of `seconds`; its ID and the TTL etcd granted.
    async fn grant(&self, seconds: i64) -> Result<(i64, Duration), EtcdLeaseError> {
        const OPERATION: &str = "lease grant";
        let request = Request::Grant { ttl_s: seconds };
        let reply = self.exchange(OPERATION, request).await?;
        let Reply::Granted {
            lease,
            ttl_s,
            error,
        } = reply
        else {
            return Err(Self::unexpected(OPERATION, &reply));
        };
        if !error.is_empty() {
            return Err(EtcdLeaseError::unexpected(OPERATION, error));
        }
        let ttl = u64::try_from(ttl_s)
            .ok()
            .filter(|ttl| *ttl > 0)
            .ok_or_else(|| EtcdLeaseError::unexpected(OPERATION, format!("ttl {ttl_s}")))?;
        Ok((lease, Duration::from_secs(ttl)))
    }

    /// Revokes an etcd lease, best effort (it ends by itself at its TTL anyway).
    pub(crate) async fn revoke_quietly(&self, lease: i64) {
        let _ = self
            .exchange("lease revoke", Request::Revoke { lease })
            .await;
    }

    /// A linearizable transaction, its answer recorded for the amnesia check: whether it
    /// succeeded, its operations' results and its header.
    async fn txn(
        &self,
        operation: &'static str,
        txn: Txn,
    ) -> Result<(bool, Vec<OpResponse>, Option<Header>), EtcdLeaseError> {
        let before = self.revision_before();
        let reply = self.exchange(operation, Request::Txn(txn)).await?;
        let Reply::Txn {
            header,
            succeeded,
            responses,
        } = reply
        else {
            return Err(Self::unexpected(operation, &reply));
        };
        self.observe(before, header.as_ref());
        Ok((succeeded, responses, header))
    }

    /// One read of every key under the prefix, with values (the floors'), linearizable.
    async fn read(&self) -> Result<Snapshot, EtcdLeaseError> {
        let before = self.revision_before();
        let request = Request::Range {
            prefix: self.prefix().to_owned(),
        };
        let reply = self.exchange("range", request).await?;
        let Reply::Range { header, kvs } = reply else {
            return Err(Self::unexpected("range", &reply));
        };
        self.observe(before, header.as_ref());
        let mut snapshot = Snapshot::default();
        let mut held = [false; MachineId::COUNT as usize];
        let mut floors = vec![None; usize::from(MachineId::COUNT)];
        for kv in kvs {
            match keys::classify(self.prefix(), &kv.key) {
                Entry::Lease(id) => held[usize::from(id.get())] = true,
                Entry::Floor(id) => floors[usize::from(id.get())] = Some(kv),
                Entry::Marker => snapshot.initialized = true,
                Entry::HoldOff => snapshot.hold_off = Some(kv.lease),
                Entry::Other => {}
            }
        }
        for id in (0..MachineId::COUNT).filter_map(|n| MachineId::new(n).ok()) {
            let n = usize::from(id.get());
            match floors[n].take() {
                _ if held[n] => {}
                None => snapshot.free.push((id, 0, 0)),
                Some(kv) => match keys::parse_floor(&kv.value) {
                    Some(floor) => snapshot.free.push((id, floor, kv.mod_revision)),
                    None => snapshot.unreadable.push((id, lossy(&kv.value))),
                },
            }
        }
        Ok(snapshot)
    }

    /// The answer to an acquire while the hold-off key, on etcd lease `lease`, exists: its time
    /// left, or `None` when the etcd lease ended since the read (read again).
    async fn held_off(&self, lease: i64) -> Result<Option<EtcdLeaseError>, EtcdLeaseError> {
        const OPERATION: &str = "lease time-to-live";
        let held_off = |remaining| EtcdLeaseError::NotInitialized {
            prefix: self.prefix().to_owned(),
            remaining,
        };
        if lease == 0 {
            // Put by hand without a lease: it never ends by itself.
            return Ok(Some(held_off(Duration::MAX)));
        }
        let request = Request::TimeToLive { lease };
        let reply = self.exchange(OPERATION, request).await?;
        let Reply::TimeToLive { ttl_s } = reply else {
            return Err(Self::unexpected(OPERATION, &reply));
        };
        // -1: the etcd lease ended, and the key with it.
        Ok(u64::try_from(ttl_s)
            .ok()
            .map(|seconds| held_off(Duration::from_secs(seconds.max(1)))))
    }

    /// Begins the hold-off after a read found no initialization marker: in one transaction,
    /// if there is still neither marker nor hold-off key, writes the hold-off key on a new etcd
    /// lease of the amnesia hold-off and the marker, so that the prefix is usable once the
    /// hold-off key ends with its etcd lease. Its answer to the acquire, or `None` when another
    /// node began a hold-off or initialized the prefix since the read (read again).
    async fn begin_hold_off(&self) -> Result<Option<EtcdLeaseError>, EtcdLeaseError> {
        let seconds = whole_seconds_up(self.options.amnesia_hold_off());
        let (lease, granted) = self.grant(seconds).await?;
        let prefix = self.prefix();
        let marker = keys::marker_key(prefix);
        let hold_off = keys::hold_off_key(prefix);
        let txn = Txn {
            when: vec![
                Compare::eq(marker.clone(), Target::Version(0)),
                Compare::eq(hold_off.clone(), Target::Version(0)),
            ],
            then: vec![
                TxnOp::put(
                    hold_off,
                    format!(
                        "no initialization marker was found: no machine id is leased under this \
                         prefix until this key's etcd lease of {seconds} s ends"
                    ),
                    lease,
                ),
                TxnOp::put(marker, keys::MARKER_VALUE, 0),
            ],
            otherwise: Vec::new(),
        };
        // An uncertain answer may have written the hold-off key: its etcd lease is left to its
        // TTL, since a revoke would end the hold-off at once.
        let (succeeded, _, _) = self.txn("txn (begin hold-off)", txn).await?;
        if succeeded {
            return Ok(Some(EtcdLeaseError::NotInitialized {
                prefix: prefix.to_owned(),
                remaining: granted,
            }));
        }
        // Not revoked either when the answer is "failed": that answer may be a duplicate's,
        // after the first delivery already wrote the hold-off key onto this lease, and revoking
        // it would end the hold-off at once. Unused, it holds nothing and ends with its TTL.
        Ok(None)
    }

    /// The TTL an acquire asks for, in whole seconds: `requested` (at most the longest lease),
    /// rounded down, so the grant never exceeds the request unless etcd's minimum TTL does.
    fn acquire_seconds(&self, requested: Duration) -> Result<i64, EtcdLeaseError> {
        let seconds = requested.min(self.options.max_lease_duration).as_secs();
        if seconds == 0 {
            return Err(EtcdLeaseError::InvalidOptions(
                "requested lease duration must be at least 1 s: etcd leases are whole seconds"
                    .to_owned(),
            ));
        }
        Ok(i64::try_from(seconds).unwrap_or(i64::MAX))
    }

    /// A random number below `n`.
    fn random_below(&self, n: usize) -> usize {
        let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        usize::try_from(self.transport.random() % n).unwrap_or(0)
    }

    /// A fresh random token for a lease key's value: 32 hex digits.
    fn new_token(&self) -> String {
        let token =
            (u128::from(self.transport.random()) << 64) | u128::from(self.transport.random());
        format!("{token:032x}")
    }

    async fn claim_loop(
        &self,
        seconds: i64,
        request: Acquire,
        granted: &mut Option<(i64, Duration)>,
    ) -> Result<Grant<EtcdLease>, EtcdLeaseError> {
        let prefix = self.prefix();
        for _ in 0..self.options.acquire_attempts {
            let snapshot = self.read().await?;
            self.check_rewound()?;
            // The prefix may have lost keys of IDs that running nodes still use: no claim
            // until every such lease has ended (see the crate docs, "Amnesia").
            if let Some(hold_off_lease) = snapshot.hold_off {
                match self.held_off(hold_off_lease).await? {
                    Some(held_off) => return Err(held_off),
                    None => continue,
                }
            }
            if !snapshot.initialized {
                match self.begin_hold_off().await? {
                    Some(held_off) => return Err(held_off),
                    None => continue,
                }
            }
            // A random free ID, not the lowest: nodes starting together spread out.
            let Some((id, stored, floor_revision)) =
                lease_core::pick_free(&snapshot.free, request.now_ms, &mut |n| {
                    self.random_below(n)
                })
            else {
                return Err(match snapshot.unreadable.into_iter().next() {
                    Some((id, value)) => EtcdLeaseError::UnreadableFloor {
                        key: keys::floor_key(prefix, id),
                        id,
                        value,
                    },
                    None => EtcdLeaseError::Exhausted {
                        prefix: prefix.to_owned(),
                    },
                });
            };
            let (lease, ttl) = match *granted {
                Some(granted) => granted,
                None => *granted.insert(self.grant(seconds).await?),
            };
            let token = self.new_token();
            let lease_key = keys::lease_key(prefix, id);
            let floor_key = keys::floor_key(prefix, id);
            let when = vec![
                Compare::eq(lease_key.clone(), Target::CreateRevision(0)),
                // Decided with the claim: the prefix is initialized and not held off.
                Compare::new(
                    keys::marker_key(prefix),
                    CompareOp::Greater,
                    Target::Version(0),
                ),
                Compare::eq(keys::hold_off_key(prefix), Target::Version(0)),
                // The floor read above, unchanged: the grant reports exactly what was stored.
                Compare::eq(floor_key.clone(), Target::ModRevision(floor_revision)),
            ];
            let mut then = vec![TxnOp::put(lease_key, token.clone(), lease)];
            if floor_revision == 0 || request.floor_ms > stored {
                let floor = keys::encode_floor(stored.max(request.floor_ms));
                then.push(TxnOp::put(floor_key, floor, 0));
            }
            let txn = Txn {
                when,
                then,
                otherwise: Vec::new(),
            };
            let (succeeded, _, header) = self.txn("txn (claim)", txn).await?;
            if !succeeded {
                // Another node claimed it (or its floor moved), or the marker went or a
                // hold-off began, since the read: read again.
                continue;
            }
            // Every write of one transaction has its revision: the key's create revision.
            let revision = header
                .map(|header| header.revision)
                .ok_or_else(|| EtcdLeaseError::unexpected("txn (claim)", "no header"))?;
            let lease = EtcdLease {
                id,
                lease,
                revision,
                token,
            };
            return Ok(Grant::new(id, lease, ttl).with_floor(stored));
        }
        Err(EtcdLeaseError::Conflict {
            attempts: self.options.acquire_attempts,
        })
    }

    /// One keep-alive of the holder's etcd lease: the TTL etcd granted and the Raft term of
    /// the answer.
    async fn keep_alive(&self, lease: &EtcdLease) -> Result<(Duration, u64), EtcdLeaseError> {
        const OPERATION: &str = "lease keep-alive";
        let request = Request::KeepAlive { lease: lease.lease };
        let reply = self.exchange(OPERATION, request).await?;
        let Reply::KeptAlive { header, ttl_s } = reply else {
            return Err(Self::unexpected(OPERATION, &reply));
        };
        let ttl = u64::try_from(ttl_s).unwrap_or(0);
        if ttl == 0 {
            return Err(EtcdLeaseError::Lost {
                id: lease.id,
                reason: LostReason::LeaseGone { lease: lease.lease },
            });
        }
        let term = header.map_or(0, |header| header.raft_term);
        Ok((Duration::from_secs(ttl), term))
    }
}

/// `bytes` as text, invalid UTF-8 replaced.
fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `duration` in whole seconds, rounded up, at least 1: an etcd lease's TTL that lasts at
/// least `duration`.
fn whole_seconds_up(duration: Duration) -> i64 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// The free IDs of one read.
#[derive(Debug, Default)]
struct Snapshot {
    /// Whether the initialization marker exists.
    initialized: bool,
    /// The etcd lease of the hold-off key, when it exists.
    hold_off: Option<i64>,
    /// Free IDs with their stored floor (0 when none) and the floor key's mod revision (0 when
    /// none).
    free: Vec<(MachineId, u64, i64)>,
    /// Free IDs whose floor key holds no readable floor, with what it holds.
    unreadable: Vec<(MachineId, String)>,
}

/// The comparisons that prove `lease` still holds its key.
fn ours(lease_key: &str, lease: &EtcdLease) -> Vec<Compare> {
    vec![
        Compare::eq(lease_key, Target::Lease(lease.lease)),
        Compare::eq(lease_key, Target::CreateRevision(lease.revision)),
    ]
}

/// A nested transaction that sets the floor key to `floor_ms` if it is absent or lower (the
/// stored form compares byte-wise as the numbers do).
fn raise_floor(floor_key: &str, floor_ms: u64) -> Txn {
    let value = keys::encode_floor(floor_ms).into_bytes();
    let put = TxnOp::put(floor_key, value.clone(), 0);
    let create = Txn {
        when: vec![Compare::eq(floor_key, Target::CreateRevision(0))],
        then: vec![put.clone()],
        otherwise: Vec::new(),
    };
    Txn {
        when: vec![Compare::new(
            floor_key,
            CompareOp::Less,
            Target::Value(value),
        )],
        then: vec![put],
        otherwise: vec![TxnOp::Txn(create)],
    }
}

impl<T: Transport> Strategy for EtcdStrategy<T> {
    type Lease = EtcdLease;
    type Error = EtcdLeaseError;

    /// A read of the prefix (keys and floors), a lease grant, then the claim transaction on a
    /// random free ID, preferring one whose floor is below `now_ms`; the transaction also
    /// requires the floor key unchanged since the read and raises it to `floor_ms`.
    async fn acquire(&self, request: Acquire) -> Result<Grant<EtcdLease>, EtcdLeaseError> {
        let seconds = self.acquire_seconds(request.requested)?;
        let mut granted = None;
        let result = self.claim_loop(seconds, request, &mut granted).await;
        if result.is_err()
            && let Some((lease, _)) = granted
        {
            // Nothing of ours uses it: an uncertain claim's key goes with it.
            self.revoke_quietly(lease).await;
        }
        result
    }

    /// One keep-alive, then the transaction that proves the key is still attached to this
    /// holder's etcd lease and raises the floor key to `floor_ms` (a nested transaction). etcd
    /// keeps a lease's TTL: `requested` is not used, the TTL etcd granted at acquire is renewed
    /// and reported.
    async fn renew(
        &self,
        lease: &EtcdLease,
        request: Renew,
    ) -> Result<Renewal<EtcdLease>, EtcdLeaseError> {
        const OPERATION: &str = "txn (renewal proof)";
        let (ttl, keep_alive_term) = self.keep_alive(lease).await?;
        let prefix = self.prefix();
        let lease_key = keys::lease_key(prefix, lease.id);
        let floor_key = keys::floor_key(prefix, lease.id);
        let txn = Txn {
            when: ours(&lease_key, lease),
            then: vec![
                TxnOp::Get(floor_key.clone()),
                TxnOp::Txn(raise_floor(&floor_key, request.floor_ms)),
            ],
            otherwise: vec![TxnOp::Get(lease_key)],
        };
        let (succeeded, responses, header) = self.txn(OPERATION, txn).await?;
        if !succeeded {
            let reason = match responses.first() {
                Some(OpResponse::Get(None)) => LostReason::KeyGone,
                Some(OpResponse::Get(Some(kv))) => LostReason::TakenOver {
                    lease: kv.lease,
                    revision: kv.create_revision,
                },
                _ => {
                    return Err(EtcdLeaseError::unexpected(
                        OPERATION,
                        format!("{responses:?}"),
                    ));
                }
            };
            // The etcd lease is alive but holds nothing of ours any more.
            self.revoke_quietly(lease.lease).await;
            return Err(EtcdLeaseError::Lost {
                id: lease.id,
                reason,
            });
        }
        if let Some(OpResponse::Get(Some(kv))) = responses.first()
            && keys::parse_floor(&kv.value).is_none()
        {
            return Err(EtcdLeaseError::UnreadableFloor {
                key: floor_key,
                id: lease.id,
                value: lossy(&kv.value),
            });
        }
        let proof_term = header.map_or(0, |header| header.raft_term);
        if keep_alive_term != proof_term {
            return Err(EtcdLeaseError::LeaderChanged {
                id: lease.id,
                keep_alive_term,
                proof_term,
            });
        }
        Ok(Renewal::new(lease.clone(), ttl))
    }

    /// A guard lease, the transaction that moves this holder's key onto it and sets the floor
    /// key to `floor_ms` (or, when the key is no longer ours, only raises it), and the revoke
    /// of this holder's etcd lease.
    async fn release(&self, lease: &EtcdLease, request: Release) -> Result<(), EtcdLeaseError> {
        // Rounded up: the ID stays blocked at least `guard`.
        let seconds = whole_seconds_up(request.guard);
        let (guard_lease, _) = self.grant(seconds).await?;
        let prefix = self.prefix();
        let lease_key = keys::lease_key(prefix, lease.id);
        let floor_key = keys::floor_key(prefix, lease.id);
        let txn = Txn {
            when: ours(&lease_key, lease),
            then: vec![
                TxnOp::put(lease_key.clone(), lease.token.clone(), guard_lease),
                TxnOp::put(floor_key.clone(), keys::encode_floor(request.floor_ms), 0),
            ],
            // Not ours any more (expired, taken over): only raise the floor, so what was
            // issued under the lease is known; the lease manager releases a lost lease too.
            otherwise: vec![TxnOp::Txn(raise_floor(&floor_key, request.floor_ms))],
        };
        // An uncertain answer may have moved the key onto the guard lease: leave both leases
        // to their TTLs rather than free the ID early.
        self.txn("txn (release)", txn).await?;
        // The guard lease is left to expire even when the answer is "not ours": that answer
        // may be a duplicate's, after the first delivery already moved the key onto the guard
        // lease, and revoking it would delete the key and free the ID at once. Unused, it
        // blocks nothing and ends with its TTL.
        self.revoke_quietly(lease.lease).await;
        Ok(())
    }

    /// Refuses terms whose leases, in the whole seconds etcd grants (the lease duration, at
    /// most `max_lease_duration`, rounded down), are below the manager's minimum TTL: every
    /// grant would be refused as an illegal TTL.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), EtcdLeaseError> {
        let asked = terms.lease_duration.min(self.options.max_lease_duration);
        let granted = Duration::from_secs(asked.as_secs());
        if granted < terms.min_ttl {
            return Err(EtcdLeaseError::InvalidOptions(format!(
                "leases would be granted {granted:?} (the lease duration {:?}, at most \
                 max_lease_duration {:?}, in whole seconds as etcd grants them), below the lease \
                 manager's min_ttl ({:?}): raise EtcdOptions::max_lease_duration or the lease \
                 duration, or lower LeaseConfig::with_min_ttl",
                terms.lease_duration, self.options.max_lease_duration, terms.min_ttl
            )));
        }
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile::new("etcd").recording_floor()
    }
}
