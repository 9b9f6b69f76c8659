//! The tokio driver: runs a [`LeaseMachine`] against a [`Strategy`] and keeps targets in step.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use nonce_core::{BootClock, Clock};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::backoff::{Backoff, Jitter};
use crate::cache::LeaseCache;
use crate::claims::{self, Claim};
use crate::machine::{
    AcquireError, Action, Effect, LeaseMachine, LeaseState, LossReason, Operation, Source,
};
use crate::target::LeaseTarget;
use crate::telemetry::{self, OpSpan};
use lease_core::time::millis;
use lease_core::{Acquire, ErrorKind, Release, Renew, Strategy};

use crate::{Failure, LeaseConfig, LeaseConfigError};
use nonce_core::MachineId;

/// Longest single sleep: tokio's timers may not count time spent suspended, so the driver
/// re-reads the (suspend-aware) clock at least this often.
const MAX_SLEEP_MS: u64 = 5_000;

type LostCallback = Arc<dyn Fn(&LossReason) + Send + Sync>;
/// Read only through `exact_now_ms`: every reading decides when the lease holds.
type SharedClock = Arc<dyn Clock + Send + Sync>;

/// The manager could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is unsafe or unusable.
    #[error("invalid lease configuration")]
    Config(#[from] LeaseConfigError),
    /// No lease could be acquired.
    #[error("could not acquire a machine id lease")]
    Acquire(#[from] AcquireError),
    /// The strategy cannot serve leases of this configuration (see
    /// [`Strategy::check_terms`]).
    #[error("the lease strategy cannot serve this lease configuration")]
    Strategy(#[source] Failure),
    /// The manager task ended before startup finished (it was cancelled or crashed).
    #[error("lease manager task ended before startup finished")]
    Aborted,
}

enum Command {
    Lost(String),
    Shutdown,
}

/// Builds a [`LeaseManager`].
pub struct LeaseManagerBuilder<S: Strategy> {
    strategy: S,
    config: LeaseConfig,
    clock: Option<SharedClock>,
    targets: Vec<Arc<dyn LeaseTarget>>,
    on_lease_lost: Option<LostCallback>,
    cache: LeaseCache<S::Lease>,
    seed: Option<u64>,
}

impl<S: Strategy + 'static> LeaseManagerBuilder<S> {
    /// Sets the timing (default: [`LeaseConfig::default`]).
    #[must_use]
    pub fn with_config(mut self, config: LeaseConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the clock (default: a new [`BootClock`]). Use the clock the factories use.
    ///
    /// The manager reads it with [`Clock::exact_now_ms`] only: its deadlines, expiry checks
    /// and call timeouts never lag, even on a clock whose `now_ms` does (a
    /// [`TickerClock`](nonce_core::TickerClock)).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Adds a target (a nonce factory) to enable, extend and disable with the lease.
    #[must_use]
    pub fn with_target(mut self, target: Arc<dyn LeaseTarget>) -> Self {
        self.targets.push(target);
        self
    }

    /// Called (after the targets are disabled) whenever the lease is lost.
    #[must_use]
    pub fn with_on_lease_lost(
        mut self,
        callback: impl Fn(&LossReason) + Send + Sync + 'static,
    ) -> Self {
        self.on_lease_lost = Some(Arc::new(callback));
        self
    }

    /// Uses `cache` (shared with a previous manager): a cached lease is renewed before anything
    /// is acquired.
    #[must_use]
    pub fn with_cache(mut self, cache: LeaseCache<S::Lease>) -> Self {
        self.cache = cache;
        self
    }

    /// Seeds the backoff jitter (default: random per process).
    #[must_use]
    pub const fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Spawns the manager on the current tokio runtime and waits until the first lease is held
    /// and the targets are enabled.
    ///
    /// # Errors
    /// [`StartError`] when the configuration is invalid or no lease was acquired in time, and
    /// [`AcquireError::Fatal`] (`Misconfigured`) when the strategy is deterministic and
    /// another manager of this process holds the ID it yields: two managers with one ordinal
    /// or host entry would repeat each other's nonces (docs/safety.md, "One holder of an ID per
    /// process").
    pub async fn start(self) -> Result<LeaseManager<S>, StartError> {
        self.config.validate()?;
        self.strategy
            .check_terms(&self.config.terms())
            .map_err(|e| StartError::Strategy(Failure::from_error(&e)))?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(BootClock::new()));
        let (commands_tx, commands) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(LeaseState::Starting);
        let (started_tx, started) = oneshot::channel();
        let name = self.strategy.profile().name;
        let startup_deadline = self
            .config
            .acquire_timeout()
            .map(|t| clock.exact_now_ms().saturating_add(millis(t)));
        let targets = Arc::new(Targets::new(self.targets));
        let claim = self.strategy.profile().deterministic.then(Claim::new);
        let driver = Driver {
            strategy: Arc::new(self.strategy),
            config: self.config,
            clock,
            targets: Arc::clone(&targets),
            on_lease_lost: self.on_lease_lost,
            cache: self.cache.clone(),
            jitter: self.seed.map_or_else(Jitter::from_entropy, Jitter::new),
            commands,
            state: state_tx,
            started: Some(started_tx),
            startup_deadline,
            shutting_down: false,
            name,
            claim,
        };
        let task = tokio::spawn(driver.run());
        let manager = LeaseManager {
            commands: commands_tx,
            state,
            task: Some(task),
            targets,
            cache: self.cache,
            name,
        };
        started.await.map_err(|_| StartError::Aborted)??;
        Ok(manager)
    }
}

/// Tells a [`LeaseManager`] that its node must stop using its ID; cheap to clone.
#[derive(Clone)]
pub struct LossSignal {
    commands: mpsc::UnboundedSender<Command>,
}

impl LossSignal {
    /// As [`LeaseManager::lease_lost`]; does nothing once the manager has stopped.
    pub fn lease_lost(&self, reason: impl Into<String>) {
        let _ = self.commands.send(Command::Lost(reason.into()));
    }
}

impl std::fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LossSignal")
    }
}

