//! What can go wrong, mapped onto [`lease_core::ErrorKind`].

use std::time::Duration;

use lease_core::{ErrorKind, LeaseError, MachineId};

/// Why a lease is no longer this holder's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The session that owned the lease's ephemeral znode ended (it expired, or the ensemble
    /// forgot it), and the znode with it.
    SessionEnded {
        /// The session.
        session: i64,
    },
    /// The ID's znode is gone (an operator's release, a delete of the root) though the session
    /// lives.
    NodeGone,
    /// The ID's znode belongs to another session now.
    TakenOver {
        /// The session that owns it now (0: a persistent znode, a release guard).
        owner: i64,
    },
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SessionEnded { session } => {
                write!(
                    f,
                    "session {session:#x} ended, and its ephemeral znode with it"
                )
            }
            Self::NodeGone => f.write_str("its znode was deleted"),
            Self::TakenOver { owner: 0 } => {
                f.write_str("its znode was replaced by a persistent one (a release guard)")
            }
            Self::TakenOver { owner } => {
                write!(f, "its znode now belongs to session {owner:#x}")
            }
        }
    }
}

/// A failure of the ZooKeeper lease strategy. [`LeaseError::kind`] tells the lease manager what
/// to do with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZooKeeperLeaseError {
    /// The store URL could not be parsed.
    #[error("invalid zookeeper url: {0}")]
    InvalidUrl(String),
    /// An option is out of range.
    #[error("invalid lease-zookeeper options: {0}")]
    InvalidOptions(String),
    /// The ensemble granted a session timeout that does not suit the lease timing.
    #[error(
        "the ensemble granted a session timeout of {granted:?}, so leases would last {ttl:?}, {why}"
    )]
    SessionTimeout {
        /// The session timeout granted.
        granted: Duration,
        /// The TTL leases on it get.
        ttl: Duration,
        /// What it conflicts with, and what to change.
        why: String,
    },
    /// Every machine ID under the root is held or in its release guard.
    #[error(
        "all {count} machine ids under `{root}` are held{guarded}: wait for one to expire, or free a dead node's id",
        count = lease_core::MachineId::COUNT,
        guarded = guard_note(*.guarded)
    )]
    Exhausted {
        /// The root znode.
        root: String,
        /// How many are only in their release guard (free when it ends).
        guarded: usize,
    },
    /// Other nodes claimed the chosen free ID first, `attempts` times in a row.
    #[error("lost the race for a free machine id {attempts} times in a row: try again")]
    Conflict {
        /// How many claims were tried.
        attempts: u32,
    },
    /// The lease is no longer this holder's.
    #[error("lease on machine id {id} is gone ({reason}): stop using the id and acquire a new one")]
    Lost {
        /// The machine ID that was leased.
        id: MachineId,
        /// How ZooKeeper showed it.
        reason: LostReason,
    },
    /// This strategy saw the ensemble go back in time (a floor written at a later transaction
    /// than the ensemble now knows of): it may have lost leases still in use, so acquisition holds
    /// off for the amnesia hold-off ([`ZooKeeperOptions::amnesia_hold_off`](crate::ZooKeeperOptions::amnesia_hold_off)).
    #[error(
        "the zookeeper ensemble went back in time ({what}): it may have lost leases still in use, so acquisition waits {remaining:?} more: the longest session timeout and twice the largest clock offset between nodes (max_session_timeout_s and max_clock_offset_s in the store url)"
    )]
    StoreRewound {
        /// What was seen.
        what: String,
        /// How much longer acquisition holds off.
        remaining: Duration,
    },
    /// The root was found without its initialization marker: it is new, or its znodes were
    /// deleted while nodes ran. Acquisition holds off for the amnesia hold-off, counted on each
    /// node's own clock from when it first saw the hold-off znode, unless an operator
    /// initializes the root ([`StoreAdmin::migrate`](lease_core::StoreAdmin::migrate)).
    #[error(
        "acquisition is held off for {remaining:?} more: the zookeeper root `{root}` was found without its initialization marker `{root}/initialized`. Either the root is new, or its znodes were deleted while nodes ran (deleteall {root}), and ids that running nodes still use look free. If the root is new, or every node using it is stopped, run `nononce leases migrate --store zk://HOST:PORT{root}` once (StoreAdmin::migrate); otherwise wait: the hold-off (`{root}/hold-off`) lasts the longest session timeout and twice the largest clock offset between nodes (max_session_timeout_s and max_clock_offset_s in the store url) past when this node first saw it"
    )]
    NotInitialized {
        /// The root znode.
        root: String,
        /// How much longer acquisition holds off.
        remaining: Duration,
    },
    /// The only free IDs have a floor znode holding something other than decimal ms: nobody can
    /// say which timestamps were issued under them.
    #[error(
        "machine id {id}'s floor znode `{path}` holds {value:?}, not decimal unix ms: set it (zkCli.sh set {path} <unix ms>) to a time no earlier than any timestamp issued under the id, for example now plus the lease duration"
    )]
    UnreadableFloor {
        /// The floor znode.
        path: String,
        /// The machine ID.
        id: MachineId,
        /// What it holds (lossy UTF-8).
        value: String,
    },
    /// A request did not answer in time: its outcome is unknown.
    #[error("zookeeper {operation} did not answer within {timeout:?}")]
    Timeout {
        /// The request.
        operation: &'static str,
        /// The timeout.
        timeout: Duration,
    },
    /// ZooKeeper answered something this strategy does not understand.
    #[error("unexpected answer to zookeeper {operation}: {reply}")]
    UnexpectedReply {
        /// The request.
        operation: &'static str,
        /// What came back.
        reply: String,
    },
    /// A request failed; [`LeaseError::kind`] says whether to retry.
    #[error("zookeeper {operation} failed: {source}")]
    Request {
        /// The request.
        operation: &'static str,
        /// The client's error.
        #[source]
        source: zookeeper_client::Error,
    },
}

