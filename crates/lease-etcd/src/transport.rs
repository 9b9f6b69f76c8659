//! Where the strategy meets the network: one [`Request`] per round trip to etcd, answered with
//! a [`Reply`] or a [`TransportError`], over a [`Transport`].
//!
//! [`EtcdStrategy`](crate::EtcdStrategy) holds the lease protocol (which keys it reads, the
//! transactions it sends, how it reads their answers, its retries, the amnesia check and its
//! random choices) and runs it over any transport. The default, [`Connection`], sends each
//! request to a cluster with `etcd-client`, bounded by the request timeout; another transport
//! can carry the same requests to something else (a simulated cluster), with its own clock and
//! random source, so that the protocol it runs is the one production runs.

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions, PutOptions, TxnOpResponse};
use tokio::sync::OnceCell;

use crate::options::EtcdOptions;

/// One round trip to etcd, at the level the strategy speaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// A linearizable range of every key under `prefix`, with values.
    Range {
        /// The key prefix.
        prefix: String,
    },
    /// `LeaseGrant` of `ttl_s` seconds.
    Grant {
        /// The TTL asked for, in seconds.
        ttl_s: i64,
    },
    /// One keep-alive of `lease`, answered with its TTL and the answer's Raft term.
    KeepAlive {
        /// The etcd lease.
        lease: i64,
    },
    /// `LeaseRevoke`.
    Revoke {
        /// The etcd lease.
        lease: i64,
    },
    /// `LeaseTimeToLive`.
    TimeToLive {
        /// The etcd lease.
        lease: i64,
    },
    /// A transaction.
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

/// One comparison of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    /// The key.
    pub key: String,
    /// The operator.
    pub op: CompareOp,
    /// What is compared with what.
    pub target: Target,
}

impl Compare {
    /// `key`'s `target` compared by `op`.
    #[must_use]
    pub fn new(key: impl Into<String>, op: CompareOp, target: Target) -> Self {
        Self {
            key: key.into(),
            op,
            target,
        }
    }

    /// `key`'s `target` equal to the target's.
    #[must_use]
    pub fn eq(key: impl Into<String>, target: Target) -> Self {
        Self::new(key, CompareOp::Equal, target)
    }
}

/// A comparison's operator: the key's figure is equal to, less or greater than the target's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// Equal.
    Equal,
    /// Less.
    Less,
    /// Greater.
    Greater,
}

/// What a comparison looks at, and what it compares it with. A missing key has version,
/// revisions and lease 0, and fails every value comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The writes since the key was created.
    Version(i64),
    /// The revision that created it.
    CreateRevision(i64),
    /// The revision that last wrote it.
    ModRevision(i64),
    /// The etcd lease it is attached to (0: none).
    Lease(i64),
    /// Its value, compared byte-wise.
    Value(Vec<u8>),
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// A put, attached to `lease` (0: none).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
        /// The etcd lease.
        lease: i64,
    },
    /// A get of one key.
    Get(String),
    /// A delete of one key.
    Delete(String),
    /// A nested transaction.
    Txn(Txn),
}

impl TxnOp {
    /// A put of `value` at `key`, attached to `lease` (0: none).
    #[must_use]
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>, lease: i64) -> Self {
        Self::Put {
            key: key.into(),
            value: value.into(),
            lease,
        }
    }
}

/// The header of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The store revision (after a write transaction: the transaction's).
    pub revision: i64,
    /// The cluster ID.
    pub cluster_id: u64,
    /// The Raft term of the member that answered.
    pub raft_term: u64,
}

/// A key as etcd returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision that created it.
    pub create_revision: i64,
    /// The revision that last wrote it.
    pub mod_revision: i64,
    /// Writes since it was created.
    pub version: i64,
    /// The etcd lease it is attached to (0: none).
    pub lease: i64,
}

/// One operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResponse {
    /// A put.
    Put,
    /// A get: the key, if it exists.
    Get(Option<Kv>),
    /// A delete: how many keys it deleted.
    Delete(i64),
    /// A nested transaction.
    Txn {
        /// Whether its comparisons held.
        succeeded: bool,
        /// Its operations' results.
        responses: Vec<OpResponse>,
    },
}

