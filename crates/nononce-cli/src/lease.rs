//! How `gen` holds a lease: short and renewed (a killed process leaks its ID for minutes, not
//! hours), waiting a bounded time with a progress line, and failing at once, in the CLI's own
//! words, when waiting cannot help.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nononce::lease::{
    Access, Acquire, AcquireError, AnyLease, DynError, ErrorKind, Failure, Grant, LeaseError,
    LeaseManager, LeaseTarget, LeaseTerms, Profile, Release, Renew, Renewal, StartError,
    error_chain,
};
use nononce::nonce::MachineId;
use nononce::{BoxStrategy, FactoryClock, FactoryOptions, LeaseConfig, Strategy};

use crate::output::Exit;
use crate::store::{Store, StoreInfo};
use crate::store_arg::ChosenStore;

/// How long `gen` waits for its first lease.
pub const ACQUIRE_WAIT: Duration = Duration::from_secs(10);

/// The lease timing of `gen`: a 2-minute lease renewed every 30 s, the library's margins and
/// release guard (10 s), and a 10 s wait for the first lease.
pub fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(120))
        .with_renew_interval(Duration::from_secs(30))
        .with_acquire_timeout(Some(ACQUIRE_WAIT))
}

/// What the acquisitions went through, for the progress line and the final message.
#[derive(Debug, Default)]
pub struct Log {
    attempts: u32,
    /// The last failure: its text as the lease manager saw it, and as the CLI says it.
    last: Option<(String, String)>,
    /// Whether the last failure was every ID held.
    exhausted: bool,
    /// The last progress line shown.
    shown: Option<String>,
    /// How the release at shutdown went: `Err` with the reason in the CLI's words.
    released: Option<Result<(), String>>,
}

impl Log {
    /// How the release at shutdown went; `None` when there was no lease to release. `serve`
    /// reports it for each kind; `gen` has one lease and says nothing more on success.
    #[cfg(feature = "serve")]
    pub fn released(&self) -> Option<&Result<(), String>> {
        self.released.as_ref()
    }
}

/// The lease a [`Watched`] strategy holds, for what it says while the lease is renewed.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    id: Option<MachineId>,
    /// When the lease runs out at the latest: the request that got or renewed it, plus the
    /// time granted.
    until: Option<Instant>,
}

/// A strategy that reports every failed acquisition (a progress line on stderr unless quiet),
/// turns failures waiting cannot cure within [`ACQUIRE_WAIT`] into immediate ones, keeps the
/// original errors for the final message, and says at once, on stderr, each renewal that
/// failed: the store silent or refusing (with the time the lease has left), or the lease gone.
pub struct Watched {
    inner: BoxStrategy,
    store: StoreInfo,
    /// What the lease is for: `gen`, `lease` (a command), or the kind `serve` serves on it.
    name: String,
    log: Arc<Mutex<Log>>,
    held: Mutex<Held>,
    quiet: bool,
    began: Instant,
}

