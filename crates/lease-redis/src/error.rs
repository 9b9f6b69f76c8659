//! What can go wrong, mapped onto [`lease_core::ErrorKind`].

use std::time::Duration;

use lease_core::{ErrorKind, LeaseError, MachineId};

/// A failure of the Redis/Valkey lease strategy. [`LeaseError::kind`] tells the lease manager
/// what to do with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisLeaseError {
    /// The URL could not be parsed, or names a scheme this build cannot serve.
    #[error(
        "invalid redis url: use redis://[user:password@]host:port[/db], or rediss://... with the `tls-rustls` feature"
    )]
    InvalidUrl(#[source] redis::RedisError),
    /// An option is out of range.
    #[error("invalid lease-redis options: {0}")]
    InvalidOptions(String),
    /// The server has no `HSETEX` (Redis 7, Valkey 8).
    #[error(
        "the server does not support HSETEX: lease-redis needs Redis 8.0 or later, or Valkey 9.0 or later; upgrade the server"
    )]
    Unsupported(#[source] redis::RedisError),
    /// The lease key holds something other than a hash.
    #[error("key `{key}` is not a hash: give the leases a key of their own")]
    WrongType {
        /// The lease hash key.
        key: String,
        /// The server's answer.
        #[source]
        source: redis::RedisError,
    },
    /// Every machine ID is leased.
    #[error(
        "all {count} machine ids in hash `{key}` are leased: wait for one to expire, or free a dead node's id",
        count = lease_core::MachineId::COUNT
    )]
    Exhausted {
        /// The lease hash key.
        key: String,
    },
    /// Other nodes claimed the chosen free ID first, `attempts` times in a row.
    #[error("lost the race for a free machine id {attempts} times in a row: try again")]
    Conflict {
        /// How many claims were tried.
        attempts: u32,
    },
    /// The lease is no longer this holder's: its ownership marker is gone.
    #[error(
        "lease on machine id {id} is gone (expired, taken over, or forgotten by a restarted server): stop using the id and acquire a new one"
    )]
    Lost {
        /// The machine ID that was leased.
        id: MachineId,
    },
    /// The server started too recently to be trusted: it may have forgotten leases that
    /// running nodes still use.
    #[error(
        "the server has been up for only {uptime:?}, less than the amnesia hold-off ({hold_off:?}: the longest lease and twice the largest clock offset): it may have forgotten leases still in use, so acquisition waits {remaining:?} more (see the amnesia guard in the lease-redis docs)"
    )]
    AmnesiaWindow {
        /// How long the server has been up.
        uptime: Duration,
        /// The hold-off: [`RedisOptions::amnesia_hold_off`](crate::RedisOptions::amnesia_hold_off).
        hold_off: Duration,
        /// How much longer acquisition holds off.
        remaining: Duration,
    },
    /// This strategy saw a different server behind the same address (failover or restart).
    #[error(
        "the server changed (run id {previous} is now {current}): it may have missed leases still in use, so acquisition waits {remaining:?} more (see the amnesia guard in the lease-redis docs)"
    )]
    ServerChanged {
        /// The run ID seen before.
        previous: String,
        /// The run ID seen now.
        current: String,
        /// How much longer acquisition holds off.
        remaining: Duration,
    },
    /// The lease hash has no initialization marker (field `open_at`), or one whose time has not
    /// come: the store is new, or it lost its lease data while the server stayed up, and a node
    /// may still generate with an ID it held.
    #[error(
        "acquisition is held off for {remaining:?} more: hash `{key}` has no initialization marker (field `open_at`), so either the store is new or it lost its lease data while the server stayed up (FLUSHALL, FLUSHDB, DEL of the key, eviction), and a node may still generate with any id it held. If the store is new, or every node using it is stopped, run `nononce leases migrate --store <url>` once (in code: `StoreAdmin::migrate`); otherwise wait"
    )]
    LeaseDataMissing {
        /// The lease hash key.
        key: String,
        /// How much longer acquisition holds off, on the server's clock.
        remaining: Duration,
    },
    /// The server may evict any key under memory pressure, the lease hash with it.
    #[error(
        "the server's maxmemory-policy is {policy}: under memory pressure it may evict the lease hash `{key}`, and every lease and floor with it, so held machine ids would be handed out again. Set `maxmemory-policy noeviction` (CONFIG SET maxmemory-policy noeviction, and in the server's config file), or a volatile-* policy (those evict only keys with a TTL of their own, which the lease hash never has), or give the leases a server of their own"
    )]
    EvictionPolicy {
        /// The server's `maxmemory-policy`.
        policy: String,
        /// The lease hash key.
        key: String,
    },
    /// Fewer replicas than configured confirmed the write in time.
    #[error(
        "only {acknowledged} of {required} replicas confirmed the lease write within {timeout:?}: try again, and check replication"
    )]
    Replicas {
        /// Replicas that confirmed.
        acknowledged: i64,
        /// Replicas required.
        required: u32,
        /// How long the server waited.
        timeout: Duration,
    },
    /// The only free IDs have a timestamp floor field (`floor.<id>`) holding something other
    /// than canonical decimal Unix ms: nobody can say which timestamps were issued under them,
    /// so an acquire does not claim them.
    #[error(
        "machine id {id} in hash `{key}` is free but its floor field `floor.{id}` holds {value:?}, not decimal unix ms: set it (HSET {key} floor.{id} <unix ms>) to a time no earlier than any timestamp issued under the id, for example now plus the lease duration"
    )]
    UnreadableFloor {
        /// The lease hash key.
        key: String,
        /// The free ID.
        id: MachineId,
        /// What its floor field holds (lossy UTF-8).
        value: String,
    },
    /// The server answered something this strategy does not understand.
    #[error("unexpected reply to {command}: {reply}")]
    UnexpectedReply {
        /// The command.
        command: &'static str,
        /// What came back.
        reply: String,
    },
    /// A command failed; [`LeaseError::kind`] says whether to retry.
    #[error("redis command {command} failed")]
    Command {
        /// The command.
        command: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
}

