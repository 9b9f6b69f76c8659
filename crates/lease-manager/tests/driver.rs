//! Driver tests on tokio's paused clock against an in-memory, test-only coordinator.
#![cfg(feature = "tokio")]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{
    Acquire, ErrorKind, Grant, LeaseError, LeaseTerms, MachineId, Profile, Release, Renew, Renewal,
    Strategy,
};
use lease_manager::{
    AcquireError, LeaseCache, LeaseConfig, LeaseManager, LeaseManagerBuilder, LeaseState,
    LeaseTarget, LossReason, StartError,
};

const BASE: u64 = 1_750_000_000_000;
const HOUR_MS: u64 = 3_600_000;

/// Time the machine spent suspended: the suspend-aware clock counts it, tokio's timers do not.
/// Only the suspend test reads it, as tests run in parallel.
static SUSPENDED_MS: AtomicU64 = AtomicU64::new(0);

/// `nonce_core::Clock` over tokio's (pausable) clock, so the manager sees virtual time, plus
/// the time spent suspended (`SUSPENDED_MS`, if `suspended`).
#[derive(Clone, Copy)]
struct TestClock {
    start: tokio::time::Instant,
    suspended: bool,
}

impl nonce_core::Clock for TestClock {
    fn now_ms(&self) -> u64 {
        let suspended = SUSPENDED_MS.load(SeqCst) * u64::from(self.suspended);
        BASE + u64::try_from(self.start.elapsed().as_millis()).unwrap() + suspended
    }
}

fn now(clock: TestClock) -> u64 {
    nonce_core::Clock::now_ms(&clock)
}

/// A shared, ordered log of what the targets and the coordinator saw.
type Log = Arc<Mutex<Vec<(u64, String)>>>;

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().iter().map(|(_, e)| e.clone()).collect()
}

/// The log of a node that lost ID 0: the lost lease is released first (recording its floor);
/// ID 0 is then in its guard, so the new lease is ID 1.
const MOVED_ON: &str = "acquire 0, enable 0, disable, release 0, acquire 1, enable 1";

fn note(log: &Log, clock: TestClock, entry: String) {
    log.lock().unwrap().push((now(clock), entry));
}

/// What the next renewal does instead of answering normally.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Retry,
    Lost,
    Hang,
    Panic,
    /// An error retrying cannot fix by itself (a password being rotated, a closed pool).
    Misconfigured,
}

/// TEST ONLY: an in-memory coordinator on the test clock, with scripted renewal faults.
struct TestCoordinator {
    clock: TestClock,
    capacity: usize,
    ttl: Duration,
    /// Per ID: (token, expires_at).
    rows: Mutex<Vec<Option<(u64, u64)>>>,
    /// Per ID: the timestamp floor (survives expiry).
    floors: Mutex<Vec<u64>>,
    next_token: Mutex<u64>,
    faults: Mutex<VecDeque<Fault>>,
    /// What the next acquires do instead of answering normally.
    acquire_faults: Mutex<VecDeque<Fault>>,
    /// Cannot serve leases shorter than an hour (`check_terms`).
    picky: AtomicBool,
    /// Yields the same ID for this node every time, like an ordinal or a host list (in its
    /// profile: it still hands out the lowest free ID).
    deterministic: AtomicBool,
    log: Log,
}

impl TestCoordinator {
    fn new(clock: TestClock, capacity: usize, ttl: Duration, log: Log) -> Arc<Self> {
        Arc::new(Self {
            clock,
            capacity,
            ttl,
            rows: Mutex::new(vec![None; capacity]),
            floors: Mutex::new(vec![0; capacity]),
            next_token: Mutex::new(0),
            faults: Mutex::new(VecDeque::new()),
            acquire_faults: Mutex::new(VecDeque::new()),
            picky: AtomicBool::new(false),
            deterministic: AtomicBool::new(false),
            log,
        })
    }

    fn fault(&self, fault: Fault) {
        self.faults.lock().unwrap().push_back(fault);
    }

    fn acquire_fault(&self, fault: Fault) {
        self.acquire_faults.lock().unwrap().push_back(fault);
    }