impl Watched {
    pub fn new(inner: BoxStrategy, store: StoreInfo, name: &str, quiet: bool) -> Self {
        Self {
            inner,
            store,
            name: name.to_owned(),
            log: Arc::default(),
            held: Mutex::default(),
            quiet,
            began: Instant::now(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The machine ID held, as the messages name it: with the kind it serves under `serve`.
    fn subject(&self) -> String {
        let id = self
            .held()
            .id
            .map_or_else(|| "?".to_owned(), |id| id.get().to_string());
        if self.name == "gen" || self.name == LEASE {
            format!("machine id {id}")
        } else {
            format!("machine id {id} ({})", self.name)
        }
    }

    /// Says, at once, that a renewal failed: the lease gone, or this renewal lost with the time
    /// the lease has left. Not hidden by `--quiet`: generation is about to stop.
    fn renewal_failed(&self, error: &DynError) {
        let subject = self.subject();
        let stops = if self.name == LEASE {
            "the command is stopped"
        } else {
            "generation stops"
        };
        let cause = self.store.describe(error).text;
        let line = if error.kind() == ErrorKind::Lost {
            format!(
                "{subject} is no longer this process's: it was freed (`nononce leases release`) or taken over after its lease ran out ({cause}); {stops}"
            )
        } else {
            let left = self.held().until.map_or(Duration::ZERO, |until| {
                until.saturating_duration_since(Instant::now())
            });
            format!(
                "warning: renewing the lease of {subject} failed: {cause}; it runs out in {} s, and {stops} before then unless a renewal gets through",
                left.as_secs()
            )
        };
        crate::output::say(&line);
    }

    /// The log, to read once `start` has failed.
    pub fn log(&self) -> Arc<Mutex<Log>> {
        Arc::clone(&self.log)
    }

    fn failed(&self, error: DynError) -> WatchedError {
        let mut kind = error.kind();
        let left = ACQUIRE_WAIT.saturating_sub(self.began.elapsed());
        let said = self.store.describe(&error);
        if let Some(remaining) = said.hold_off
            && kind.is_retryable()
            && remaining > left
        {
            // Waiting cannot help: say so now.
            kind = ErrorKind::Misconfigured;
        }
        let text = said.text;
        let error = WatchedError { kind, error };
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.attempts += 1;
        // The reason as the lease manager will quote it, to recognise it at the end.
        log.last = Some((Failure::from_error(&error).reason, text.clone()));
        log.exhausted = kind == ErrorKind::Exhausted;
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

    async fn acquire(&self, request: Acquire) -> Result<Grant<AnyLease>, WatchedError> {
        let sent = Instant::now();
        let grant = self
            .inner
            .acquire(request)
            .await
            .map_err(|e| self.failed(e))?;
        *self.held() = Held {
            id: Some(grant.machine_id),
            until: Some(sent + grant.ttl),
        };
        Ok(grant)
    }

    async fn renew(
        &self,
        lease: &AnyLease,
        request: Renew,
    ) -> Result<Renewal<AnyLease>, WatchedError> {
        let sent = Instant::now();
        match self.inner.renew(lease, request).await {
            Ok(renewal) => {
                self.held().until = Some(sent + renewal.ttl);
                Ok(renewal)
            }
            Err(error) => {
                self.renewal_failed(&error);
                Err(error.into())
            }
        }
    }

    // The manager's request as it is: its floor bounds what the factories issued.
    // The outcome is kept: `serve` says on exit which IDs it gave back.
    async fn release(&self, lease: &AnyLease, request: Release) -> Result<(), WatchedError> {
        let result = self.inner.release(lease, request).await;
        let said = result
            .as_ref()
            .copied()
            .map_err(|e| self.store.describe(e).text);
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .released = Some(said);
        Ok(result?)
    }

    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), WatchedError> {
        Ok(self.inner.check_terms(terms)?)
    }

    fn profile(&self) -> Profile {
        self.inner.profile()
    }
}

/// Why `start` failed, in one line.
pub fn start_error(error: &nononce::Error, log: &Mutex<Log>, store: &StoreInfo) -> String {
    let log = log.lock().unwrap_or_else(PoisonError::into_inner);
    let described = |reason: &str| match &log.last {
        Some((raw, text)) if raw == reason => text.clone(),
        _ if reason.starts_with("timed out after") => {
            format!(
                "{} did not answer: the last request {reason}",
                store.shown()
            )
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
            let s = if *attempts == 1 { "" } else { "s" };
            // Every ID held may mean gens that just ended: each blocks its ID for the release
            // guard after it, which a loop of one-shot gens runs into.
            let guard = if log.exhausted {
                format!(
                    "; an ID a gen gave back stays blocked for {} s after it: run a loop of gens under one `nononce lease -- ...`, which leases one ID for all of them",
                    config().release_guard().as_secs()
                )
            } else {
                String::new()
            };
            format!(
                "no machine id within {} s ({attempts} attempt{s}): {why}{guard}",
                ACQUIRE_WAIT.as_secs()
            )
        }
        nononce::Error::Lease(StartError::Acquire(AcquireError::Fatal(failure))) => {
            described(&failure.reason)
        }
        other => error_chain(other),
    }
}

/// What `nononce lease` names its lease for [`Watched`]: the messages then speak of the
/// command it runs, not of generation.
pub const LEASE: &str = "lease";

/// The store at `url` opened for leasing, watched for what the CLI says about it, with the
/// lease timing of `gen`.
async fn open_watched(
    store: &ChosenStore,
    name: &str,
    quiet: bool,
) -> Result<(Watched, StoreInfo, LeaseConfig), Exit> {
    let mut config = crate::lease::config();
    let store = Store::open(store, Access::Lease, config.terms()).await?;
    let (strategy, info) = store.into_strategy();
    if nononce::Strategy::profile(&strategy).deterministic {
        // A static store's first grant comes a margin after it is asked for (no predecessor's
        // nonces to start above): the wait for it is that much longer.
        let longer = config.acquire_timeout().map(|t| t + config.margin());
        config = config.with_acquire_timeout(longer);
    }
    let watched = Watched::new(strategy, info.clone(), name, quiet);
    Ok((watched, info, config))
}

/// Leases a machine ID on `store` for one factory, `name`, waiting as `gen` does;
/// with the log of what the lease went through.
///
/// `lost`, when given, is set the moment the lease is lost (the factory is off by then): `gen`
/// stops there, where the manager would lease another ID and `serve` goes on with it.
pub async fn start_lease(
    store: &ChosenStore,
    name: &str,
    options: FactoryOptions,
    quiet: bool,
    lost: Option<Arc<std::sync::atomic::AtomicBool>>,
) -> Result<(nononce::Nononce<Watched>, Arc<Mutex<Log>>), Exit> {
    let (watched, info, config) = open_watched(store, name, quiet).await?;
    let log = watched.log();
    let mut builder = nononce::Nononce::builder(watched)
        .with_factory(name, options)
        .with_lease_config(config);
    if let Some(lost) = lost {
        builder = builder.with_on_lease_lost(move |_| {
            lost.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    builder
        .start()
        .await
        .map(|nononce| (nononce, Arc::clone(&log)))
        .map_err(|e| Exit::Fail(start_error(&e, &log, &info)))
}

/// Leases a machine ID on `store` for `target`, on `clock`, waiting as `gen` does:
/// `nononce lease`'s lease.
pub async fn start_manager(
    store: &ChosenStore,
    target: Arc<dyn LeaseTarget>,
    clock: FactoryClock,
    quiet: bool,
) -> Result<LeaseManager<Watched>, Exit> {
    let (watched, info, config) = open_watched(store, LEASE, quiet).await?;
    let log = watched.log();
    LeaseManager::builder(watched)
        .with_config(config)
        .with_clock(clock)
        .with_target(target)
        .start()
        .await
        .map_err(|e| Exit::Fail(start_error(&nononce::Error::Lease(e), &log, &info)))
}