/// Holds a machine-ID lease on a tokio runtime and keeps its targets (nonce factories) in step:
/// enabled with the ID and deadline while the lease is held, disabled the moment it is not.
///
/// Dropping the manager without [`shutdown`](Self::shutdown) disables the targets and stops
/// the task without releasing the lease (it then expires on the coordinator).
pub struct LeaseManager<S: Strategy> {
    commands: mpsc::UnboundedSender<Command>,
    state: watch::Receiver<LeaseState>,
    task: Option<JoinHandle<()>>,
    targets: Arc<Targets>,
    cache: LeaseCache<S::Lease>,
    name: &'static str,
}

/// The targets, and whether a manager still drives them. One lock covers both, so a manager
/// that is dropped while its driver applies an effect on another worker has the last word: the
/// driver's enable either finishes before the drop disables, or never happens.
pub(crate) struct Targets {
    list: Vec<Arc<dyn LeaseTarget>>,
    driven: std::sync::Mutex<bool>,
}

impl Targets {
    fn new(list: Vec<Arc<dyn LeaseTarget>>) -> Self {
        Self {
            list,
            driven: std::sync::Mutex::new(true),
        }
    }

    /// Runs `f` on every target while a manager still drives them.
    fn while_driven(&self, f: impl Fn(&dyn LeaseTarget)) {
        let driven = self.driven.lock().unwrap_or_else(PoisonError::into_inner);
        if *driven {
            for target in &self.list {
                f(&**target);
            }
        }
    }

    fn disable(&self) {
        let _driven = self.driven.lock().unwrap_or_else(PoisonError::into_inner);
        for target in &self.list {
            target.disable();
        }
    }

    /// Disables every target for good: nothing this manager's driver still does reaches them
    /// (an enable it is applying finishes first, under the lock).
    fn retire(&self) {
        *self.driven.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.disable();
    }

    /// Clock millisecond `clock_ms` in the fleet's floor terms: the highest any target gives
    /// it (the clock's millisecond itself without targets), so that the floor covers every
    /// target's timestamps up to it.
    fn floor_of(&self, clock_ms: u64) -> u64 {
        self.list
            .iter()
            .map(|target| target.floor_of(clock_ms))
            .max()
            .unwrap_or(clock_ms)
    }

    /// The highest timestamp bound any target reports (0 without targets).
    fn issued_up_to_ms(&self) -> u64 {
        self.list
            .iter()
            .map(|target| target.issued_up_to_ms())
            .max()
            .unwrap_or(0)
    }
}