/// etcd's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The range.
    Range {
        /// The header.
        header: Option<Header>,
        /// The keys.
        kvs: Vec<Kv>,
    },
    /// The grant: the new etcd lease and the TTL etcd granted, or etcd's error.
    Granted {
        /// The etcd lease.
        lease: i64,
        /// The TTL granted, in seconds.
        ttl_s: i64,
        /// etcd's error, empty when none.
        error: String,
    },
    /// A keep-alive's answer: the lease's TTL, 0 when etcd does not know the lease.
    KeptAlive {
        /// The header.
        header: Option<Header>,
        /// The TTL in seconds.
        ttl_s: i64,
    },
    /// The revoke.
    Revoked,
    /// The time to live: whole seconds left, -1 when etcd does not know the lease.
    TimeToLive {
        /// The seconds left.
        ttl_s: i64,
    },
    /// A transaction's answer.
    Txn {
        /// The header.
        header: Option<Header>,
        /// Whether its comparisons held.
        succeeded: bool,
        /// Its operations' results.
        responses: Vec<OpResponse>,
    },
}

/// A round trip that brought no reply: its request may or may not have been applied, unless
/// etcd refused it.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// No connection within `timeout`.
    ConnectTimeout(Duration),
    /// The connection could not be opened.
    Connect(etcd_client::Error),
    /// No answer within the request timeout.
    Timeout(Duration),
    /// The client's error: refused or dropped, or a gRPC status from etcd.
    Failed(etcd_client::Error),
}

/// How an [`EtcdStrategy`](crate::EtcdStrategy) reaches etcd, and what it reads from its
/// environment: a monotonic clock for its client-side timers (the hold-off after the store went
/// back in time) and a random source (lease tokens, the free ID it tries).
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

/// The production transport: an `etcd-client` connection, opened on first use, each request
/// bounded by the request timeout (and the connection by the connect timeout).
pub struct Connection {
    client: OnceCell<Client>,
    options: EtcdOptions,
    started: Instant,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("endpoints", &self.options.endpoints)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection to the cluster `options` name, opened on first use.
    pub(crate) fn new(options: EtcdOptions) -> Self {
        Self {
            client: OnceCell::new(),
            options,
            started: Instant::now(),
        }
    }

    /// A connection over a client connected already.
    pub(crate) fn with_client(client: Client, options: EtcdOptions) -> Self {
        Self {
            client: OnceCell::new_with(Some(client)),
            ..Self::new(options)
        }
    }

    /// The client, connected on first use.
    pub(crate) async fn client(&self) -> Result<Client, TransportError> {
        self.client.get_or_try_init(|| self.open()).await.cloned()
    }

