//! How `gen` holds a lease: short and renewed (a killed process leaks its ID for minutes, not
//! hours), waiting a bounded time with a progress line, and failing at once, in the CLI's own
//! words, when waiting cannot help.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nononce::lease::{
    AcquireError, AnyLease, DynError, ErrorKind, Failure, Grant, LeaseError, Renewal, StartError,
    error_chain_with,
};
use nononce::{BoxStrategy, LeaseConfig, MachineId, Strategy};

use crate::store::StoreInfo;

/// How long `gen` waits for its first lease.
pub const ACQUIRE_WAIT: Duration = Duration::from_secs(10);
/// The lease `gen` asks for; renewed every [`RENEW_INTERVAL`] while it runs.
pub const LEASE_DURATION: Duration = Duration::from_secs(120);
/// The longest time between renewals.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(30);

/// The lease timing of `gen`: a 2-minute lease renewed every 30 s, the library's margins and
/// release guard (10 s), and a 10 s wait for the first lease.
pub fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_lease_duration(LEASE_DURATION)
        .with_renew_interval(RENEW_INTERVAL)
        .with_acquire_timeout(Some(ACQUIRE_WAIT))
}

/// What the acquisitions went through, for the progress line and the final message.
#[derive(Debug, Default)]
pub struct Log {
    attempts: u32,
    /// The last failure: its text as the lease manager saw it, and as the CLI says it.
    last: Option<(String, String)>,
    /// The last progress line shown.
    shown: Option<String>,
}

/// A strategy that reports every failed acquisition (a progress line on stderr unless quiet),
/// turns failures waiting cannot cure within [`ACQUIRE_WAIT`] into immediate ones, and keeps
/// the original errors for the final message.
pub struct Watched {
    inner: BoxStrategy,
    store: StoreInfo,
    log: Arc<Mutex<Log>>,
    quiet: bool,
    began: Instant,
}

impl Watched {
    pub fn new(inner: BoxStrategy, store: StoreInfo, quiet: bool) -> Self {
        Self {
            inner,
            store,
            log: Arc::default(),
            quiet,
            began: Instant::now(),
        }
    }

    /// The log, to read once `start` has failed.
    pub fn log(&self) -> Arc<Mutex<Log>> {
        Arc::clone(&self.log)
    }

    fn failed(&self, error: DynError) -> WatchedError {
        let mut kind = error.kind();
        let left = ACQUIRE_WAIT.saturating_sub(self.began.elapsed());
        let mut text = describe(&error, &self.store);
        if !text.contains(&self.store.shown) {
            text = format!("{}: {text}", self.store.shown);
        }
        if let Some(hold_off) = hold_off(&error, &self.store)
            && kind.is_retryable()
        {
            if hold_off.remaining > left {
                // Waiting cannot help: say so now.
                kind = ErrorKind::Misconfigured;
            }
            text = hold_off.message;
        }
        let error = WatchedError { kind, error };
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.attempts += 1;
        // The reason as the lease manager will quote it, to recognise it at the end.
        log.last = Some((Failure::from_error(&error).reason, text.clone()));
        if kind.is_retryable() && !self.quiet && log.shown.as_deref() != Some(&text) {
            crate::output::say(&format!(
                "waiting up to {} s for a machine id: {text}",
                ACQUIRE_WAIT.as_secs()
            ));
            log.shown = Some(text);
        }
        error
    }
}

/// A strategy error with the kind the CLI gives it.
#[derive(Debug)]
pub struct WatchedError {
    kind: ErrorKind,
    error: DynError,
}

impl std::fmt::Display for WatchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for WatchedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl LeaseError for WatchedError {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl From<DynError> for WatchedError {
    fn from(error: DynError) -> Self {
        Self {
            kind: error.kind(),
            error,
        }
    }
}

impl Strategy for Watched {
    type Lease = AnyLease;
    type Error = WatchedError;

    async fn acquire(&self, requested: Duration) -> Result<Grant<AnyLease>, WatchedError> {
        self.acquire_with_floor(requested, 0, 0).await
    }

    async fn renew(
        &self,
        lease: &AnyLease,
        requested: Duration,
    ) -> Result<Renewal<AnyLease>, WatchedError> {
        self.renew_with_floor(lease, requested, 0).await
    }

    // Not `release_with_floor(.., 0)`: a backend stores a floor of 0 as given.
    async fn release(&self, lease: &AnyLease, guard: Duration) -> Result<(), WatchedError> {
        Ok(self.inner.release(lease, guard).await?)
    }

    fn records_floor(&self) -> bool {
        self.inner.records_floor()
    }

