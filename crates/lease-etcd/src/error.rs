//! What can go wrong, mapped onto [`lease_core::ErrorKind`].

use std::time::Duration;

use lease_core::{ErrorKind, LeaseError, MachineId};

/// Why a lease is no longer this holder's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// etcd no longer knows the holder's etcd lease: it expired, or was revoked.
    LeaseGone {
        /// The etcd lease ID.
        lease: i64,
    },
    /// The ID's key is gone (an operator's force release), though the etcd lease is alive.
    KeyGone,
    /// The ID's key belongs to another holder now.
    TakenOver {
        /// The etcd lease the key is attached to now (0: none).
        lease: i64,
        /// The key's create revision now.
        revision: i64,
    },
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LeaseGone { lease } => {
                write!(f, "etcd lease {lease:x} expired or was revoked")
            }
            Self::KeyGone => f.write_str("its key was deleted"),
            Self::TakenOver { lease, revision } => write!(
                f,
                "its key now belongs to etcd lease {lease:x} (created at revision {revision})"
            ),
        }
    }
}

/// A failure of the etcd lease strategy. [`LeaseError::kind`] tells the lease manager what to
/// do with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdLeaseError {
    /// The store URL could not be parsed.
    #[error("invalid etcd url: {0}")]
    InvalidUrl(String),
    /// An option is out of range.
    #[error("invalid lease-etcd options: {0}")]
    InvalidOptions(String),
    /// Every machine ID under the prefix is leased (or blocked by a release guard).
    #[error(
        "all {count} machine ids under `{prefix}` are leased: wait for one to expire, or free a dead node's id",
        count = lease_core::MachineId::COUNT
    )]
    Exhausted {
        /// The key prefix.
        prefix: String,
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
        /// How etcd showed it.
        reason: LostReason,
    },
    /// The keep-alive and the proof of ownership of a renewal were answered in different Raft
    /// terms: the keep-alive may have reached a deposed leader, so the renewal is uncertain.
    #[error(
        "the leader changed during the renewal of machine id {id} (keep-alive in raft term {keep_alive_term}, ownership proof in term {proof_term}): try again"
    )]
    LeaderChanged {
        /// The leased ID.
        id: MachineId,
        /// The term of the keep-alive's answer.
        keep_alive_term: u64,
        /// The term of the ownership proof's answer.
        proof_term: u64,
    },
    /// This strategy saw the store go back in time (a lower revision than an earlier answer, or
    /// another cluster ID): it may have lost leases still in use, so acquisition holds off for
    /// the amnesia hold-off ([`EtcdOptions::amnesia_hold_off`](crate::EtcdOptions::amnesia_hold_off)).
    #[error(
        "the etcd store went back in time ({what}): it may have lost leases still in use, so acquisition waits {remaining:?} more, the longest lease and twice the largest clock offset (max_lease_s and max_clock_offset_s in the store url; see \"Amnesia\" in the lease-etcd docs)"
    )]
    StoreRewound {
        /// What was seen.
        what: String,
        /// How much longer acquisition holds off.
        remaining: Duration,
    },
    /// The prefix was found without its initialization marker (`<prefix>initialized`): it is
    /// new, or its keys were deleted while nodes ran. Acquisition holds off for the amnesia
    /// hold-off, recorded in the store as the key `<prefix>hold-off` on an etcd lease, unless an
    /// operator initializes the prefix ([`StoreAdmin::migrate`](lease_core::StoreAdmin::migrate)).
    #[error(
        "acquisition is held off for {remaining:?} more: the etcd prefix `{prefix}` was found without its initialization marker `{prefix}initialized`. Either the prefix is new, or its keys were deleted while nodes ran (etcdctl del --prefix {prefix}, or a delete of lease and floor keys), and ids that running nodes still use look free. If the prefix is new, or every node using it is stopped, run `nononce leases migrate --store etcd://HOST:PORT{prefix}` once (StoreAdmin::migrate); otherwise wait: the hold-off (`{prefix}hold-off`) lasts the longest lease and twice the largest clock offset (max_lease_s and max_clock_offset_s in the store url), past every lease of the deleted keys"
    )]
    NotInitialized {
        /// The key prefix.
        prefix: String,
        /// How much longer acquisition holds off.
        remaining: Duration,
    },
    /// The only free IDs have a timestamp floor key holding something other than 20-digit
    /// decimal Unix ms: nobody can say which timestamps were issued under them, so an acquire
    /// does not claim them, and a renewal cannot raise the floor.
    #[error(
        "machine id {id}'s floor key `{key}` holds {value:?}, not 20-digit decimal unix ms: set it (etcdctl put {key} <unix ms, 20 digits with leading zeros>) to a time no earlier than any timestamp issued under the id, for example now plus the lease duration"
    )]
    UnreadableFloor {
        /// The floor key.
        key: String,
        /// The machine ID.
        id: MachineId,
        /// What the key holds (lossy UTF-8).
        value: String,
    },
    /// A request did not answer in time: its outcome is unknown.
    #[error("etcd {operation} did not answer within {timeout:?}")]
    Timeout {
        /// The request.
        operation: &'static str,
        /// The request timeout.
        timeout: Duration,
    },
    /// etcd answered something this strategy does not understand.
    #[error("unexpected answer to etcd {operation}: {reply}")]
    UnexpectedReply {
        /// The request.
        operation: &'static str,
        /// What came back.
        reply: String,
    },
    /// A request failed; [`LeaseError::kind`] says whether to retry.
    #[error("etcd {operation} failed")]
    Request {
        /// The request.
        operation: &'static str,
        /// The client's error.
        #[source]
        source: etcd_client::Error,
    },
}