impl RedisLeaseError {
    /// Classifies a failed command.
    pub(crate) fn command(command: &'static str, key: &str, source: redis::RedisError) -> Self {
        // A pipeline (the acquire's INFO and HGETALL) reports its commands' errors together:
        // classify by the first command that failed.
        let source = match source.clone().into_server_errors() {
            Some(errors) if !errors.is_empty() => redis::RedisError::from(errors[0].1.clone()),
            _ => source,
        };
        let detail = source.detail().unwrap_or_default().to_ascii_lowercase();
        // A server without a command: "unknown command" when sent directly (the operator
        // views' HPTTL), "Unknown Redis command called from script" from inside a Lua script
        // (the lease scripts' HSETEX).
        if source.code() == Some("ERR")
            && (detail.contains("unknown command")
                || (detail.contains("unknown") && detail.contains("command called from script")))
        {
            return Self::Unsupported(source);
        }
        if source.code() == Some("WRONGTYPE") {
            return Self::WrongType {
                key: key.to_owned(),
                source,
            };
        }
        Self::Command { command, source }
    }
}

impl LeaseError for RedisLeaseError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidUrl(_)
            | Self::InvalidOptions(_)
            | Self::WrongType { .. }
            | Self::EvictionPolicy { .. } => ErrorKind::Misconfigured,
            Self::Unsupported(_) => ErrorKind::Unsupported,
            Self::Exhausted { .. } => ErrorKind::Exhausted,
            Self::Conflict { .. } => ErrorKind::Conflict,
            Self::Lost { .. } => ErrorKind::Lost,
            Self::AmnesiaWindow { .. }
            | Self::ServerChanged { .. }
            | Self::LeaseDataMissing { .. }
            | Self::Replicas { .. } => ErrorKind::Retry,
            Self::UnexpectedReply { .. } | Self::UnreadableFloor { .. } => ErrorKind::Other,
            Self::Command { source, .. } => classify(source),
        }
    }
}

fn classify(error: &redis::RedisError) -> ErrorKind {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
    {
        return ErrorKind::Retry;
    }
    if matches!(error.code(), Some("NOAUTH" | "WRONGPASS")) {
        return ErrorKind::Misconfigured;
    }
    match error.kind() {
        K::AuthenticationFailed | K::InvalidClientConfig | K::Server(S::NoPerm) => {
            ErrorKind::Misconfigured
        }
        K::Io
        | K::Server(S::BusyLoading | S::TryAgain | S::MasterDown | S::ReadOnly | S::ClusterDown) => {
            ErrorKind::Retry
        }
        _ => ErrorKind::Other,
    }
}