    async fn acquire_with_floor(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> Result<Grant<AnyLease>, WatchedError> {
        self.inner
            .acquire_with_floor(requested, now_ms, floor_ms)
            .await
            .map_err(|e| self.failed(e))
    }

    async fn renew_with_floor(
        &self,
        lease: &AnyLease,
        requested: Duration,
        floor_ms: u64,
    ) -> Result<Renewal<AnyLease>, WatchedError> {
        Ok(self
            .inner
            .renew_with_floor(lease, requested, floor_ms)
            .await?)
    }

    async fn release_with_floor(
        &self,
        lease: &AnyLease,
        guard: Duration,
        floor_ms: u64,
    ) -> Result<(), WatchedError> {
        Ok(self
            .inner
            .release_with_floor(lease, guard, floor_ms)
            .await?)
    }

    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// Why `start` failed, in one line.
pub fn start_error(error: &nononce::Error, log: &Mutex<Log>, store: &StoreInfo) -> String {
    let log = log.lock().unwrap_or_else(PoisonError::into_inner);
    let described = |reason: &str| match &log.last {
        Some((raw, text)) if raw == reason => text.clone(),
        _ if reason.starts_with("timed out after") => {
            format!("{} did not answer: the last request {reason}", store.shown)
        }
        _ => reason.to_owned(),
    };
    match error {
        nononce::Error::Lease(StartError::Acquire(AcquireError::Timeout {
            attempts,
            last_error,
            ..
        })) => {
            let why = last_error.as_ref().map_or_else(
                || "no answer from the store".to_owned(),
                |f| described(&f.reason),
            );
            let attempts = if *attempts == 1 {
                "1 attempt".to_owned()
            } else {
                format!("{attempts} attempts")
            };
            format!(
                "no machine id within {} s ({attempts}): {why}",
                ACQUIRE_WAIT.as_secs()
            )
        }
        nononce::Error::Lease(StartError::Acquire(AcquireError::Fatal(failure))) => {
            described(&failure.reason)
        }
        other => chain(other),
    }
}

/// A hold-off of the amnesia guard: how long, and what to say about it.
struct HoldOff {
    remaining: Duration,
    message: String,
}

fn hold_off(error: &DynError, store: &StoreInfo) -> Option<HoldOff> {
    use nononce::etcd::EtcdLeaseError;
    use nononce::redis::RedisLeaseError;
    use nononce::sql::SqlLeaseError;
    let inner: &(dyn std::error::Error + 'static) = error.inner();
    if let Some(EtcdLeaseError::StoreRewound { what, remaining }) =
        inner.downcast_ref::<EtcdLeaseError>()
    {
        // etcd keeps every acknowledged write: there is no guard to turn off, only the
        // longest lease to shorten.
        return Some(held_off(
            store,
            *remaining,
            format!(
                "the etcd store went back in time ({what}: a snapshot restore, or a member started on an empty data directory), so it may lack leases still in use; max_lease_s=SECONDS (the longest lease any node of this store holds; nononce gen holds {} s) and max_clock_offset_s=SECONDS (the largest offset of a node's clock from the others'; 3600 by default) shorten the hold-off",
                LEASE_DURATION.as_secs()
            ),
        ));
    }
    if let Some(EtcdLeaseError::NotInitialized { prefix, remaining }) =
        inner.downcast_ref::<EtcdLeaseError>()
    {
        return Some(held_off(
            store,
            *remaining,
            format!(
                "the etcd prefix `{prefix}` has no initialization marker (`{prefix}initialized`), so either the prefix is new or its keys were deleted while nodes ran (etcdctl del --prefix) and a node may still use any machine id it held. If the prefix is new, or every node using it is stopped, run `nononce leases migrate --store '{}'` once; otherwise wait",
                store.url
            ),
        ));
    }
    if let Some(SqlLeaseError::RowsDeleted {
        table,
        blocked,
        remaining,
    }) = inner.downcast_ref::<SqlLeaseError>()
    {
        return Some(held_off(
            store,
            *remaining,
            format!(
                "{blocked} machine ids had vanished from lease table `{table}` although it had been seeded (TRUNCATE or DELETE while the database stayed up), so running nodes may still use them; they are back, blocked until then. Wait, or free one with `nononce leases release --store '{}' --id N --yes`: at once, on a floor at the end of its block (64-bit counter and sortable nonces wait for the clock to pass it). Never TRUNCATE or DELETE the lease table while nodes run",
                store.url
            ),
        ));
    }
    if let Some(RedisLeaseError::LeaseDataMissing { key, remaining }) =
        inner.downcast_ref::<RedisLeaseError>()
    {
        // No guard to turn off and no option to shorten it with: the store must be initialized
        // once, or the wait is the only safe thing.
        return Some(held_off(
            store,
            *remaining,
            format!(
                "hash `{key}` has no initialization marker (field `open_at`), so either the store is new or it lost its lease data while the server stayed up (FLUSHALL, FLUSHDB, DEL, eviction) and a node may still use any machine id it held. If the store is new, or every node using it is stopped, run `nononce leases migrate --store '{}'` once; otherwise wait",
                store.url
            ),
        ));
    }
    let (remaining, why) = match inner.downcast_ref::<RedisLeaseError>() {
        Some(RedisLeaseError::AmnesiaWindow {
            uptime, hold_off, ..
        }) => (
            remaining(error)?,
            format!(
                "the server has been up for only {}, less than the amnesia hold-off ({}: the longest lease and twice the largest clock offset), so it may have forgotten leases still in use",
                human(*uptime),
                human(*hold_off)
            ),
        ),
        Some(RedisLeaseError::ServerChanged { .. }) => (
            remaining(error)?,
            "the server changed (restart or failover), so it may have missed leases still in use"
                .to_owned(),
        ),
        _ => match inner.downcast_ref::<SqlLeaseError>() {
            Some(SqlLeaseError::ServerChanged { .. }) => (
                remaining(error)?,
                "the database server is not the one that granted the leases (failover or restore), so it may lack leases still in use".to_owned(),
            ),
            _ => return None,
        },
    };
    Some(held_off(
        store,
        remaining,
        format!(
            "{why}. If the server keeps every acknowledged write (Redis: appendonly yes, appendfsync always; SQL: synchronous replication), add amnesia_guard=off to the store URL; max_lease_s=SECONDS (the longest lease any node of this store holds; nononce gen holds {} s) and max_clock_offset_s=SECONDS (the largest offset of a node's clock from the server's; 3600 by default) shorten the hold-off",
            LEASE_DURATION.as_secs()
        ),
    ))
}

/// A hold-off of `remaining` on `store`, for the reason `why` (a clause).
fn held_off(store: &StoreInfo, remaining: Duration, why: String) -> HoldOff {
    HoldOff {
        remaining,
        message: format!(
            "{} holds new leases off for {} more: {why}",
            store.shown,
            human(remaining)
        ),
    }
}

/// The hold-off left, from whichever error carries it.
fn remaining(error: &DynError) -> Option<Duration> {
    use nononce::redis::RedisLeaseError;
    use nononce::sql::SqlLeaseError;
    let inner: &(dyn std::error::Error + 'static) = error.inner();
    match inner.downcast_ref::<RedisLeaseError>() {
        Some(
            RedisLeaseError::AmnesiaWindow { remaining, .. }
            | RedisLeaseError::ServerChanged { remaining, .. },
        ) => Some(*remaining),
        _ => match inner.downcast_ref::<SqlLeaseError>() {
            Some(SqlLeaseError::ServerChanged { remaining, .. }) => Some(*remaining),
            _ => None,
        },
    }
}

/// A duration as hours, minutes and seconds.
pub fn human(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s} s"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

/// A store error in one line, with the CLI's remedies.
pub fn describe(error: &(dyn std::error::Error + 'static), store: &StoreInfo) -> String {
    use nononce::redis::RedisLeaseError;
    use nononce::sql::SqlLeaseError;
    if let Some(e) = error.downcast_ref::<DynError>() {
        return describe(e.inner(), store);
    }
    if let Some(e) = error.downcast_ref::<WatchedError>() {
        return describe(&e.error, store);
    }
    if let Some(e) = error.downcast_ref::<SqlLeaseError>() {
        let cause = || std::error::Error::source(e).map(chain);
        return match e {
            SqlLeaseError::Exhausted { table } => {
                exhausted(&format!("lease table `{table}`"), store)
            }
            SqlLeaseError::WrongSchema { table, .. } => format!(
                "lease table `{table}` in {} does not have the expected columns: run `nononce leases migrate --store '{}'`, which adds floor_ms to a table made by NoNoncense or an older nononce; otherwise point the store URL at the right table (?table=NAME)",
                store.shown, store.url
            ),
            SqlLeaseError::MissingTable { table, .. } => format!(
                "table `{table}` does not exist in {}: create it with `nononce leases migrate --store '{}'`",
                store.shown, store.url
            ),
            SqlLeaseError::Connection(_) | SqlLeaseError::PermissionDenied { .. }
                if store.sqlite.is_some() =>
            {
                let path = store.sqlite.as_deref().unwrap_or(std::path::Path::new(""));
                let dir = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
                    _ => ".".to_owned(),
                };
                format!(
                    "cannot use the SQLite file {}: {}: check that the directory {dir} exists and is writable (SQLite also writes -wal and -shm files beside the database)",
                    path.display(),
                    cause().unwrap_or_else(|| e.to_string())
                )
            }
            SqlLeaseError::Unavailable(_) => format!(
                "{} did not answer or dropped the connection: {}",
                store.shown,
                cause().unwrap_or_default()
            ),
            SqlLeaseError::Connection(_) => format!(
                "{} refused the connection: {}: check the user, password, database name and tls options in the store URL",
                store.shown,
                cause().unwrap_or_default()
            ),
            _ => chain(e),
        };
    }
    if let Some(e) = error.downcast_ref::<nononce::etcd::EtcdLeaseError>() {
        return describe_etcd(e, store);
    }
    match error.downcast_ref::<RedisLeaseError>() {
        Some(RedisLeaseError::InvalidUrl(source)) => {
            return format!(
                "invalid redis url: {}: use redis://[user:password@]host:port[/db], or rediss://... for TLS",
                chain(source)
            );
        }
        Some(RedisLeaseError::Exhausted { key }) => {
            return exhausted(&format!("hash `{key}`"), store);
        }
        _ => {}
    }
    chain(error)
}

/// An etcd store error in one line, with the CLI's remedies.
fn describe_etcd(e: &nononce::etcd::EtcdLeaseError, store: &StoreInfo) -> String {
    use nononce::etcd::EtcdLeaseError as E;
    use nononce::etcd::etcd_client::Error as Client;
    let shown = &store.shown;
    let prefix = store.etcd_prefix.as_deref().unwrap_or("/nononce/leases/");
    match e {
        E::Exhausted { prefix } => exhausted(&format!("prefix `{prefix}`"), store),
        E::InvalidUrl(why) if !why.contains("use etcd://") => format!(
            "{e}: use etcd://[user:password@]host:port[,host:port...][/prefix/][?max_lease_s=N&max_clock_offset_s=N], with %XX escapes in the user name, password and prefix"
        ),
        E::Timeout { .. } => format!(
            "{shown}: {e}: check that the endpoints are etcd client URLs (port 2379 by default) and the cluster has a leader"
        ),
        E::Request { operation, source } => {
            let cause = match source {
                // The status's message alone ("etcdserver: permission denied"), not its
                // metadata.
                Client::GRpcStatus(status) if !status.message().is_empty() => {
                    status.message().to_owned()
                }
                other => chain(other),
            };
            let text = if cause.contains("etcd") {
                cause.clone()
            } else {
                format!("etcd {operation} failed: {cause}")
            };
            if cause.contains("authentication is not enabled") {
                format!(
                    "{shown}: {text}: remove user:password@ from the store URL, or turn authentication on in the cluster"
                )
            } else if cause.contains("authentication failed")
                || cause.contains("user name")
                || cause.contains("invalid auth token")
            {
                format!(
                    "{shown} refused the credentials: {text}: check the user and password in the store URL"
                )
            } else if cause.contains("permission denied") {
                format!(
                    "{shown}: {text}: the user's role needs readwrite on the prefix `{prefix}` (etcdctl role grant-permission ROLE readwrite {prefix} --prefix=true)"
                )
            } else if cause.contains("space exceeded") {
                format!(
                    "{shown}: {text}: the etcd database is full: compact and defragment it, then disarm the alarm (etcdctl alarm disarm)"
                )
            } else if nononce::lease::LeaseError::kind(e).is_retryable() {
                format!(
                    "{shown} did not answer or dropped the connection: {text}: check that the endpoints are etcd client URLs (port 2379 by default) and the cluster has a leader"
                )
            } else {
                format!("{shown}: {text}")
            }
        }
        _ => chain(e),
    }
}

fn exhausted(what: &str, store: &StoreInfo) -> String {
    format!(
        "all {} machine ids in {what} of {} are leased: wait for one to expire, see the holders with `nononce leases list --store '{}'`, or free a dead node's id with `nononce leases release`",
        MachineId::COUNT,
        store.shown,
        store.url
    )
}

/// An error and its sources on one line, each cause once; database errors by their message
/// alone (without PostgreSQL's source line).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    error_chain_with(e, |error| {
        match error.downcast_ref::<nononce::sql::sqlx::Error>() {
            Some(nononce::sql::sqlx::Error::Database(db)) => Some(db.message().to_owned()),
            _ => None,
        }
    })
}