impl<S: Strategy + 'static> LeaseManager<S> {
    /// A builder for a manager using `strategy`.
    pub fn builder(strategy: S) -> LeaseManagerBuilder<S> {
        LeaseManagerBuilder {
            strategy,
            config: LeaseConfig::default(),
            clock: None,
            targets: Vec::new(),
            on_lease_lost: None,
            cache: LeaseCache::new(),
            seed: None,
        }
    }

    /// The machine ID while a lease is held.
    pub fn machine_id(&self) -> Option<MachineId> {
        self.state.borrow().machine_id()
    }

    /// The current lease state.
    pub fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// A receiver that sees every state change.
    pub fn watch_state(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// The lease cache; hand it to the next manager to resume this lease.
    pub fn cache(&self) -> LeaseCache<S::Lease> {
        self.cache.clone()
    }

    /// The strategy's name.
    pub const fn strategy_name(&self) -> &'static str {
        self.name
    }

    /// Signals that this node must stop using its ID (for example a conflict guard found another
    /// node with it): targets are disabled, `on_lease_lost` is called, and a dynamic strategy
    /// acquires a new ID.
    pub fn lease_lost(&self, reason: impl Into<String>) {
        let _ = self.commands.send(Command::Lost(reason.into()));
    }

    /// A cloneable handle that does what [`lease_lost`](Self::lease_lost) does, for callbacks
    /// that outlive a borrow of the manager (a conflict guard's, say).
    pub fn loss_signal(&self) -> LossSignal {
        LossSignal {
            commands: self.commands.clone(),
        }
    }

    /// Disables the targets, then releases the lease, and waits for the manager to finish.
    pub async fn shutdown(mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        // Whatever happened in the task, nothing generates after shutdown.
        self.targets.retire();
        self.cache.record_issued(self.targets.issued_up_to_ms());
    }
}

impl<S: Strategy> Drop for LeaseManager<S> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Retire first: an effect the driver is applying right now finishes before this,
            // and none after it reaches the targets; then stop the task.
            self.targets.retire();
            task.abort();
            // Exact now that the targets are off: a manager resuming the cached lease with
            // new factories starts them above it.
            self.cache.record_issued(self.targets.issued_up_to_ms());
        }
    }
}

enum Outcome<T> {
    /// The call's answer, or its timeout as a failure.
    Done(Result<T, Failure>),
    Interrupted,
    Panicked(String),
}

enum Exit {
    Done,
    Panicked { during_cache_renew: bool },
}

struct Driver<S: Strategy> {
    strategy: Arc<S>,
    config: LeaseConfig,
    clock: SharedClock,
    targets: Arc<Targets>,
    on_lease_lost: Option<LostCallback>,
    cache: LeaseCache<S::Lease>,
    jitter: Jitter,
    commands: mpsc::UnboundedReceiver<Command>,
    state: watch::Sender<LeaseState>,
    started: Option<oneshot::Sender<Result<(), AcquireError>>>,
    startup_deadline: Option<u64>,
    shutting_down: bool,
    name: &'static str,
    /// The ID this manager holds in this process's table, for a deterministic strategy.
    claim: Option<Claim>,
}