    fn expiry(&self, id: u16) -> Option<u64> {
        self.rows.lock().unwrap()[usize::from(id)].map(|(_, e)| e)
    }

    fn floor(&self, id: u16) -> u64 {
        self.floors.lock().unwrap()[usize::from(id)]
    }
}

impl Fault {
    fn error(self) -> TestError {
        TestError(match self {
            Fault::Lost => ErrorKind::Lost,
            Fault::Misconfigured => ErrorKind::Misconfigured,
            Fault::Retry | Fault::Hang | Fault::Panic => ErrorKind::Retry,
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("test coordinator: {0:?}")]
struct TestError(ErrorKind);

impl LeaseError for TestError {
    fn kind(&self) -> ErrorKind {
        self.0
    }
}

impl Strategy for TestCoordinator {
    type Lease = (u16, u64);
    type Error = TestError;

    async fn acquire(&self, request: Acquire) -> Result<Grant<(u16, u64)>, TestError> {
        let floor_ms = request.floor_ms;
        let fault = self.acquire_faults.lock().unwrap().pop_front();
        if let Some(fault) = fault {
            note(&self.log, self.clock, format!("acquire fails: {fault:?}"));
            return Err(fault.error());
        }
        let now = now(self.clock);
        let mut rows = self.rows.lock().unwrap();
        let Some(id) = (0..self.capacity).find(|&i| rows[i].is_none_or(|(_, e)| e <= now)) else {
            return Err(TestError(ErrorKind::Exhausted));
        };
        let mut token = self.next_token.lock().unwrap();
        *token += 1;
        rows[id] = Some((*token, now + millis(self.ttl)));
        let mut floors = self.floors.lock().unwrap();
        let previous = floors[id];
        floors[id] = previous.max(floor_ms);
        let id = u16::try_from(id).unwrap();
        drop(rows);
        note(&self.log, self.clock, format!("acquire {id}"));
        Ok(Grant::new(MachineId::new(id).unwrap(), (id, *token), self.ttl).with_floor(previous))
    }

    async fn renew(
        &self,
        lease: &(u16, u64),
        request: Renew,
    ) -> Result<Renewal<(u16, u64)>, TestError> {
        let floor_ms = request.floor_ms;
        let fault = self.faults.lock().unwrap().pop_front();
        match fault {
            Some(Fault::Hang) => std::future::pending::<()>().await,
            Some(Fault::Panic) => panic!("scripted strategy panic"),
            Some(fault) => return Err(fault.error()),
            None => {}
        }
        let now = now(self.clock);
        let mut rows = self.rows.lock().unwrap();
        match &mut rows[usize::from(lease.0)] {
            Some((token, expires)) if *token == lease.1 && *expires > now => {
                *expires = now + millis(self.ttl)
            }
            _ => return Err(TestError(ErrorKind::Lost)),
        }
        drop(rows);
        let mut floors = self.floors.lock().unwrap();
        floors[usize::from(lease.0)] = floors[usize::from(lease.0)].max(floor_ms);
        note(&self.log, self.clock, format!("renew {}", lease.0));
        Ok(Renewal::new(*lease, self.ttl))
    }

    async fn release(&self, lease: &(u16, u64), request: Release) -> Result<(), TestError> {
        let Release {
            guard, floor_ms, ..
        } = request;
        let now = now(self.clock);
        if let Some((token, expires)) = &mut self.rows.lock().unwrap()[usize::from(lease.0)]
            && *token == lease.1
        {
            *expires = (*expires).min(now + millis(guard));
            self.floors.lock().unwrap()[usize::from(lease.0)] = floor_ms;
        }
        note(&self.log, self.clock, format!("release {}", lease.0));
        Ok(())
    }

    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), TestError> {
        if self.picky.load(SeqCst) && terms.min_ttl < Duration::from_secs(3600) {
            return Err(TestError(ErrorKind::Misconfigured));
        }
        Ok(())
    }

    fn profile(&self) -> Profile {
        let profile = Profile::new("test").recording_floor();
        if self.deterministic.load(SeqCst) {
            profile.deterministic()
        } else {
            profile
        }
    }
}

/// A target that logs and answers "could I generate at `now`?" like a factory's hot path.
struct Recorder {
    clock: TestClock,
    enabled: Mutex<Option<(u16, u64)>>,
    /// The floor of the last enable.
    floor: Mutex<u64>,
    /// What the target reports as the bound of what it issued.
    issued: Mutex<u64>,
    /// Whether enables after the first block until the test lets them finish: `entered`, then
    /// `proceed`.
    gated: AtomicBool,
    enables: AtomicU32,
    entered: Barrier,
    proceed: Barrier,
    log: Log,
}

impl Recorder {
    fn new(clock: TestClock, log: Log) -> Arc<Self> {
        Arc::new(Self {
            clock,
            enabled: Mutex::new(None),
            floor: Mutex::new(0),
            issued: Mutex::new(0),
            gated: AtomicBool::new(false),
            enables: AtomicU32::new(0),
            entered: Barrier::new(2),
            proceed: Barrier::new(2),
            log,
        })
    }

    fn enabled(&self) -> Option<(u16, u64)> {
        *self.enabled.lock().unwrap()
    }

    fn can_generate(&self) -> bool {
        self.enabled()
            .is_some_and(|(_, deadline)| now(self.clock) < deadline)
    }
}

impl LeaseTarget for Recorder {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
        if self.gated.load(SeqCst) && self.enables.fetch_add(1, SeqCst) > 0 {
            self.entered.wait();
            self.proceed.wait();
        }
        *self.floor.lock().unwrap() = floor_ms;
        *self.enabled.lock().unwrap() = Some((machine_id.get(), deadline_ms));
        note(&self.log, self.clock, format!("enable {machine_id}"));
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        let mut enabled = self.enabled.lock().unwrap();
        let (id, _) = enabled.expect("extend while disabled");
        *enabled = Some((id, deadline_ms));
    }
    fn disable(&self) {
        let was = self.enabled.lock().unwrap().take();
        if was.is_some() {
            note(&self.log, self.clock, "disable".to_owned());
        }
    }
    fn issued_up_to_ms(&self) -> u64 {
        *self.issued.lock().unwrap()
    }
}

struct Setup {
    clock: TestClock,
    log: Log,
    coordinator: Arc<TestCoordinator>,
    target: Arc<Recorder>,
    lost: Arc<Mutex<Vec<LossReason>>>,
}

fn setup(capacity: usize, ttl: Duration) -> Setup {
    setup_with(capacity, ttl, false)
}

fn setup_with(capacity: usize, ttl: Duration, suspended: bool) -> Setup {
    let clock = TestClock {
        start: tokio::time::Instant::now(),
        suspended,
    };
    let log = Log::default();
    Setup {
        clock,
        coordinator: TestCoordinator::new(clock, capacity, ttl, log.clone()),
        target: Recorder::new(clock, log.clone()),
        lost: Arc::default(),
        log,
    }
}

impl Setup {
    /// A manager of the coordinator on the test clock, enabling the recorder, logging losses.
    fn builder(&self) -> LeaseManagerBuilder<Arc<TestCoordinator>> {
        let lost = Arc::clone(&self.lost);
        LeaseManager::builder(Arc::clone(&self.coordinator))
            .with_clock(self.clock)
            .with_target(self.target.clone())
            .with_on_lease_lost(move |reason| lost.lock().unwrap().push(reason.clone()))
            .with_jitter_seed(1)
    }

