//! Where the strategy meets the network: one [`Request`] per round trip to ZooKeeper, answered
//! with an [`Answer`] or a [`TransportError`], over a [`Transport`].
//!
//! [`ZooKeeperStrategy`](crate::ZooKeeperStrategy) holds the lease protocol (which znodes it
//! reads, the multi-ops it sends, how it reads their answers, its retries, the amnesia checks and
//! its random choices) and runs it over any transport. The default, [`Connection`], sends each
//! request on one ZooKeeper session with `zookeeper-client`, bounded by the request timeout,
//! and opens a new session when the last one expired; another transport can carry the same
//! requests to something else (a simulated ensemble), with its own clock and random source, so
//! that the protocol it runs is the one production runs.

use std::future::Future;
use std::time::{Duration, Instant};

use zookeeper_client::{
    Acls, Client, CreateMode, MultiReadResult, MultiWriteError, MultiWriteResult,
};

use crate::options::ZooKeeperOptions;

/// One round trip to ZooKeeper, at the level the strategy speaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// One multi-read (ZooKeeper 3.6 or later): every operation answered from one state of the
    /// server, in order.
    Read(Vec<ReadOp>),
    /// One multi-op: every operation applied, in order, or none.
    Write(Vec<WriteOp>),
    /// `sync`: the server the session is connected to catches up with the leader before it
    /// answers the session's later reads.
    Sync(String),
    /// Creates a persistent znode and every missing ancestor (`mkdir -p`); one that exists is
    /// left as it is.
    MakePath(String),
    /// Opens a session of its own with `timeout`, creates the ephemeral znode `path` on it and
    /// leaves it, without closing it: the ensemble ends the session, and the znode with it,
    /// `timeout` after this request (longer if it grants a longer session; shorter only if its
    /// `maxSessionTimeout` is below `timeout`). Answered `Done`, or `Refused` at index 0.
    Guard {
        /// The znode.
        path: String,
        /// Its data.
        data: Vec<u8>,
        /// The session timeout to ask for.
        timeout: Duration,
    },
}

/// One operation of a [`Request::Read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// The names of a znode's children.
    Children(String),
    /// A znode's data and stat.
    Data(String),
}

/// The answer to one [`ReadOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadResult {
    /// The children's names, unordered.
    Children(Vec<String>),
    /// The data and stat.
    Data {
        /// The data.
        data: Vec<u8>,
        /// The stat.
        stat: NodeStat,
    },
    /// The znode does not exist.
    Missing,
}

/// What the strategy reads of a znode's stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NodeStat {
    /// The transaction that created the znode.
    pub czxid: i64,
    /// The transaction that last wrote its data.
    pub mzxid: i64,
    /// Writes of its data since it was created.
    pub version: i32,
    /// The session that owns it, for an ephemeral znode; 0 for a persistent one.
    pub ephemeral_owner: i64,
}

/// One operation of a [`Request::Write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Fails the multi-op unless the znode exists at `version` (`None`: at any version).
    Check {
        /// The znode.
        path: String,
        /// The version it must be at.
        version: Option<i32>,
    },
    /// Creates a znode (open ACL), ephemeral on the session or persistent; fails if it exists.
    Create {
        /// The znode.
        path: String,
        /// Its data.
        data: Vec<u8>,
        /// Whether it ends with the session.
        ephemeral: bool,
    },
    /// Sets a znode's data if it is at `version` (`None`: at any version).
    SetData {
        /// The znode.
        path: String,
        /// The new data.
        data: Vec<u8>,
        /// The version it must be at.
        version: Option<i32>,
    },
    /// Deletes a childless znode if it is at `version` (`None`: at any version).
    Delete {
        /// The znode.
        path: String,
        /// The version it must be at.
        version: Option<i32>,
    },
}

/// Why ZooKeeper refused one operation of a multi-op (and with it the whole multi-op).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The znode (or, for a create, its parent) does not exist.
    NoNode,
    /// The znode to create exists.
    NodeExists,
    /// The znode is at another version.
    BadVersion,
    /// The znode to delete has children.
    NotEmpty,
}