    async fn open(&self) -> Result<Client, TransportError> {
        let options = &self.options;
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout)
            // HTTP/2 pings find a dead connection; etcd refuses pings more often than every 5 s.
            .with_keep_alive(Duration::from_secs(10), options.request_timeout)
            // A member without a leader answers at once instead of holding the request.
            .with_require_leader(true);
        if let Some((name, password)) = &options.user {
            connect = connect
                .with_user(name.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &options.tls {
            connect = connect.with_tls(tls.clone());
        }
        let timeout = options.connect_timeout + options.request_timeout;
        match tokio::time::timeout(timeout, Client::connect(&options.endpoints, Some(connect)))
            .await
        {
            Ok(result) => result.map_err(TransportError::Connect),
            Err(_) => Err(TransportError::ConnectTimeout(timeout)),
        }
    }

    /// One request, bounded by the request timeout.
    pub(crate) async fn call<T>(
        &self,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, TransportError> {
        match tokio::time::timeout(self.options.request_timeout, request).await {
            Ok(result) => result.map_err(TransportError::Failed),
            Err(_) => Err(TransportError::Timeout(self.options.request_timeout)),
        }
    }

    async fn send(&self, request: Request) -> Result<Reply, TransportError> {
        let client = self.client().await?;
        Ok(match request {
            Request::Range { prefix } => {
                let options = Some(GetOptions::new().with_prefix());
                let answer = self.call(client.kv_client().get(prefix, options)).await?;
                Reply::Range {
                    header: answer.header().map(Header::from),
                    kvs: answer.kvs().iter().map(Kv::from).collect(),
                }
            }
            Request::Grant { ttl_s } => {
                let answer = self.call(client.lease_client().grant(ttl_s, None)).await?;
                Reply::Granted {
                    lease: answer.id(),
                    ttl_s: answer.ttl(),
                    error: answer.error().to_owned(),
                }
            }
            Request::KeepAlive { lease } => self.keep_alive(&client, lease).await?,
            Request::Revoke { lease } => {
                self.call(client.lease_client().revoke(lease)).await?;
                Reply::Revoked
            }
            Request::TimeToLive { lease } => {
                let mut leases = client.lease_client();
                let ttl_s = self.call(leases.time_to_live(lease, None)).await?.ttl();
                Reply::TimeToLive { ttl_s }
            }
            Request::Txn(txn) => {
                let answer = self.call(client.kv_client().txn(txn.into())).await?;
                Reply::Txn {
                    header: answer.header().map(Header::from),
                    succeeded: answer.succeeded(),
                    responses: answer.op_responses().iter().map(op_response).collect(),
                }
            }
        })
    }

    /// One keep-alive on a stream of its own. The client sends one keep-alive and reads its
    /// answer to open the stream, but keeps only the lease ID of it: a second one on the same
    /// stream gives the TTL and header.
    async fn keep_alive(&self, client: &Client, lease: i64) -> Result<Reply, TransportError> {
        let gone = Reply::KeptAlive {
            header: None,
            ttl_s: 0,
        };
        let mut leases = client.lease_client();
        let (mut keeper, mut stream) = match self.call(leases.keep_alive(lease)).await {
            Err(TransportError::Failed(etcd_client::Error::LeaseKeepAliveError(message)))
                if message == "lease not found" =>
            {
                return Ok(gone);
            }
            other => other?,
        };
        self.call(keeper.keep_alive()).await?;
        let answer = self.call(stream.message()).await?.ok_or_else(|| {
            TransportError::Failed(etcd_client::Error::LeaseKeepAliveError(
                "the stream closed before its answer".to_owned(),
            ))
        })?;
        Ok(Reply::KeptAlive {
            header: answer.header().map(Header::from),
            ttl_s: answer.ttl(),
        })
    }
}

impl Transport for Connection {
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

impl From<&etcd_client::ResponseHeader> for Header {
    fn from(header: &etcd_client::ResponseHeader) -> Self {
        Self {
            revision: header.revision(),
            cluster_id: header.cluster_id(),
            raft_term: header.raft_term(),
        }
    }
}

impl From<&etcd_client::KeyValue> for Kv {
    fn from(kv: &etcd_client::KeyValue) -> Self {
        Self {
            key: kv.key().to_vec(),
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
            lease: kv.lease(),
        }
    }
}

fn op_response(response: &TxnOpResponse) -> OpResponse {
    match response {
        TxnOpResponse::Put(_) => OpResponse::Put,
        TxnOpResponse::Get(get) => OpResponse::Get(get.kvs().first().map(Kv::from)),
        TxnOpResponse::Delete(delete) => OpResponse::Delete(delete.deleted()),
        TxnOpResponse::Txn(txn) => OpResponse::Txn {
            succeeded: txn.succeeded(),
            responses: txn.op_responses().iter().map(op_response).collect(),
        },
    }
}

impl From<Txn> for etcd_client::Txn {
    fn from(txn: Txn) -> Self {
        fn all<T, U: From<T>>(items: Vec<T>) -> Vec<U> {
            items.into_iter().map(U::from).collect()
        }
        Self::new()
            .when(all::<_, etcd_client::Compare>(txn.when))
            .and_then(all::<_, etcd_client::TxnOp>(txn.then))
            .or_else(all::<_, etcd_client::TxnOp>(txn.otherwise))
    }
}

impl From<TxnOp> for etcd_client::TxnOp {
    fn from(op: TxnOp) -> Self {
        match op {
            TxnOp::Put { key, value, lease } => {
                let options = (lease != 0).then(|| PutOptions::new().with_lease(lease));
                Self::put(key, value, options)
            }
            TxnOp::Get(key) => Self::get(key, None),
            TxnOp::Delete(key) => Self::delete(key, None),
            TxnOp::Txn(txn) => Self::txn(txn.into()),
        }
    }
}

impl From<Compare> for etcd_client::Compare {
    fn from(compare: Compare) -> Self {
        use etcd_client::CompareOp as Op;
        let op = match compare.op {
            CompareOp::Equal => Op::Equal,
            CompareOp::Less => Op::Less,
            CompareOp::Greater => Op::Greater,
        };
        let key = compare.key;
        match compare.target {
            Target::Version(v) => Self::version(key, op, v),
            Target::CreateRevision(v) => Self::create_revision(key, op, v),
            Target::ModRevision(v) => Self::mod_revision(key, op, v),
            Target::Lease(v) => Self::lease(key, op, v),
            Target::Value(v) => Self::value(key, op, v),
        }
    }
}