impl EtcdLeaseError {
    pub(crate) const fn request(operation: &'static str, source: etcd_client::Error) -> Self {
        Self::Request { operation, source }
    }

    pub(crate) fn unexpected(operation: &'static str, reply: impl Into<String>) -> Self {
        Self::UnexpectedReply {
            operation,
            reply: reply.into(),
        }
    }
}

impl LeaseError for EtcdLeaseError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidUrl(_) | Self::InvalidOptions(_) => ErrorKind::Misconfigured,
            Self::Exhausted { .. } => ErrorKind::Exhausted,
            Self::Conflict { .. } => ErrorKind::Conflict,
            Self::Lost { .. } => ErrorKind::Lost,
            Self::LeaderChanged { .. }
            | Self::StoreRewound { .. }
            | Self::NotInitialized { .. }
            | Self::Timeout { .. } => ErrorKind::Retry,
            Self::UnreadableFloor { .. } | Self::UnexpectedReply { .. } => ErrorKind::Other,
            Self::Request { source, .. } => classify(source),
        }
    }
}

/// The kind of an `etcd-client` error.
pub(crate) fn classify(error: &etcd_client::Error) -> ErrorKind {
    use etcd_client::Error as E;
    match error {
        E::GRpcStatus(status) => classify_status(status),
        // Connection refused or dropped, a stream closed before its answer: uncertain.
        E::TransportError(_) | E::IoError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => {
            ErrorKind::Retry
        }
        // A bad endpoint URL, an https:// endpoint without TLS support, credentials that are
        // no valid header value.
        E::InvalidArgs(_) | E::InvalidUri(_) | E::InvalidMetadataValue(_) | E::EndpointError(_) => {
            ErrorKind::Misconfigured
        }
        _ => ErrorKind::Other,
    }
}

/// The kind of a gRPC status from etcd (see etcd's `api/v3rpc/rpctypes`).
pub(crate) fn classify_status(status: &tonic::Status) -> ErrorKind {
    use tonic::Code as C;
    let message = status.message();
    match status.code() {
        // "no leader", "leader changed", "request timed out", "too many requests", a dropped
        // connection, a cancelled stream: the request may or may not have been applied.
        C::Unavailable | C::DeadlineExceeded | C::Cancelled | C::Aborted | C::Unknown => {
            ErrorKind::Retry
        }
        // "mvcc: database space exceeded" needs an operator (compact, defragment, disarm).
        C::ResourceExhausted if message.contains("space exceeded") => ErrorKind::Other,
        C::ResourceExhausted => ErrorKind::Retry,
        // "permission denied" (the user's role lacks the prefix), "invalid auth token",
        // "user name not found", "authentication failed", "authentication is not enabled".
        C::PermissionDenied | C::Unauthenticated => ErrorKind::Misconfigured,
        C::InvalidArgument | C::FailedPrecondition
            if message.contains("authentication") || message.contains("user name") =>
        {
            ErrorKind::Misconfigured
        }
        C::Unimplemented => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::{Code, Status};

    #[test]
    fn grpc_codes_map_onto_kinds() {
        use ErrorKind::{Misconfigured, Other, Retry, Unsupported};
        let kind = |code, message| classify_status(&Status::new(code, message));
        for (expected, cases) in [
            (
                Retry,
                &[
                    (Code::Unavailable, "etcdserver: no leader"),
                    (Code::Unavailable, "etcdserver: leader changed"),
                    (Code::DeadlineExceeded, "context deadline exceeded"),
                    (Code::ResourceExhausted, "etcdserver: too many requests"),
                ][..],
            ),
            (
                Misconfigured,
                &[
                    (Code::PermissionDenied, "etcdserver: permission denied"),
                    (Code::Unauthenticated, "etcdserver: invalid auth token"),
                    (
                        Code::InvalidArgument,
                        "etcdserver: authentication failed, invalid user ID or password",
                    ),
                    (
                        Code::FailedPrecondition,
                        "etcdserver: authentication is not enabled",
                    ),
                ],
            ),
            (
                Other,
                &[
                    (
                        Code::ResourceExhausted,
                        "etcdserver: mvcc: database space exceeded",
                    ),
                    (Code::InvalidArgument, "etcdserver: request is too large"),
                    (Code::NotFound, "etcdserver: requested lease not found"),
                ],
            ),
            (Unsupported, &[(Code::Unimplemented, "unknown method")]),
        ] {
            for &(code, message) in cases {
                assert_eq!(kind(code, message), expected, "{message}");
            }
        }
    }

    #[test]
    fn client_errors_map_onto_kinds() {
        let e = etcd_client::Error::InvalidArgs("empty endpoints".into());
        assert_eq!(classify(&e), ErrorKind::Misconfigured);
        let e = etcd_client::Error::LeaseKeepAliveError("channel closed".into());
        assert_eq!(classify(&e), ErrorKind::Retry);
        let e = etcd_client::Error::IoError(std::io::Error::other("reset"));
        assert_eq!(classify(&e), ErrorKind::Retry);
        let e = EtcdLeaseError::Timeout {
            operation: "txn",
            timeout: Duration::from_secs(1),
        };
        assert_eq!(e.kind(), ErrorKind::Retry);
    }
}