    async fn start(&self, config: LeaseConfig) -> Result<Manager, StartError> {
        self.builder().with_config(config).start().await
    }
}

type Manager = LeaseManager<Arc<TestCoordinator>>;

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn starts_renews_and_shuts_down_disabling_before_release() {
    let s = setup(4, Duration::from_secs(8 * 3600));
    let manager = s.start(LeaseConfig::default()).await.unwrap();
    let t0 = BASE;
    assert_eq!(manager.machine_id(), Some(MachineId::new(0).unwrap()));
    assert_eq!(s.target.enabled(), Some((0, t0 + 8 * HOUR_MS - 10_000)));
    assert!(matches!(manager.state(), LeaseState::Held { .. }));
    // The acquire recorded the latest deadline it could give, and the factories start above
    // the (empty) floor.
    assert_eq!(*s.target.floor.lock().unwrap(), 0);
    assert_eq!(s.coordinator.floor(0), t0 + 8 * HOUR_MS - 10_000);

    // Renewal 30 min - 10 s after the acquire was sent; the deadline moves with it, and the
    // renewal raises the floor before it does.
    sleep_ms(30 * 60_000).await;
    assert_eq!(entries(&s.log), ["acquire 0", "enable 0", "renew 0"]);
    let renewed_at = s.log.lock().unwrap()[2].0;
    assert_eq!(renewed_at, t0 + 30 * 60_000 - 10_000);
    assert_eq!(
        s.target.enabled(),
        Some((0, renewed_at + 8 * HOUR_MS - 10_000))
    );
    assert_eq!(s.coordinator.floor(0), renewed_at + 8 * HOUR_MS - 10_000);
    assert!(manager.cache().get().is_some());

    let cache = manager.cache();
    // The release records exactly what the targets issued (they are disabled by then)...
    *s.target.issued.lock().unwrap() = t0 + 31 * 60_000;
    manager.shutdown().await;
    let log = entries(&s.log);
    assert_eq!(log[3..], ["disable", "release 0"]);
    let released_at = s.log.lock().unwrap()[4].0;
    // The ID stays blocked for the guard (the margin), not freed at once.
    assert_eq!(s.coordinator.expiry(0), Some(released_at + 10_000));
    assert!(cache.get().is_none());
    assert!(!s.target.can_generate());
    assert_eq!(s.coordinator.floor(0), t0 + 31 * 60_000);

    // ...and the next holder starts above it, a floor ahead of its clock.
    sleep_ms(11_000).await;
    let next = s.start(LeaseConfig::default()).await.unwrap();
    assert_eq!(next.machine_id(), Some(MachineId::new(0).unwrap()));
    assert_eq!(*s.target.floor.lock().unwrap(), t0 + 31 * 60_000);
    // Its release never records less than the floor it was granted: a target that issued
    // nothing reports less.
    *s.target.issued.lock().unwrap() = BASE;
    next.shutdown().await;
    assert_eq!(s.coordinator.floor(0), t0 + 31 * 60_000);
}

#[tokio::test(start_paused = true)]
async fn external_confirmed_and_local_expiry_losses_disable_call_back_and_reacquire() {
    for loss in ["external", "confirmed", "hung"] {
        // Hung: a 60 s TTL, deadline at 50 s, renewal at 40 s, which hangs forever.
        let ttl = Duration::from_secs(if loss == "hung" { 60 } else { 3600 });
        let s = setup(4, ttl);
        let config = LeaseConfig::default().with_lease_duration(ttl);
        let manager = s.start(config).await.unwrap();
        let reason = match loss {
            "external" => {
                manager.lease_lost("conflict with node b");
                sleep_ms(1).await;
                LossReason::External("conflict with node b".into())
            }
            "confirmed" => {
                // Two uncertain failures are retried with the factories still on, then a loss.
                for fault in [Fault::Retry, Fault::Retry, Fault::Lost] {
                    s.coordinator.fault(fault);
                }
                sleep_ms(30 * 60_000 - 10_000).await;
                assert!(s.target.can_generate());
                sleep_ms(10_000).await;
                LossReason::Lost("test coordinator: Lost".into())
            }
            _ => {
                s.coordinator.fault(Fault::Hang);
                sleep_ms(49_999).await;
                assert!(s.target.can_generate());
                // At the deadline the hot path refuses even before the manager task runs...
                sleep_ms(1).await;
                assert!(!s.target.can_generate());
                // ...and the manager disables and reports the loss at that same instant.
                sleep_ms(10).await;
                let disabled = s.log.lock().unwrap()[2].clone();
                assert_eq!(disabled, (BASE + 50_000, "disable".to_owned()));
                LossReason::LocalExpiry
            }
        };
        assert_eq!(*s.lost.lock().unwrap(), [reason]);
        // The lost lease is released (a hung renewal dropped); ID 0 stays blocked, so the node
        // moves to ID 1.
        assert_eq!(entries(&s.log).join(", "), MOVED_ON);
        assert_eq!(manager.machine_id(), Some(MachineId::new(1).unwrap()));
        manager.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_manager_resumes_from_a_shared_cache() {
    // The cached lease renewed; or, its renewal failing, disabled and a new one acquired.
    for (fault, log) in [
        (None, "acquire 0, enable 0, disable, renew 0, enable 0"),
        (
            Some(Fault::Lost),
            "acquire 0, enable 0, disable, acquire 1, enable 1",
        ),
    ] {
        let s = setup(4, Duration::from_secs(8 * 3600));
        let first = s.start(LeaseConfig::default()).await.unwrap();
        let cache = first.cache();
        drop(first); // a crash: no release
        assert!(!s.target.can_generate());
        if let Some(fault) = fault {
            s.coordinator.fault(fault);
        }
        let second = s.builder().with_cache(cache).start().await.unwrap();
        assert_eq!(entries(&s.log).join(", "), log);
        second.shutdown().await;
        assert!(s.lost.lock().unwrap().is_empty());
    }
}

#[test]
fn a_nonce_factory_follows_the_lease() {
    use nonce_core::{Factory, FactoryConfig, ManualClock};
    let clock = ManualClock::new(BASE);
    let factory = Factory::new(&clock, FactoryConfig::new()).unwrap();
    let target: &dyn LeaseTarget = &factory;
    let id = MachineId::new(7).unwrap();
    target.enable(id, 0, BASE + 1_000);
    let decoded = factory.counter96().unwrap().decode(factory.epoch_ms());
    assert_eq!(decoded.machine_id, id);
    target.extend_deadline(BASE + 10);
    clock.set(BASE + 10);
    // A sortable nonce carries the current time, which is now at the deadline: refused.
    assert_eq!(
        factory.sortable64(),
        Err(nonce_core::Error::LeaseExpired),
        "generated at the deadline"
    );
    target.disable();
    assert!(!factory.is_enabled());
    assert!(target.issued_up_to_ms() >= BASE);

    // Enabled above a floor an hour ahead of its clock, it issues above the floor only.
    let floor = BASE + 3_600_000;
    target.enable(id, floor, BASE + 7_200_000);
    let nonce = factory.counter96().unwrap();
    assert!(nonce.decode(factory.epoch_ms()).unix_ms > floor);
    target.disable();
    assert!(target.issued_up_to_ms() > floor);
}

#[tokio::test(start_paused = true)]
async fn after_a_panic_restart_a_misconfigured_answer_is_retried_not_fatal() {
    let s = setup(4, Duration::from_secs(8 * 3600));
    let manager = s.start(LeaseConfig::default()).await.unwrap();
    // The renewal panics; the restarted manager's cached renewal and its next acquire meet a
    // password rotation in progress.
    s.coordinator.fault(Fault::Panic);
    s.coordinator.fault(Fault::Misconfigured);
    s.coordinator.acquire_fault(Fault::Misconfigured);
    sleep_ms(30 * 60_000).await;
    sleep_ms(5 * 60_000).await;
    let log = entries(&s.log);
    assert!(
        log.contains(&"acquire fails: Misconfigured".to_owned()),
        "{log:?}"
    );
    assert!(
        !matches!(manager.state(), LeaseState::Failed),
        "the manager gave up after startup: {log:?}"
    );
    assert!(manager.machine_id().is_some(), "{log:?}");
    assert!(s.target.can_generate(), "{log:?}");
    // The ID it could not renew was lost, and the application was told.
    assert_eq!(s.lost.lock().unwrap().len(), 1, "{log:?}");
    manager.shutdown().await;
}

/// A manager reading `clock` (on the test clock's timeline, which counts `suspended`) whose
/// scheduled renewal hangs; while it is outstanding the machine sleeps for 9 hours.
async fn a_renewal_hung_across_a_suspend(
    s: &Setup,
    clock: impl nonce_core::Clock + Send + Sync + 'static,
) {
    let manager = s.builder().with_clock(clock).start().await.unwrap();
    assert_eq!(s.target.enabled(), Some((0, BASE + 8 * HOUR_MS - 10_000)));
    s.coordinator.fault(Fault::Hang);
    sleep_ms(30 * 60_000 - 10_000 + 10).await;
    assert!(s.target.can_generate());
    SUSPENDED_MS.fetch_add(9 * HOUR_MS, SeqCst);
    // A few seconds of awake time later the manager must have seen the deadline pass: the
    // targets are off, the application was told, and a new lease is being acquired; tokio's
    // own timer for the 30 s call timeout has not even fired yet.
    sleep_ms(6_000).await;
    let log = entries(&s.log);
    assert_eq!(
        *s.lost.lock().unwrap(),
        [LossReason::LocalExpiry],
        "{log:?}"
    );
    // The old lease ran out on the coordinator too (its clock counts the suspend): its
    // release (recording the floor) blocks nothing, and the manager took the lowest free ID
    // again, with a fresh deadline.
    let expected = ["disable", "release 0", "acquire 0", "enable 0"];
    assert_eq!(log[2..], expected, "{log:?}");
    assert!(s.target.can_generate());
    manager.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_hung_across_a_suspend_ends_by_the_suspend_aware_clock() {
    for ticker in [false, true] {
        SUSPENDED_MS.store(0, SeqCst);
        let s = setup_with(4, Duration::from_secs(8 * 3600), true);
        if !ticker {
            a_renewal_hung_across_a_suspend(&s, s.clock).await;
            continue;
        }
        // A clock whose ticker never runs: its `now_ms` stays at the start for ever; the manager
        // must decide by its source, and still expires the lease on time.
        let stalled = nonce_core::TickerClock::without_thread(s.clock);
        a_renewal_hung_across_a_suspend(&s, stalled.clone()).await;
        // Only the manager's own exact readings moved it: never ahead of the source.
        assert!(nonce_core::Clock::now_ms(&stalled) <= now(s.clock));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_manager_has_the_last_word_over_an_enable_in_flight() {
    let s = setup(4, Duration::from_secs(3600));
    s.target.gated.store(true, SeqCst);
    let manager = s.start(LeaseConfig::default()).await.unwrap();
    // A loss signal outlives the manager (a conflict guard holds one), so the driver is not
    // told to stop by its command channel closing.
    let signal = manager.loss_signal();
    // A loss makes the driver reacquire and enable again, on a worker of its own.
    manager.lease_lost("test");
    let waiter = Arc::clone(&s.target);
    tokio::task::spawn_blocking(move || waiter.entered.wait())
        .await
        .unwrap();
    // The driver is inside `enable`; the manager is dropped meanwhile.
    let dropper = std::thread::spawn(move || drop(manager));
    std::thread::sleep(Duration::from_millis(100));
    s.target.proceed.wait();
    dropper.join().unwrap();
    assert!(
        s.target.enabled().is_none(),
        "a target was left enabled by a manager that no longer exists"
    );
    drop(signal);
}

#[tokio::test(start_paused = true)]
async fn startup_fails_on_a_refused_configuration_or_at_the_acquire_timeout() {
    // An invalid configuration (a margin too large for the minimum TTL) is rejected before
    // spawning; one the strategy cannot serve, before any lease is acquired. Without a free ID,
    // startup fails at the acquire timeout, nothing enabled.
    for (capacity, margin, picky) in [(4, 20, false), (4, 10, true), (0, 10, false)] {
        let s = setup(capacity, Duration::from_secs(3600));
        s.coordinator.picky.store(picky, SeqCst);
        let started = tokio::time::Instant::now();
        let config = LeaseConfig::default().with_margin(Duration::from_secs(margin));
        let result = s.start(config).await;
        let refused = match &result {
            Err(StartError::Config(_)) => margin == 20,
            Err(StartError::Strategy(f)) => picky && f.kind == ErrorKind::Misconfigured,
            Err(StartError::Acquire(AcquireError::Timeout { .. })) => {
                capacity == 0 && started.elapsed() == Duration::from_secs(60)
            }
            _ => false,
        };
        assert!(refused, "{:?}", result.err());
        assert!(entries(&s.log).is_empty(), "{:?}", entries(&s.log));
    }
}

/// A manager builder on the test clock whose one target is a new nonce factory of `config`.
fn with_factory(
    s: &Setup,
    config: nonce_core::FactoryConfig,
) -> (
    Arc<nonce_core::Factory<TestClock>>,
    LeaseManagerBuilder<Arc<TestCoordinator>>,
) {
    let factory = Arc::new(nonce_core::Factory::new(s.clock, config).unwrap());
    let builder = LeaseManager::builder(Arc::clone(&s.coordinator))
        .with_clock(s.clock)
        .with_target(factory.clone());
    (factory, builder)
}

/// A manager with a fresh nonce factory resumes `cache`; the factory issues `count` nonces.
async fn resume_and_issue(
    s: &Setup,
    cache: LeaseCache<(u16, u64)>,
    count: usize,
) -> (Manager, Vec<nonce_core::Nonce96>) {
    let (factory, builder) = with_factory(s, nonce_core::FactoryConfig::new());
    let manager = builder.with_cache(cache).start().await.unwrap();
    let nonces = (0..count).map(|_| factory.counter96().unwrap()).collect();
    (manager, nonces)
}

/// Two managers in turn on one cached lease, each with its own new factory, issue `count`
/// nonces each without moving the clock; the repeats among them.
async fn repeats_across_a_cached_handover(s: &Setup, count: usize) -> usize {
    let cache = LeaseCache::new();
    let (first, mut issued) = resume_and_issue(s, cache.clone(), count).await;
    drop(first); // a crash: the lease stays cached, unreleased
    let (second, more) = resume_and_issue(s, cache, count).await;
    assert_eq!(
        entries(&s.log),
        ["acquire 0", "renew 0"],
        "the second manager must resume the cached lease"
    );
    issued.extend(more);
    second.shutdown().await;
    let distinct: std::collections::HashSet<_> = issued.iter().collect();
    issued.len() - distinct.len()
}

#[tokio::test(start_paused = true)]
async fn a_resumed_lease_starts_above_what_the_first_factory_issued() {
    // Granted with a floor an hour ahead of the clock, the factories count up from it; without
    // one, the paused clock does not move: both factories issue in the same millisecond.
    for floor in [BASE + HOUR_MS, 0] {
        let s = setup(1, Duration::from_secs(8 * 3600));
        s.coordinator.floors.lock().unwrap()[0] = floor;
        assert_eq!(repeats_across_a_cached_handover(&s, 100).await, 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_strategy_restarts_from_the_cache_which_records_what_the_targets_issued() {
    let s = setup(4, Duration::from_secs(8 * 3600));
    let manager = s.start(LeaseConfig::default()).await.unwrap();
    let cache = manager.cache();
    let issued = |cache: &LeaseCache<(u16, u64)>| cache.get().map(|cached| cached.issued_up_to_ms);
    // Each renewal records what the targets report.
    *s.target.issued.lock().unwrap() = BASE + 5;
    sleep_ms(30 * 60_000).await;
    assert_eq!(entries(&s.log).join(", "), "acquire 0, enable 0, renew 0");
    assert_eq!(issued(&cache), Some(BASE + 5));
    // The next renewal, 30 min - 10 s after the first, panics: the target is disabled at once,
    // and what it issued is recorded before the restart renews anything.
    *s.target.issued.lock().unwrap() = BASE + 10;
    s.coordinator.fault(Fault::Panic);
    sleep_ms(30 * 60_000 - 20_000 + 50).await;
    let log = "acquire 0, enable 0, renew 0, disable";
    assert_eq!(entries(&s.log).join(", "), log);
    assert_eq!(issued(&cache), Some(BASE + 10));
    // The restarted manager renewed the cached lease instead of taking a new ID...
    sleep_ms(1_000).await;
    let log = format!("{log}, renew 0, enable 0");
    assert_eq!(entries(&s.log).join(", "), log);
    assert_eq!(manager.machine_id(), Some(MachineId::new(0).unwrap()));
    assert!(s.target.can_generate());
    // ...and keeps going.
    sleep_ms(30 * 60_000).await;
    assert_eq!(entries(&s.log).last().map(String::as_str), Some("renew 0"));
    // Dropping the manager records what the targets issued too.
    *s.target.issued.lock().unwrap() = BASE + 20;
    drop(manager);
    assert_eq!(issued(&cache), Some(BASE + 20));
}

async fn start_fixed(s: &Setup) -> Result<Manager, StartError> {
    s.coordinator.deterministic.store(true, SeqCst);
    s.start(LeaseConfig::default()).await
}

/// Two managers in one process that work out the same ID (two instances on one ordinal, a
/// sidecar reading the same `POD_NAME`): the second is refused before it enables anything, and
/// the ID is free again once the first has released it. Machine ID 7 is this test's alone: the
/// tests of this file share a process under `cargo test`.
#[tokio::test(start_paused = true)]
async fn a_second_manager_in_one_process_is_refused_the_id_a_deterministic_one_holds() {
    let [first, second] = [(); 2].map(|()| setup(8, Duration::from_secs(3600)));
    for s in [&first, &second] {
        for id in 0..7 {
            s.coordinator.rows.lock().unwrap()[id] = Some((u64::MAX, u64::MAX));
        }
    }
    let holder = start_fixed(&first).await.unwrap();
    assert_eq!(holder.machine_id(), Some(MachineId::new(7).unwrap()));

    let refused = start_fixed(&second).await;
    let Err(StartError::Acquire(AcquireError::Fatal(failure))) = &refused else {
        panic!("the second manager started: {:?}", refused.err());
    };
    assert_eq!(failure.kind, ErrorKind::Misconfigured);
    assert!(
        failure.reason.contains("machine ID 7") && failure.reason.contains("this process"),
        "{failure}"
    );
    assert_eq!(second.target.enabled(), None);
    // Given back at once, with the floor it came with: nothing was issued under it.
    assert_eq!(entries(&second.log), ["acquire 7", "release 7"]);

    holder.shutdown().await;
    let successor = start_fixed(&second).await.unwrap();
    assert_eq!(successor.machine_id(), Some(MachineId::new(7).unwrap()));
    successor.shutdown().await;
}

/// Two holders of one ID in turn, the second counting its timestamps from an epoch 10 minutes
/// later (`--epoch-ms`): it starts above every timestamp the first issued in the nonces' own
/// terms. Floors in Unix milliseconds let it start above the same millisecond instead, 10
/// minutes of the first's values behind, and repeat them.
#[tokio::test(start_paused = true)]
async fn a_successor_on_a_later_epoch_starts_above_what_its_predecessor_issued() {
    use nonce_core::{DEFAULT_EPOCH_MS, FactoryConfig};
    let s = setup(1, Duration::from_secs(3600));
    let start = |epoch_ms: u64| {
        let (factory, builder) = with_factory(&s, FactoryConfig::new().with_epoch_ms(epoch_ms));
        async move { (factory, builder.start().await.unwrap()) }
    };
    let (first, manager) = start(DEFAULT_EPOCH_MS).await;
    let mut issued = std::collections::HashSet::new();
    let mut first_latest = 0;
    for _ in 0..50 {
        for _ in 0..100 {
            let nonce = first.counter96().unwrap();
            first_latest = first_latest.max(nonce.decode(first.epoch_ms()).timestamp_ms);
            issued.insert(nonce.to_u128());
        }
        sleep_ms(300).await;
    }
    manager.shutdown().await;

    let (second, manager) = start(DEFAULT_EPOCH_MS + 600_000).await;
    let nonce = second.counter96().unwrap();
    let timestamp = nonce.decode(second.epoch_ms()).timestamp_ms;
    assert!(
        timestamp > first_latest,
        "the successor issued timestamp {timestamp} of its epoch, the predecessor up to {first_latest}"
    );
    for _ in 0..1000 {
        assert!(
            !issued.contains(&second.counter96().unwrap().to_u128()),
            "a value of the predecessor again"
        );
    }
    manager.shutdown().await;
}