fn guard_note(guarded: usize) -> String {
    match guarded {
        0 => String::new(),
        n => format!(" ({n} of them only in their release guard, free within seconds)"),
    }
}

impl ZooKeeperLeaseError {
    pub(crate) fn unexpected(operation: &'static str, reply: impl Into<String>) -> Self {
        Self::UnexpectedReply {
            operation,
            reply: reply.into(),
        }
    }
}

impl LeaseError for ZooKeeperLeaseError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidUrl(_) | Self::InvalidOptions(_) | Self::SessionTimeout { .. } => {
                ErrorKind::Misconfigured
            }
            Self::Exhausted { .. } => ErrorKind::Exhausted,
            Self::Conflict { .. } => ErrorKind::Conflict,
            Self::Lost { .. } => ErrorKind::Lost,
            Self::StoreRewound { .. } | Self::NotInitialized { .. } | Self::Timeout { .. } => {
                ErrorKind::Retry
            }
            Self::UnreadableFloor { .. } | Self::UnexpectedReply { .. } => ErrorKind::Other,
            Self::Request { source, .. } => classify(source),
        }
    }
}

/// The kind of a `zookeeper-client` error.
pub(crate) fn classify(error: &zookeeper_client::Error) -> ErrorKind {
    use zookeeper_client::Error as E;
    match error {
        // The connection dropped, the request timed out, no server answered, the session moved
        // or was throttled: the request may or may not have been applied. An expired session is
        // answered again on a new one.
        E::ConnectionLoss
        | E::Timeout
        | E::NoHosts
        | E::SessionMoved
        | E::Throttled
        | E::SessionExpired
        | E::ClientClosed
        // "no response from connection in N ms": the connection stalled.
        | E::Custom(_) => ErrorKind::Retry,
        // Credentials refused, a path or ACL the user may not touch, a read-only server.
        E::AuthFailed | E::NoAuth | E::InvalidAcl | E::BadArguments(_) | E::NotReadOnly => {
            ErrorKind::Misconfigured
        }
        E::Unimplemented => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_map_onto_kinds() {
        use zookeeper_client::Error as E;
        assert_eq!(classify(&E::ConnectionLoss), ErrorKind::Retry);
        assert_eq!(classify(&E::SessionExpired), ErrorKind::Retry);
        assert_eq!(classify(&E::NoAuth), ErrorKind::Misconfigured);
        assert_eq!(classify(&E::Unimplemented), ErrorKind::Unsupported);
        assert_eq!(classify(&E::QuotaExceeded), ErrorKind::Other);
    }

    #[test]
    fn exhausted_names_the_guard() {
        let e = ZooKeeperLeaseError::Exhausted {
            root: "/nononce".into(),
            guarded: 3,
        };
        let text = e.to_string();
        assert!(
            text.contains("3 of them only in their release guard"),
            "{text}"
        );
        assert_eq!(e.kind(), ErrorKind::Exhausted);
    }
}