/// The result of one operation of an applied multi-op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    /// A check held.
    Checked,
    /// A znode was created.
    Created,
    /// A znode's data was set: its stat after.
    Set(NodeStat),
    /// A znode was deleted.
    Deleted,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The answers of a [`Request::Read`], in order.
    Read(Vec<ReadResult>),
    /// A [`Request::Write`] was applied: each operation's result, in order.
    Written(Vec<WriteResult>),
    /// A [`Request::Write`] was refused, nothing of it applied: the first operation that failed,
    /// and why.
    Refused {
        /// The operation's index in the request.
        index: usize,
        /// Why.
        refusal: Refusal,
    },
    /// A [`Request::Sync`], [`Request::MakePath`] or [`Request::Guard`] is done.
    Done,
}

/// The session a request was answered on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Session {
    /// The session ID (the owner of its ephemeral znodes).
    pub id: i64,
    /// The session timeout the ensemble granted: it ends the session when it has heard nothing
    /// of it for this long.
    pub timeout: Duration,
}

/// A [`Reply`] and the session that carried its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The session.
    pub session: Session,
    /// The reply.
    pub reply: Reply,
}

/// A round trip that brought no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No session could be established within the connect timeout.
    #[error("no session within {0:?}")]
    ConnectTimeout(Duration),
    /// Establishing a session failed.
    #[error("connect failed")]
    Connect(#[source] zookeeper_client::Error),
    /// The request did not answer within the request timeout: it may or may not be applied.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The request failed (a lost connection: it may or may not be applied; an expired session:
    /// its ephemeral znodes are gone).
    #[error("request failed")]
    Failed(#[source] zookeeper_client::Error),
}

/// Carries [`Request`]s to ZooKeeper, with the clock and random source the strategy runs on.
pub trait Transport: Send + Sync {
    /// One round trip.
    fn exchange(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Answer, TransportError>> + Send;

    /// A monotonic clock: time since some fixed instant.
    fn now(&self) -> Duration;

    /// A random number.
    fn random(&self) -> u64;
}

/// The default [`Transport`]: one ZooKeeper session at a time over `zookeeper-client`, opened
/// on first use and again after it expired, each request bounded by the request timeout.
pub struct Connection {
    options: ZooKeeperOptions,
    client: tokio::sync::Mutex<Option<Client>>,
    started: Instant,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("hosts", &self.options.hosts())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection to the ensemble `options` name; connects on first use.
    #[must_use]
    pub fn new(options: ZooKeeperOptions) -> Self {
        Self {
            options,
            client: tokio::sync::Mutex::new(None),
            started: Instant::now(),
        }
    }

    /// The live session's client: the one held, unless its session ended, else a new one.
    async fn client(&self) -> Result<Client, TransportError> {
        let mut held = self.client.lock().await;
        if let Some(client) = held.as_ref()
            && !client.state().is_terminated()
        {
            return Ok(client.clone());
        }
        let connector = Client::connector()
            .with_session_timeout(self.options.session_timeout())
            .with_connection_timeout(self.options.connect_timeout())
            .with_fail_eagerly();
        let timeout = self.options.connect_timeout();
        let client = tokio::time::timeout(timeout, connector.connect(self.options.hosts()))
            .await
            .map_err(|_| TransportError::ConnectTimeout(timeout))?
            .map_err(TransportError::Connect)?;
        *held = Some(client.clone());
        Ok(client)
    }

    /// Forgets a client whose session ended, so the next request opens a new one.
    async fn forget_if_ended(&self, client: &Client) {
        let mut held = self.client.lock().await;
        if client.state().is_terminated()
            && held
                .as_ref()
                .is_some_and(|h| h.session_id() == client.session_id())
        {
            *held = None;
        }
    }

    async fn send(
        &self,
        client: &Client,
        request: Request,
    ) -> Result<Reply, zookeeper_client::Error> {
        match request {
            Request::Read(ops) => {
                let mut reader = client.new_multi_reader();
                for op in &ops {
                    match op {
                        ReadOp::Children(path) => reader.add_get_children(path)?,
                        ReadOp::Data(path) => reader.add_get_data(path)?,
                    }
                }
                let results = reader.commit().await?;
                let mut answers = Vec::with_capacity(results.len());
                for result in results {
                    answers.push(match result {
                        MultiReadResult::Children { children } => ReadResult::Children(children),
                        MultiReadResult::Data { data, stat } => ReadResult::Data {
                            data,
                            stat: node_stat(&stat),
                        },
                        MultiReadResult::Error {
                            err: zookeeper_client::Error::NoNode,
                        } => ReadResult::Missing,
                        MultiReadResult::Error { err } => return Err(err),
                        other => {
                            return Err(zookeeper_client::Error::UnexpectedError(format!(
                                "{other:?}"
                            )));
                        }
                    });
                }
                Ok(Reply::Read(answers))
            }
            Request::Write(ops) => {
                let mut writer = client.new_multi_writer();
                let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
                let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
                for op in &ops {
                    match op {
                        WriteOp::Check { path, version } => {
                            writer.add_check_version(path, version.unwrap_or(-1))?;
                        }
                        WriteOp::Create {
                            path,
                            data,
                            ephemeral: true,
                        } => writer.add_create(path, data, &ephemeral)?,
                        WriteOp::Create { path, data, .. } => {
                            writer.add_create(path, data, &persistent)?;
                        }
                        WriteOp::SetData {
                            path,
                            data,
                            version,
                        } => writer.add_set_data(path, data, *version)?,
                        WriteOp::Delete { path, version } => writer.add_delete(path, *version)?,
                    }
                }
                match writer.commit().await {
                    Ok(results) => {
                        let mut written = Vec::with_capacity(results.len());
                        for result in results {
                            written.push(match result {
                                MultiWriteResult::Check => WriteResult::Checked,
                                MultiWriteResult::Create { .. } => WriteResult::Created,
                                MultiWriteResult::SetData { stat } => {
                                    WriteResult::Set(node_stat(&stat))
                                }
                                MultiWriteResult::Delete => WriteResult::Deleted,
                                other => {
                                    return Err(zookeeper_client::Error::UnexpectedError(format!(
                                        "{other:?}"
                                    )));
                                }
                            });
                        }
                        Ok(Reply::Written(written))
                    }
                    Err(MultiWriteError::OperationFailed { index, source }) => {
                        let refusal = match source {
                            zookeeper_client::Error::NoNode => Refusal::NoNode,
                            zookeeper_client::Error::NodeExists => Refusal::NodeExists,
                            zookeeper_client::Error::BadVersion => Refusal::BadVersion,
                            zookeeper_client::Error::NotEmpty => Refusal::NotEmpty,
                            other => return Err(other),
                        };
                        Ok(Reply::Refused { index, refusal })
                    }
                    Err(MultiWriteError::RequestFailed { source }) => Err(source),
                }
            }
            Request::Sync(path) => {
                client.sync(&path).await?;
                Ok(Reply::Done)
            }
            Request::Guard {
                path,
                data,
                timeout,
            } => {
                // Detached: dropping the client leaves the session to expire on the ensemble.
                let guard = Client::connector()
                    .with_session_timeout(timeout)
                    .with_connection_timeout(self.options.connect_timeout())
                    .with_fail_eagerly()
                    .with_detached()
                    .connect(self.options.hosts())
                    .await?;
                let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
                match guard.create(&path, &data, &ephemeral).await {
                    Ok(_) => Ok(Reply::Done),
                    Err(zookeeper_client::Error::NodeExists) => Ok(Reply::Refused {
                        index: 0,
                        refusal: Refusal::NodeExists,
                    }),
                    Err(zookeeper_client::Error::NoNode) => Ok(Reply::Refused {
                        index: 0,
                        refusal: Refusal::NoNode,
                    }),
                    Err(e) => Err(e),
                }
            }
            Request::MakePath(path) => {
                let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
                client.mkdir(&path, &persistent).await?;
                Ok(Reply::Done)
            }
        }
    }
}

/// The stat fields the strategy reads.
fn node_stat(stat: &zookeeper_client::Stat) -> NodeStat {
    NodeStat {
        czxid: stat.czxid,
        mzxid: stat.mzxid,
        version: stat.version,
        ephemeral_owner: stat.ephemeral_owner,
    }
}

impl Transport for Connection {
    async fn exchange(&self, request: Request) -> Result<Answer, TransportError> {
        let client = self.client().await?;
        let session = Session {
            id: client.session_id().0,
            timeout: client.session_timeout(),
        };
        let timeout = self.options.request_timeout();
        let result = tokio::time::timeout(timeout, self.send(&client, request)).await;
        match result {
            Ok(Ok(reply)) => Ok(Answer { session, reply }),
            Ok(Err(error)) => {
                self.forget_if_ended(&client).await;
                Err(TransportError::Failed(error))
            }
            Err(_) => Err(TransportError::Timeout(timeout)),
        }
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn random(&self) -> u64 {
        rand::random()
    }
}