impl<S: Strategy + 'static> Driver<S> {
    async fn run(mut self) {
        let restart_backoff = Backoff::new(100, 30_000);
        let mut panics = 0u32;
        loop {
            // A restart during startup keeps the original startup deadline; after startup the
            // manager never gives up.
            let startup = self.startup_deadline.filter(|_| self.started.is_some());
            let left = startup.map(|at| at.saturating_sub(self.clock.exact_now_ms()).max(1));
            let timeout = left.map(Duration::from_millis);
            let config = self.config.clone().with_acquire_timeout(timeout);
            let seed = self.jitter.next_u64();
            let Ok(mut machine) = LeaseMachine::new(
                config,
                self.strategy.profile().deterministic,
                self.cache.get(),
                Jitter::new(seed),
            ) else {
                return; // validated in `start`
            };
            if self.started.is_none() {
                // A restart after startup: this machine must never give up either.
                machine = machine.after_startup();
            }
            let exit = AssertUnwindSafe(self.drive(machine)).catch_unwind().await;
            let during_cache_renew = match exit {
                Ok(Exit::Done) => return,
                Ok(Exit::Panicked { during_cache_renew }) => during_cache_renew,
                Err(payload) => {
                    telemetry::panicked(self.name, &panic_message(payload.as_ref()));
                    false
                }
            };
            // A panic must never leave the targets generating.
            self.targets.disable();
            self.cache.record_issued(self.targets.issued_up_to_ms());
            self.state.send_replace(LeaseState::Starting);
            if during_cache_renew {
                // Renewing this cached lease is what panics: acquire a new one next time.
                self.cache.clear();
            }
            if self.shutting_down {
                return;
            }
            panics = panics.saturating_add(1);
            let delay = restart_backoff.delay_ms(panics, &mut self.jitter);
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    }

    async fn drive(&mut self, mut m: LeaseMachine<S::Lease>) -> Exit {
        if self.shutting_down {
            m.shutdown(self.clock.exact_now_ms());
        }
        let none = OpSpan::default();
        loop {
            let now = self.clock.exact_now_ms();
            let action = m.poll_action(now);
            self.apply(&mut m, &none);
            match action {
                Action::Acquire {
                    source,
                    requested,
                    timeout,
                    now_ms,
                    floor_ms,
                } => {
                    let span = OpSpan::new(self.name, Operation::Acquire, source);
                    let strategy = Arc::clone(&self.strategy);
                    // The machine's clock readings in the floors' terms.
                    let (now_ms, floor_ms) = (
                        self.targets.floor_of(now_ms),
                        self.targets.floor_of(floor_ms),
                    );
                    let call = strategy.acquire(Acquire::new(requested, now_ms, floor_ms));
                    let outcome = self.call(call, timeout, &mut m).await;
                    let now = self.clock.exact_now_ms();
                    match outcome {
                        Outcome::Done(Ok(grant)) if !self.claim(grant.machine_id) => {
                            let held_elsewhere = Failure::new(
                                ErrorKind::Misconfigured,
                                claims::held_elsewhere(grant.machine_id),
                            );
                            m.on_acquire_refused(now, grant, held_elsewhere);
                        }
                        Outcome::Done(result) => m.on_acquire_result(now, result),
                        Outcome::Interrupted => {}
                        Outcome::Panicked(message) => return self.panicked(&message, false),
                    }
                    self.apply(&mut m, &span);
                }
                Action::Renew {
                    lease,
                    source,
                    requested,
                    timeout,
                    floor_ms,
                } => {
                    let span = OpSpan::new(self.name, Operation::Renew, source);
                    let strategy = Arc::clone(&self.strategy);
                    let floor_ms = self.targets.floor_of(floor_ms);
                    let call = strategy.renew(&lease, Renew::new(requested, floor_ms));
                    let outcome = self.call(call, timeout, &mut m).await;
                    let now = self.clock.exact_now_ms();
                    match outcome {
                        Outcome::Done(result) => m.on_renew_result(now, result),
                        Outcome::Interrupted => {}
                        Outcome::Panicked(message) => {
                            return self.panicked(&message, source == Source::Cache);
                        }
                    }
                    self.apply(&mut m, &span);
                }
                Action::Release {
                    lease,
                    guard,
                    timeout,
                    floor_ms,
                } => {
                    let span = OpSpan::new(self.name, Operation::Release, Source::Shutdown);
                    let strategy = Arc::clone(&self.strategy);
                    // The targets are disabled by now: what they report is exact.
                    let floor_ms = self.targets.issued_up_to_ms().max(floor_ms);
                    let call = strategy.release(&lease, Release::new(guard, floor_ms));
                    let outcome = self.call(call, timeout, &mut m).await;
                    let result = match outcome {
                        Outcome::Done(result) => result,
                        Outcome::Interrupted => Ok(()),
                        Outcome::Panicked(message) => Err(Failure::new(ErrorKind::Other, message)),
                    };
                    m.on_release_result(self.clock.exact_now_ms(), result);
                    self.apply(&mut m, &span);
                }
                Action::Wait { until } => {
                    let sleep = Duration::from_millis(until.saturating_sub(now).min(MAX_SLEEP_MS));
                    tokio::select! {
                        () = tokio::time::sleep(sleep) => {}
                        command = self.commands.recv() => {
                            self.command(command, &mut m);
                        }
                    }
                }
                Action::Halted => {
                    let command = self.commands.recv().await;
                    self.command(command, &mut m);
                }
                Action::Failed(error) => {
                    if let Some(started) = self.started.take() {
                        let _ = started.send(Err(error));
                    }
                    return Exit::Done;
                }
                Action::Stopped => return Exit::Done,
            }
            self.apply(&mut m, &none);
        }
    }

    /// Runs one strategy call under its timeout while still taking commands; a panic inside the
    /// call is caught and returned, an error or a timeout as a [`Failure`].
    ///
    /// The timeout is measured on the suspend-aware clock, like the deadlines it protects:
    /// tokio's timers stop while the machine sleeps, so the driver naps at most `MAX_SLEEP_MS`
    /// and reads the clock again.
    async fn call<T>(
        &mut self,
        call: impl Future<Output = Result<T, S::Error>>,
        timeout: Duration,
        m: &mut LeaseMachine<S::Lease>,
    ) -> Outcome<T> {
        let call = AssertUnwindSafe(call).catch_unwind();
        let deadline = self.clock.exact_now_ms().saturating_add(millis(timeout));
        tokio::pin!(call);
        loop {
            let left = deadline.saturating_sub(self.clock.exact_now_ms());
            if left == 0 {
                return Outcome::Done(Err(Failure::timeout(timeout)));
            }
            let nap = tokio::time::sleep(Duration::from_millis(left.min(MAX_SLEEP_MS)));
            tokio::select! {
                result = &mut call => {
                    return match result {
                        Ok(value) => Outcome::Done(value.map_err(|e| Failure::from_error(&e))),
                        Err(payload) => Outcome::Panicked(panic_message(payload.as_ref())),
                    };
                }
                () = nap => {}
                command = self.commands.recv() => {
                    if self.command(command, m) {
                        return Outcome::Interrupted;
                    }
                    // Applied at once: a loss must switch the targets off without waiting for the call.
                    self.apply(m, &OpSpan::default());
                }
            }
        }
    }

    /// Reports a panic in a strategy call; the driver restarts.
    fn panicked(&self, message: &str, during_cache_renew: bool) -> Exit {
        telemetry::panicked(self.name, message);
        Exit::Panicked { during_cache_renew }
    }

    /// Applies a command; returns whether it makes an outstanding call moot.
    fn command(&mut self, command: Option<Command>, m: &mut LeaseMachine<S::Lease>) -> bool {
        let now = self.clock.exact_now_ms();
        let interrupt = match command {
            Some(Command::Lost(reason)) => m.lease_lost(now, reason),
            // Every handle is gone (dropped without shutdown): shut down as well as we can.
            Some(Command::Shutdown) | None => {
                self.shutting_down = true;
                m.shutdown(now);
                true
            }
        };
        self.apply(m, &OpSpan::default());
        interrupt
    }

    fn apply(&mut self, m: &mut LeaseMachine<S::Lease>, span: &OpSpan) {
        let mut enabled = false;
        while let Some(effect) = m.poll_effect() {
            match effect {
                Effect::EnableFactories {
                    machine_id,
                    floor_ms,
                    deadline_ms,
                } => {
                    // A cached lease resumed while another manager of this process holds
                    // its ID (an acquired one was checked before the machine saw it).
                    if !self.claim(machine_id) {
                        let now = self.clock.exact_now_ms();
                        m.lease_lost(now, claims::held_elsewhere(machine_id));
                        continue;
                    }
                    self.targets.while_driven(|target| {
                        target.enable(machine_id, floor_ms, deadline_ms);
                    });
                    enabled = true;
                }
                Effect::ExtendDeadline { deadline_ms } => {
                    self.targets
                        .while_driven(|target| target.extend_deadline(deadline_ms));
                }
                Effect::DisableFactories => self.targets.disable(),
                Effect::LeaseLost {
                    reason,
                    remaining_ttl_ms,
                } => {
                    telemetry::lost(self.name, &reason, remaining_ttl_ms);
                    if let Some(callback) = &self.on_lease_lost {
                        // The targets are already off; a panicking callback must not stop the manager.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| callback(&reason)));
                    }
                }
                Effect::StoreCache(lease) => {
                    self.cache.store(lease);
                    self.cache.record_issued(self.targets.issued_up_to_ms());
                }
                Effect::ClearCache => self.cache.clear(),
                Effect::Event(event) => telemetry::event(self.name, &event, span),
            }
        }
        let state = m.state();
        // Held until the lease is given back or lost for good: a deterministic successor in
        // this process reads the floor that release leaves.
        if matches!(
            state,
            LeaseState::Starting
                | LeaseState::Reacquiring
                | LeaseState::Stopped
                | LeaseState::Failed
        ) && let Some(claim) = &mut self.claim
        {
            claim.give_up();
        }
        telemetry::gauges(self.name, &state, self.clock.exact_now_ms());
        self.state.send_if_modified(|current| {
            let changed = *current != state;
            *current = state;
            changed
        });
        // After the state update, so `machine_id()` answers as soon as `start` returns.
        if enabled && let Some(started) = self.started.take() {
            let _ = started.send(Ok(()));
        }
    }

    /// Enters `id` in this process's table for a deterministic strategy; `false` when another
    /// manager holds it there.
    fn claim(&mut self, id: MachineId) -> bool {
        self.claim.as_mut().is_none_or(|claim| claim.claim(id))
    }
}

/// A driver that unwinds (a panic outside the caught calls) or is cancelled still leaves the
/// cached lease with a bound of what its targets issued. A driver dropped late, after a newer
/// manager cached its own lease, only raises that bound: a higher floor is never unsafe.
impl<S: Strategy> Drop for Driver<S> {
    fn drop(&mut self) {
        self.cache.record_issued(self.targets.issued_up_to_ms());
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "strategy panicked".to_owned())
}
