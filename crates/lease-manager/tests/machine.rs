//! Deterministic simulation of the lease state machine: fake time, no sleeps.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{ErrorKind, Grant, MachineId, Renewal};
use lease_manager::backoff::Jitter;
use lease_manager::machine::{LeaseEvent, OpResult, Operation, Source};
use lease_manager::{
    AcquireError, Action, CachedLease, Effect, Failure, LeaseConfig, LeaseMachine, LeaseState,
    LossReason,
};

const T0: u64 = 1_750_000_000_000;
const HOUR: u64 = 3_600_000;
const MARGIN: u64 = 10_000;

fn id(n: u16) -> MachineId {
    MachineId::new(n).unwrap()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn machine(deterministic: bool) -> LeaseMachine<u32> {
    LeaseMachine::new(LeaseConfig::default(), deterministic, None, Jitter::new(7)).unwrap()
}

fn retry(reason: &str) -> Failure {
    Failure::new(ErrorKind::Retry, reason)
}

/// The factories as the driver would keep them, with the checks a generator would make.
#[derive(Debug, Default)]
struct Factories {
    enabled: Option<(MachineId, u64)>,
    lost: Vec<(LossReason, u64)>,
    events: Vec<LeaseEvent>,
    cache: Option<CachedLease<u32>>,
    log: Vec<&'static str>,
}

impl Factories {
    fn apply(&mut self, m: &mut LeaseMachine<u32>) {
        while let Some(effect) = m.poll_effect() {
            match effect {
                Effect::EnableFactories {
                    machine_id,
                    deadline_ms,
                    ..
                } => {
                    self.log.push("enable");
                    self.enabled = Some((machine_id, deadline_ms));
                }
                Effect::ExtendDeadline { deadline_ms } => {
                    self.log.push("extend");
                    let (id, _) = self.enabled.expect("extend while disabled");
                    self.enabled = Some((id, deadline_ms));
                }
                Effect::DisableFactories => {
                    self.log.push("disable");
                    self.enabled = None;
                }
                Effect::LeaseLost {
                    reason,
                    remaining_ttl_ms,
                } => {
                    self.log.push("lost");
                    assert!(
                        self.enabled.is_none(),
                        "lease lost reported while factories are on"
                    );
                    self.lost.push((reason, remaining_ttl_ms));
                }
                Effect::StoreCache(c) => self.cache = Some(c),
                Effect::ClearCache => self.cache = None,
                Effect::Event(e) => self.events.push(e),
                _ => unreachable!("unknown effect"),
            }
        }
    }

    /// Whether a nonce could be generated at `now` (the hot-path check).
    fn can_generate(&self, now: u64) -> bool {
        self.enabled.is_some_and(|(_, deadline)| now < deadline)
    }

    fn ops(&self, operation: Operation) -> Vec<(Source, OpResult)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                LeaseEvent::Operation(op) if op.operation == operation => {
                    Some((op.source, op.result))
                }
                _ => None,
            })
            .collect()
    }

    fn retries(&self) -> Vec<(Operation, u32, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                LeaseEvent::Retry(r) => Some((r.operation, r.attempt, r.delay_ms)),
                _ => None,
            })
            .collect()
    }
}

#[track_caller]
fn expect_acquire(m: &mut LeaseMachine<u32>, now: u64) -> (Source, Duration) {
    match m.poll_action(now) {
        Action::Acquire {
            source,
            timeout,
            requested,
            ..
        } => {
            assert_eq!(requested, secs(8 * 3600));
            (source, timeout)
        }
        other => panic!("expected acquire at {now}, got {other:?}"),
    }
}

#[track_caller]
fn expect_renew(m: &mut LeaseMachine<u32>, now: u64) -> (u32, Source, Duration) {
    match m.poll_action(now) {
        Action::Renew {
            lease,
            source,
            timeout,
            ..
        } => (*lease, source, timeout),
        other => panic!("expected renew at {now}, got {other:?}"),
    }
}

#[track_caller]
fn expect_wait(m: &mut LeaseMachine<u32>, now: u64) -> u64 {
    match m.poll_action(now) {
        Action::Wait { until } => {
            assert!(until > now, "wait until {until} is not after {now}");
            until
        }
        other => panic!("expected wait at {now}, got {other:?}"),
    }
}

/// Starts a machine and grants `machine_id` with `ttl` on the first attempt, replying at T0.
fn held(deterministic: bool, machine_id: u16, ttl: u64) -> (LeaseMachine<u32>, Factories) {
    let mut m = machine(deterministic);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(
        T0,
        Ok(Grant::new(id(machine_id), 1, Duration::from_millis(ttl))),
    );
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(machine_id), T0 + ttl - MARGIN)));
    (m, f)
}

#[test]
fn retries_until_acquired_with_backoff() {
    let mut m = machine(false);
    let mut f = Factories::default();
    let mut now = T0;
    for attempt in 1..=4u32 {
        let (source, timeout) = expect_acquire(&mut m, now);
        assert_eq!(source, Source::Initial);
        assert_eq!(timeout, secs(30));
        m.on_acquire_result(now + 5, Err(retry("connection refused")));
        f.apply(&mut m);
        let until = expect_wait(&mut m, now + 5);
        let delay = until - (now + 5);
        let low = 100 * (1 << (attempt - 1));
        assert!(
            (low..low + 100).contains(&delay),
            "attempt {attempt}: delay {delay}"
        );
        // Polling early changes nothing.
        assert_eq!(expect_wait(&mut m, until - 1), until);
        assert!(!f.can_generate(until - 1));
        now = until;
    }
    assert_eq!(f.retries().len(), 4);
    assert!(f.retries().iter().all(|r| r.0 == Operation::Acquire));
    expect_acquire(&mut m, now);
    m.on_acquire_result(now + 5, Ok(Grant::new(id(3), 9, secs(8 * 3600))));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(3), now + 8 * HOUR - MARGIN)));
    assert_eq!(m.machine_id(), Some(id(3)));
    assert_eq!(f.cache.as_ref().map(|c| *c.lease), Some(9));
    assert_eq!(
        f.ops(Operation::Acquire).last(),
        Some(&(Source::Initial, OpResult::Ok))
    );
}

#[test]
fn fails_at_the_acquire_deadline_and_not_after() {
    let mut m = machine(false);
    let deadline = T0 + 60_000;
    let mut now = T0;
    let mut attempts = 0;
    loop {
        match m.poll_action(now) {
            Action::Acquire { timeout, .. } => {
                assert!(
                    now < deadline,
                    "acquire attempted at {now}, past the deadline"
                );
                assert!(
                    now + millis(timeout) <= deadline,
                    "call may outlive the deadline"
                );
                attempts += 1;
                m.on_acquire_result(
                    now + 1,
                    Err(Failure::new(ErrorKind::Exhausted, "all ids leased")),
                );
                now += 1;
            }
            Action::Wait { until } => {
                assert!(until <= deadline, "waits past the deadline");
                now = until;
            }
            Action::Failed(AcquireError::Timeout {
                waited_ms,
                attempts: n,
                last_error,
            }) => {
                assert_eq!(now, deadline, "failed at {now}, not at the deadline");
                assert_eq!(waited_ms, 60_000);
                assert_eq!(n, attempts);
                assert_eq!(last_error.unwrap().kind, ErrorKind::Exhausted);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // 100, 200, 400 ... ms: about ten attempts fit in 60 s.
    assert!((9..=11).contains(&attempts), "{attempts} attempts");
    assert_eq!(m.state(), LeaseState::Failed);
    assert!(matches!(m.poll_action(now + 1), Action::Failed(_)));
}

#[test]
fn a_hung_startup_call_times_out_at_the_deadline() {
    let config = LeaseConfig::default().with_acquire_timeout(Some(secs(20)));
    let mut m = LeaseMachine::<u32>::new(config, false, None, Jitter::new(1)).unwrap();
    let (_, timeout) = expect_acquire(&mut m, T0);
    assert_eq!(timeout, secs(20));
    // No result ever arrives: the machine itself times the call out and fails startup.
    assert_eq!(expect_wait(&mut m, T0 + 1), T0 + 20_000);
    match m.poll_action(T0 + 20_000) {
        Action::Failed(AcquireError::Timeout {
            last_error: Some(e),
            ..
        }) => assert_eq!(e.kind, ErrorKind::Retry),
        other => panic!("{other:?}"),
    }
    // A late reply is ignored.
    while m.poll_effect().is_some() {}
    m.on_acquire_result(T0 + 20_001, Ok(Grant::new(id(1), 1, secs(3600))));
    assert!(m.poll_effect().is_none());
}

#[test]
fn infinite_acquire_timeout_keeps_trying() {
    // Waiting for a lease as long as it takes: the backoff is capped at the renew interval, as
    // after startup, so a store that holds acquisitions off for a while (an amnesia hold-off)
    // is retried soon after it ends, not hours later.
    let config = LeaseConfig::default().with_acquire_timeout(None);
    let mut m = LeaseMachine::<u32>::new(config, false, None, Jitter::new(1)).unwrap();
    let mut now = T0;
    for _ in 0..40 {
        let (_, timeout) = expect_acquire(&mut m, now);
        assert_eq!(timeout, secs(30));
        m.on_acquire_result(now, Err(retry("down")));
        let until = expect_wait(&mut m, now);
        assert!(until - now <= 30 * 60_000, "{} ms", until - now);
        now = until;
    }
    assert_eq!(expect_wait(&mut m, now - 1), now);
}

#[test]
fn misconfigured_strategy_fails_startup_at_once() {
    let mut m = machine(false);
    expect_acquire(&mut m, T0);
    m.on_acquire_result(
        T0 + 3,
        Err(Failure::new(
            ErrorKind::Misconfigured,
            "POD_NAME is not set",
        )),
    );
    match m.poll_action(T0 + 3) {
        Action::Failed(AcquireError::Fatal(f)) => assert_eq!(f.reason, "POD_NAME is not set"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ttl_below_minimum_is_not_used() {
    // On acquire: the grant is refused and acquisition retried.
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(T0, Ok(Grant::new(id(1), 7, Duration::from_millis(29_999))));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    expect_refused_release(&mut m, T0, 7);
    let until = expect_wait(&mut m, T0);
    expect_acquire(&mut m, until);
    m.on_acquire_result(until, Ok(Grant::new(id(1), 1, secs(30))));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(1), until + 20_000)));

    // On renew: a loss.
    let (mut m, mut f) = held(false, 4, 8 * HOUR);
    let at = expect_wait(&mut m, T0);
    expect_renew(&mut m, at);
    m.on_renew_result(at + 2, Ok(Renewal::new(1, secs(10))));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(
        f.lost[0].0,
        LossReason::IllegalTtl {
            ttl_ms: 10_000,
            min_ttl_ms: 30_000
        }
    );
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert_eq!(
        f.ops(Operation::Renew),
        [(Source::Scheduled, OpResult::Lost)]
    );
    expect_loss_release(&mut m, at + 2, 1);
    assert_eq!(expect_acquire(&mut m, at + 2).0, Source::Reacquire);
}

#[test]
fn renewal_is_scheduled_off_the_renew_interval_or_the_ttl() {
    // Long TTL: renew interval wins. 30 min - 10 s after sending.
    let (mut m, _) = held(false, 1, 8 * HOUR);
    assert_eq!(expect_wait(&mut m, T0), T0 + 30 * 60_000 - MARGIN);
    // Short TTL: (ttl - margin) - margin.
    let (mut m, _) = held(false, 1, 60_000);
    assert_eq!(expect_wait(&mut m, T0), T0 + 40_000);
    // Minimum TTL still leaves time to renew before the local deadline.
    let (mut m, f) = held(false, 1, 30_000);
    assert_eq!(expect_wait(&mut m, T0), T0 + 10_000);
    assert_eq!(f.enabled, Some((id(1), T0 + 20_000)));
    // And a renewal reschedules from its own send time.
    let (mut m, mut f) = held(false, 1, 8 * HOUR);
    let at = expect_wait(&mut m, T0);
    let (lease, source, timeout) = expect_renew(&mut m, at);
    assert_eq!((lease, source, timeout), (1, Source::Scheduled, secs(30)));
    m.on_renew_result(at + 100, Ok(Renewal::new(2, secs(8 * 3600))));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(1), at + 8 * HOUR - MARGIN)));
    assert_eq!(expect_wait(&mut m, at + 100), at + 30 * 60_000 - MARGIN);
    // The renewed lease handle is the one used from now on.
    assert_eq!(expect_renew(&mut m, at + 30 * 60_000 - MARGIN).0, 2);
    assert_eq!(f.cache.map(|c| *c.lease), Some(2));
}

#[test]
fn slow_reply_shortens_the_deadline() {
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    // The reply takes 25 s: the deadline still counts from the send time.
    m.on_acquire_result(T0 + 25_000, Ok(Grant::new(id(2), 1, secs(60))));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(2), T0 + 50_000)));
    // Renewal was due 40 s after sending.
    assert_eq!(expect_wait(&mut m, T0 + 25_000), T0 + 40_000);

    // A reply so slow its deadline has passed is never used.
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(T0 + 31_000, Ok(Grant::new(id(2), 1, secs(40))));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(
        f.ops(Operation::Acquire),
        [(Source::Initial, OpResult::Retry)]
    );
}

#[test]
fn ambiguous_failure_keeps_factories_on_until_local_expiry() {
    let (mut m, mut f) = held(false, 6, 60_000);
    let deadline = T0 + 50_000;
    let mut now = expect_wait(&mut m, T0);
    let mut renew_calls = 0;
    loop {
        match m.poll_action(now) {
            Action::Renew { timeout, .. } => {
                renew_calls += 1;
                assert!(
                    now + millis(timeout) <= deadline,
                    "renew call may outlive the deadline"
                );
                m.on_renew_result(now + 1, Err(retry("connection reset")));
                now += 1;
                f.apply(&mut m);
                assert_eq!(
                    f.enabled,
                    Some((id(6), deadline)),
                    "disabled before local expiry"
                );
            }
            Action::Wait { until } => {
                assert!(until <= deadline);
                now = until;
            }
            Action::Release { lease, .. } => {
                assert_eq!(*lease, 1, "only the lost lease is released");
                m.on_release_result(now, Ok(()));
            }
            Action::Acquire { source, .. } => {
                assert_eq!(source, Source::Reacquire);
                break;
            }
            other => panic!("{other:?}"),
        }
        f.apply(&mut m);
    }
    f.apply(&mut m);
    assert_eq!(
        now, deadline,
        "disabled at {now}, not at the local deadline"
    );
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
    assert!(renew_calls >= 4, "{renew_calls}");
    let retries = f.retries();
    assert!(
        retries
            .iter()
            .all(|(op, _, delay)| *op == Operation::Renew && *delay <= 30 * 60_000)
    );
    assert_eq!(retries[0].1, 1);
    assert!((1000..2000).contains(&retries[0].2));
    assert!((2000..3000).contains(&retries[1].2));
}

#[test]
fn renew_backoff_is_capped_at_the_renew_interval() {
    let config = LeaseConfig::default()
        .with_renew_interval(secs(15))
        .with_renew_backoff_base(secs(10));
    let mut m = LeaseMachine::<u32>::new(config, false, None, Jitter::new(3)).unwrap();
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(T0, Ok(Grant::new(id(1), 1, secs(3600))));
    let at = expect_wait(&mut m, T0);
    assert_eq!(at, T0 + 5_000);
    expect_renew(&mut m, at);
    m.on_renew_result(at, Err(retry("x")));
    let next = expect_wait(&mut m, at);
    expect_renew(&mut m, next);
    m.on_renew_result(next, Err(retry("x")));
    assert_eq!(expect_wait(&mut m, next), next + 15_000);
    f.apply(&mut m);
}

/// The lost lease `lease` is released (to record its floor) before reacquisition begins.
#[track_caller]
fn expect_loss_release(m: &mut LeaseMachine<u32>, now: u64, lease: u32) {
    match m.poll_action(now) {
        Action::Release {
            lease: released, ..
        } => assert_eq!(*released, lease),
        other => panic!("expected the lost lease to be released at {now}, got {other:?}"),
    }
    assert_eq!(m.state(), LeaseState::Reacquiring);
    m.on_release_result(now, Ok(()));
}

#[test]
fn confirmed_loss_disables_calls_back_and_reacquires() {
    let (mut m, mut f) = held(false, 9, 8 * HOUR);
    let at = expect_wait(&mut m, T0);
    expect_renew(&mut m, at);
    m.on_renew_result(at + 7, Err(Failure::new(ErrorKind::Lost, "token mismatch")));
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert_eq!(
        f.lost,
        [(
            LossReason::Lost("token mismatch".into()),
            T0 + 8 * HOUR - MARGIN - at - 7
        )]
    );
    assert!(f.cache.is_none());
    assert_eq!(m.state(), LeaseState::Reacquiring);
    assert_eq!(m.machine_id(), None);
    expect_loss_release(&mut m, at + 7, 1);
    // Reacquisition: immediately, then with backoff, and without a startup deadline.
    let (source, timeout) = expect_acquire(&mut m, at + 7);
    assert_eq!((source, timeout), (Source::Reacquire, secs(30)));
    let mut now = at + 7;
    for _ in 0..12 {
        m.on_acquire_result(now, Err(Failure::new(ErrorKind::Exhausted, "full")));
        now = expect_wait(&mut m, now);
        expect_acquire(&mut m, now);
    }
    m.on_acquire_result(now, Ok(Grant::new(id(10), 2, secs(8 * 3600))));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(10), now + 8 * HOUR - MARGIN)));
    assert_eq!(
        f.ops(Operation::Acquire).last(),
        Some(&(Source::Reacquire, OpResult::Ok))
    );
}

#[test]
fn deterministic_strategies_do_not_reacquire() {
    let (mut m, mut f) = held(true, 9, 8 * HOUR);
    let at = expect_wait(&mut m, T0);
    expect_renew(&mut m, at);
    m.on_renew_result(at, Err(Failure::new(ErrorKind::Lost, "gone")));
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert!(matches!(m.poll_action(at + 1), Action::Halted));
    assert!(matches!(m.poll_action(at + 100 * HOUR), Action::Halted));
    assert_eq!(m.state(), LeaseState::Halted);
    // Shutdown from halted has nothing to release.
    m.shutdown(at + 2);
    assert!(matches!(m.poll_action(at + 2), Action::Stopped));

    // Local expiry halts too.
    let (mut m, mut f) = held(true, 9, 60_000);
    assert!(matches!(m.poll_action(T0 + 50_000), Action::Halted));
    f.apply(&mut m);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
}

#[test]
fn external_loss_signal() {
    let (mut m, mut f) = held(false, 11, 8 * HOUR);
    // A renewal is in flight when the conflict guard fires.
    let at = expect_wait(&mut m, T0);
    expect_renew(&mut m, at);
    assert!(m.lease_lost(at + 1, "conflict with node b"));
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert_eq!(
        f.lost[0].0,
        LossReason::External("conflict with node b".into())
    );
    // The cancelled renewal's late reply must not re-enable anything.
    m.on_renew_result(at + 2, Ok(Renewal::new(1, secs(3600))));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    expect_loss_release(&mut m, at + 2, 1);
    assert_eq!(expect_acquire(&mut m, at + 2).0, Source::Reacquire);
    // Nothing held: the signal is a no-op.
    assert!(!m.lease_lost(at + 3, "again"));
    f.apply(&mut m);
    assert_eq!(f.lost.len(), 1);
}

#[test]
fn cached_lease_is_renewed_first() {
    let cached = CachedLease {
        machine_id: id(42),
        lease: Arc::new(5u32),
        deadline_ms: T0 + HOUR,
        ttl: secs(8 * 3600),
        floor_ms: 0,
        issued_up_to_ms: 0,
    };
    let mut m = LeaseMachine::new(
        LeaseConfig::default(),
        false,
        Some(cached.clone()),
        Jitter::new(1),
    )
    .unwrap();
    let mut f = Factories::default();
    let (lease, source, timeout) = expect_renew(&mut m, T0);
    assert_eq!((lease, source, timeout), (5, Source::Cache, secs(30)));
    assert_eq!(m.state(), LeaseState::Recovering);
    m.on_renew_result(T0 + 3, Ok(Renewal::new(5, secs(8 * 3600))));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(42), T0 + 8 * HOUR - MARGIN)));
    assert_eq!(f.ops(Operation::Renew), [(Source::Cache, OpResult::Ok)]);
    assert_eq!(f.ops(Operation::Acquire), []);

    // The renewal fails: disable (the old manager may have left them on) and acquire anew.
    let mut m = LeaseMachine::new(
        LeaseConfig::default(),
        false,
        Some(cached.clone()),
        Jitter::new(1),
    )
    .unwrap();
    let mut f = Factories {
        enabled: Some((id(42), T0 + HOUR)),
        ..Factories::default()
    };
    expect_renew(&mut m, T0);
    m.on_renew_result(T0 + 3, Err(Failure::new(ErrorKind::Lost, "expired")));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.log, ["disable"]);
    assert_eq!(expect_acquire(&mut m, T0 + 3).0, Source::Initial);

    // An uncertain failure counts as a failure too: renew once, then acquire.
    let mut m = LeaseMachine::new(
        LeaseConfig::default(),
        true,
        Some(cached.clone()),
        Jitter::new(1),
    )
    .unwrap();
    expect_renew(&mut m, T0);
    assert_eq!(expect_wait(&mut m, T0 + 1), T0 + 30_000);
    assert_eq!(expect_acquire(&mut m, T0 + 30_000).0, Source::Initial);

    // A cached lease whose deadline passed: disable at once, still try to renew it.
    let stale = CachedLease {
        deadline_ms: T0 - 1,
        ..cached
    };
    let mut m =
        LeaseMachine::new(LeaseConfig::default(), false, Some(stale), Jitter::new(1)).unwrap();
    let mut f = Factories {
        enabled: Some((id(42), T0 - 1)),
        ..Factories::default()
    };
    expect_renew(&mut m, T0);
    f.apply(&mut m);
    assert_eq!(f.log, ["disable"]);
}

#[test]
fn shutdown_disables_before_release() {
    let (mut m, mut f) = held(false, 8, 8 * HOUR);
    let at = expect_wait(&mut m, T0);
    m.shutdown(at - 5);
    // The disable is applied before the release action is even produced.
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable"]);
    assert!(f.cache.is_none());
    match m.poll_action(at - 5) {
        Action::Release {
            lease,
            guard,
            timeout,
            ..
        } => {
            assert_eq!((*lease, guard, timeout), (1, secs(10), secs(30)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.state(), LeaseState::Releasing);
    m.shutdown(at - 4);
    assert!(m.poll_effect().is_none(), "second shutdown is a no-op");
    m.on_release_result(at - 3, Ok(()));
    f.apply(&mut m);
    assert!(matches!(m.poll_action(at - 3), Action::Stopped));
    assert_eq!(
        f.ops(Operation::Release),
        [(Source::Shutdown, OpResult::Ok)]
    );

    // A release that hangs is given up after the call timeout.
    let (mut m, _) = held(false, 8, 8 * HOUR);
    m.shutdown(T0 + 1);
    assert!(matches!(m.poll_action(T0 + 1), Action::Release { .. }));
    assert_eq!(expect_wait(&mut m, T0 + 2), T0 + 30_001);
    assert!(matches!(m.poll_action(T0 + 30_001), Action::Stopped));

    // Shutdown during startup acquisition: nothing to release.
    let mut m = machine(false);
    expect_acquire(&mut m, T0);
    m.shutdown(T0 + 1);
    assert!(matches!(m.poll_action(T0 + 1), Action::Stopped));
    m.on_acquire_result(T0 + 2, Ok(Grant::new(id(1), 1, secs(3600))));
    assert!(matches!(m.poll_action(T0 + 2), Action::Stopped));
}

#[test]
fn hung_renew_is_bounded_by_the_remaining_validity() {
    let config = LeaseConfig::default().with_call_timeout(secs(3600));
    let mut m = LeaseMachine::<u32>::new(config, false, None, Jitter::new(1)).unwrap();
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(T0, Ok(Grant::new(id(1), 1, secs(60))));
    f.apply(&mut m);
    let at = expect_wait(&mut m, T0);
    let (_, _, timeout) = expect_renew(&mut m, at);
    // 60 s ttl - 10 s margin - 40 s elapsed: 10 s left, not the hour-long call timeout.
    assert_eq!(timeout, secs(10));
    // The call hangs: the machine's own timeout and the local deadline coincide.
    assert_eq!(expect_wait(&mut m, at + 1), T0 + 50_000);
    expect_loss_release(&mut m, T0 + 50_000, 1);
    assert_eq!(expect_acquire(&mut m, T0 + 50_000).0, Source::Reacquire);
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
}

#[test]
fn clock_suspend_past_the_deadline_disables_at_once() {
    let (mut m, mut f) = held(false, 12, 8 * HOUR);
    let deadline = T0 + 8 * HOUR - MARGIN;
    let resumed = deadline + 2 * HOUR;
    // Before anything else runs after resume, the hot path already refuses...
    assert!(!f.can_generate(resumed));
    // ...and the first poll disables and reports the loss before any call.
    let action = m.poll_action(resumed);
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
    assert!(matches!(action, Action::Release { .. }), "{action:?}");
    m.on_release_result(resumed, Ok(()));
    assert_eq!(expect_acquire(&mut m, resumed).0, Source::Reacquire);
    assert!(!f.can_generate(resumed));

    // A suspend during an outstanding renewal whose reply then arrives with a stale deadline.
    let (mut m, mut f) = held(false, 12, 60_000);
    let at = expect_wait(&mut m, T0);
    expect_renew(&mut m, at);
    m.on_renew_result(at + 5 * HOUR, Ok(Renewal::new(1, secs(60))));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
}

#[test]
fn stale_results_are_ignored() {
    let (mut m, mut f) = held(false, 1, 8 * HOUR);
    m.on_renew_result(T0 + 1, Ok(Renewal::new(1, secs(3600))));
    m.on_acquire_result(T0 + 1, Ok(Grant::new(id(2), 2, secs(3600))));
    m.on_release_result(T0 + 1, Ok(()));
    f.apply(&mut m);
    assert_eq!(f.log, ["enable"]);
    assert_eq!(m.machine_id(), Some(id(1)));
}

/// A one-ID coordinator with its own clock and the release guard of the Strategy contract.
struct OneId {
    holder: Option<(u32, u64)>,
    next_token: u32,
}

impl OneId {
    fn acquire(&mut self, now: u64, ttl: u64) -> Result<Grant<u32>, Failure> {
        if self.holder.is_some_and(|(_, expires)| expires > now) {
            return Err(Failure::new(ErrorKind::Exhausted, "held"));
        }
        self.next_token += 1;
        self.holder = Some((self.next_token, now + ttl));
        Ok(Grant::new(
            id(0),
            self.next_token,
            Duration::from_millis(ttl),
        ))
    }

    fn release(&mut self, now: u64, token: u32, guard: u64) {
        if let Some((t, expires)) = &mut self.holder
            && *t == token
        {
            *expires = (*expires).min(now + guard);
        }
    }
}

#[test]
fn release_then_immediate_reacquire_leaves_a_guard_gap() {
    // B's clock runs 9 s behind A's (within the 10 s margin); the coordinator uses A's.
    let skew = 9_000;
    let mut coordinator = OneId {
        holder: None,
        next_token: 0,
    };
    let mut a = machine(false);
    let mut fa = Factories::default();
    let mut b = LeaseMachine::<u32>::new(
        LeaseConfig::default().with_acquire_timeout(None),
        false,
        None,
        Jitter::new(2),
    )
    .unwrap();
    let mut fb = Factories::default();

    expect_acquire(&mut a, T0);
    a.on_acquire_result(T0, coordinator.acquire(T0, 8 * HOUR));
    fa.apply(&mut a);
    let shutdown_at = T0 + 60_000;
    let mut now = T0;
    let mut released = false;
    // B keeps trying while A holds the ID; A shuts down at `shutdown_at`.
    let b_enabled_at = loop {
        if !released && now >= shutdown_at {
            released = true;
            a.shutdown(now);
            fa.apply(&mut a);
            assert!(!fa.can_generate(now));
            let Action::Release { lease, guard, .. } = a.poll_action(now) else {
                panic!("no release")
            };
            coordinator.release(now, *lease, millis(guard));
            a.on_release_result(now, Ok(()));
        }
        match b.poll_action(now - skew) {
            Action::Acquire { .. } => {
                b.on_acquire_result(now - skew, coordinator.acquire(now, 8 * HOUR));
                fb.apply(&mut b);
                if fb.enabled.is_some() {
                    break now - skew;
                }
            }
            Action::Wait { until } => {
                now = until + skew;
                if !released {
                    now = now.min(shutdown_at);
                }
            }
            other => panic!("{other:?}"),
        }
    };
    // A's last possible nonce timestamp is before its disable at T0 + 60 s (A's clock); B's first
    // nonce timestamp (B's clock) must come after it despite the skew.
    let a_last_nonce = shutdown_at - 1;
    assert!(
        b_enabled_at > a_last_nonce,
        "successor enabled at {b_enabled_at}, releaser's last nonce {a_last_nonce}"
    );
    assert!(
        b_enabled_at + skew >= shutdown_at + 10_000,
        "guard not honoured"
    );
}

#[test]
fn invalid_config_is_rejected() {
    let bad = LeaseConfig::default().with_min_ttl(secs(20));
    assert!(LeaseMachine::<u32>::new(bad, false, None, Jitter::new(0)).is_err());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// Reply after `delay` ms with a grant/renewal of `ttl` ms.
        Ok {
            delay: u64,
            ttl: u64,
            machine_id: u16,
        },
        /// Reply after `delay` ms with an error of this kind.
        Err { delay: u64, kind: usize },
        /// Never reply.
        Hang,
        /// The conflict guard fires `delay` ms into the call.
        External { delay: u64 },
        /// Shut down `delay` ms into the call.
        Shutdown { delay: u64 },
        /// The machine sleeps (suspend) `extra` ms past the next wake-up.
        Suspend { extra: u64 },
    }

    const KINDS: [ErrorKind; 7] = [
        ErrorKind::Lost,
        ErrorKind::Retry,
        ErrorKind::Exhausted,
        ErrorKind::Conflict,
        ErrorKind::Unsupported,
        ErrorKind::Misconfigured,
        ErrorKind::Other,
    ];

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        prop_oneof![
            6 => (0..40_000u64, 0..(9 * HOUR), 0..512u16)
                .prop_map(|(delay, ttl, machine_id)| Step::Ok { delay, ttl, machine_id }),
            2 => (0..40_000u64, 25_000..120_000u64, 0..512u16)
                .prop_map(|(delay, ttl, machine_id)| Step::Ok { delay, ttl, machine_id }),
            4 => (0..40_000u64, 0..7usize).prop_map(|(delay, kind)| Step::Err { delay, kind }),
            1 => Just(Step::Hang),
            1 => (0..40_000u64).prop_map(|delay| Step::External { delay }),
            1 => (0..40_000u64).prop_map(|delay| Step::Shutdown { delay }),
            1 => (0..(3 * HOUR)).prop_map(|extra| Step::Suspend { extra }),
        ]
    }

    /// Runs `steps` against a machine and checks the safety invariants after every transition.
    fn run(deterministic: bool, cached: bool, steps: &[Step]) {
        let cache = cached.then(|| CachedLease {
            machine_id: id(1),
            lease: Arc::new(0u32),
            deadline_ms: T0 + 20_000,
            ttl: secs(60),
            floor_ms: 0,
            issued_up_to_ms: 0,
        });
        let mut m = LeaseMachine::new(LeaseConfig::default(), deterministic, cache, Jitter::new(5))
            .unwrap();
        let mut f = Factories::default();
        if cached {
            f.enabled = Some((id(1), T0 + 20_000));
        }
        let mut now = T0;
        let mut started = false;
        let mut steps = steps.iter().cycle().take(steps.len() * 3);
        for _ in 0..500 {
            let held_before = m.state();
            let action = m.poll_action(now);
            check(&mut m, &mut f, now, None);
            let (is_acquire, sent, timeout) = match action {
                Action::Acquire { timeout, .. } => {
                    if !started {
                        assert!(now < T0 + 60_000, "startup acquire after the deadline");
                        assert!(now + ms(timeout) <= T0 + 60_000);
                    }
                    (true, now, timeout)
                }
                Action::Renew { timeout, .. } => {
                    if let LeaseState::Held { deadline_ms, .. } = m.state() {
                        assert!(
                            now + ms(timeout) <= deadline_ms,
                            "renew may outlive the deadline"
                        );
                    }
                    (false, now, timeout)
                }
                Action::Release { .. } => {
                    assert!(f.enabled.is_none(), "release while factories are on");
                    m.on_release_result(now + 1, Ok(()));
                    now += 1;
                    continue;
                }
                Action::Wait { until } => {
                    assert!(until > now);
                    now = match steps.next() {
                        Some(Step::Suspend { extra }) => until + extra,
                        _ => until,
                    };
                    let _ = held_before;
                    continue;
                }
                Action::Halted | Action::Failed(_) | Action::Stopped => return,
                _ => unreachable!(),
            };
            let Some(step) = steps.next() else { return };
            let cap = |delay: u64| sent + delay.min(ms(timeout));
            match step.clone() {
                Step::Ok {
                    delay,
                    ttl,
                    machine_id,
                } => {
                    now = cap(delay);
                    let ttl_d = Duration::from_millis(ttl);
                    if is_acquire {
                        m.on_acquire_result(
                            now,
                            Ok(Grant::new(id(machine_id), machine_id.into(), ttl_d)),
                        );
                    } else {
                        m.on_renew_result(now, Ok(Renewal::new(machine_id.into(), ttl_d)));
                    }
                    check(&mut m, &mut f, now, Some((sent, ttl)));
                }
                Step::Err { delay, kind } => {
                    now = cap(delay);
                    let failure = Failure::new(KINDS[kind], "scripted");
                    if is_acquire {
                        m.on_acquire_result(now, Err(failure));
                    } else {
                        m.on_renew_result(now, Err(failure));
                    }
                    check(&mut m, &mut f, now, None);
                }
                Step::Hang | Step::Suspend { .. } => now = sent + ms(timeout),
                Step::External { delay } => {
                    now = cap(delay);
                    m.lease_lost(now, "scripted conflict");
                    check(&mut m, &mut f, now, None);
                }
                Step::Shutdown { delay } => {
                    now = cap(delay);
                    m.shutdown(now);
                    check(&mut m, &mut f, now, None);
                }
            }
            started |= matches!(m.state(), LeaseState::Held { .. });
        }
    }

    fn ms(d: Duration) -> u64 {
        millis(d)
    }

    /// Applies the effects and checks: factories on only while a lease is held, with its ID and
    /// deadline, and a fresh deadline never later than `sent + ttl - margin`.
    fn check(m: &mut LeaseMachine<u32>, f: &mut Factories, now: u64, reply: Option<(u64, u64)>) {
        let before = f.enabled;
        f.apply(m);
        if f.enabled != before
            && let Some((_, deadline)) = f.enabled
        {
            let (sent, ttl) =
                reply.expect("factories enabled or extended without a successful reply");
            assert!(ttl >= 30_000, "enabled with an illegal ttl {ttl}");
            assert!(
                deadline <= sent + ttl - MARGIN,
                "deadline {deadline} beyond sent {sent} + ttl {ttl} - margin"
            );
            assert!(deadline > now, "enabled with a deadline already passed");
        }
        match m.state() {
            LeaseState::Held {
                machine_id,
                deadline_ms,
            } => {
                assert_eq!(
                    f.enabled,
                    Some((machine_id, deadline_ms)),
                    "held lease not mirrored"
                );
            }
            // A restarted manager has not yet decided about factories a previous one left on.
            LeaseState::Recovering => {}
            state => assert_eq!(
                f.enabled, None,
                "factories on without a held lease in {state:?}"
            ),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn factories_never_outlive_the_lease(
            deterministic in any::<bool>(),
            cached in any::<bool>(),
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            run(deterministic, cached, &steps);
        }
    }
}

/// The enable effect of a machine, with its floor.
fn enabled_floor(m: &mut LeaseMachine<u32>) -> Option<(MachineId, u64, u64)> {
    let mut found = None;
    while let Some(effect) = m.poll_effect() {
        if let Effect::EnableFactories {
            machine_id,
            floor_ms,
            deadline_ms,
        } = effect
        {
            found = Some((machine_id, floor_ms, deadline_ms));
        }
    }
    found
}

#[test]
fn every_call_records_the_latest_deadline_it_can_give_as_the_floor() {
    let mut m = machine(false);
    match m.poll_action(T0) {
        Action::Acquire {
            now_ms, floor_ms, ..
        } => {
            assert_eq!(now_ms, T0);
            assert_eq!(floor_ms, T0 + 8 * HOUR - MARGIN);
        }
        other => panic!("{other:?}"),
    }
    // A coordinator that grants more than was asked cannot stretch the deadline past the
    // floor the request recorded.
    m.on_acquire_result(T0 + 3, Ok(Grant::new(id(4), 1, secs(24 * 3600))));
    let (_, _, deadline) = enabled_floor(&mut m).unwrap();
    assert_eq!(deadline, T0 + 8 * HOUR - MARGIN);
    let at = expect_wait(&mut m, T0 + 3);
    match m.poll_action(at) {
        Action::Renew { floor_ms, .. } => assert_eq!(floor_ms, at + 8 * HOUR - MARGIN),
        other => panic!("{other:?}"),
    }
}

#[test]
fn factories_start_above_the_granted_floor_and_a_floor_ahead_is_reported() {
    let mut m = machine(false);
    expect_acquire(&mut m, T0);
    let floor = T0 + HOUR;
    m.on_acquire_result(
        T0 + 2,
        Ok(Grant::new(id(9), 1, secs(8 * 3600)).with_floor(floor)),
    );
    let mut f = Factories::default();
    let mut enable = None;
    while let Some(effect) = m.poll_effect() {
        match effect {
            Effect::EnableFactories { floor_ms, .. } => enable = Some(floor_ms),
            Effect::Event(e) => f.events.push(e),
            _ => {}
        }
    }
    assert_eq!(enable, Some(floor));
    assert!(f.events.iter().any(|e| matches!(
        e,
        LeaseEvent::FloorAhead { machine_id, floor_ms, ahead_ms }
            if *machine_id == id(9) && *floor_ms == floor && *ahead_ms == HOUR - 2
    )));
    // The release never records less than the floor the lease was granted with.
    m.shutdown(T0 + 10);
    while m.poll_effect().is_some() {}
    match m.poll_action(T0 + 10) {
        Action::Release { floor_ms, .. } => assert_eq!(floor_ms, floor),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_floor_behind_the_clock_is_not_reported() {
    let mut m = machine(false);
    expect_acquire(&mut m, T0);
    m.on_acquire_result(
        T0 + 2,
        Ok(Grant::new(id(9), 1, secs(8 * 3600)).with_floor(T0 - 5)),
    );
    let mut ahead = false;
    while let Some(effect) = m.poll_effect() {
        ahead |= matches!(effect, Effect::Event(LeaseEvent::FloorAhead { .. }));
    }
    assert!(!ahead);
}

/// A machine holding a lease granted at T0 with the coordinator's clock at `coordinator_ms`.
fn held_with_coordinator_clock(coordinator_ms: u64) -> (LeaseMachine<u32>, Factories) {
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(
        T0 + 5,
        Ok(Grant::new(id(3), 1, secs(8 * 3600)).with_coordinator_ms(coordinator_ms)),
    );
    f.apply(&mut m);
    (m, f)
}

#[test]
fn a_coordinator_clock_that_jumps_forward_past_the_margin_is_a_loss() {
    let c0 = T0 + 123_456;
    let (mut m, mut f) = held_with_coordinator_clock(c0);
    let at = expect_wait(&mut m, T0 + 5);
    expect_renew(&mut m, at);
    // Our own clock moved `at + 5 - T0`; the coordinator's moved a minute more than that.
    let moved = at + 5 - T0 + 60_000;
    m.on_renew_result(
        at + 5,
        Ok(Renewal::new(1, secs(8 * 3600)).with_coordinator_ms(c0 + moved)),
    );
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert!(
        matches!(
            &f.lost[..],
            [(
                LossReason::CoordinatorClockJump {
                    ahead_ms: 60_000,
                    margin_ms: MARGIN
                },
                _
            )]
        ),
        "{:?}",
        f.lost
    );
    let message = f.lost[0].0.to_string();
    assert!(message.contains("time synchronisation"), "{message}");
    expect_loss_release(&mut m, at + 5, 1);
    assert_eq!(expect_acquire(&mut m, at + 5).0, Source::Reacquire);
}

#[test]
fn coordinator_clock_moves_within_the_margin_or_backwards_are_no_loss() {
    for step in [0_i64, 10_000, -3_600_000] {
        let c0 = T0 + 50 * HOUR;
        let (mut m, mut f) = held_with_coordinator_clock(c0);
        let at = expect_wait(&mut m, T0 + 5);
        expect_renew(&mut m, at);
        let elapsed = at + 5 - T0;
        let coordinator = (c0 + elapsed).checked_add_signed(step).unwrap();
        m.on_renew_result(
            at + 5,
            Ok(Renewal::new(1, secs(8 * 3600)).with_coordinator_ms(coordinator)),
        );
        f.apply(&mut m);
        assert!(f.lost.is_empty(), "step {step}: {:?}", f.lost);
        assert!(f.can_generate(at + 6), "step {step}");
    }
}

const MAX_OFFSET: u64 = 60_000;

/// A grant sent at T0, answered at T0 + 5, read on a coordinator clock at `coordinator_ms` by a
/// strategy that allows a minute of clock offset.
fn offset_grant(coordinator_ms: u64) -> Grant<u32> {
    Grant::new(id(3), 1, secs(8 * 3600))
        .with_coordinator_ms(coordinator_ms)
        .with_max_clock_offset(Duration::from_millis(MAX_OFFSET))
}

#[test]
fn a_grant_that_does_not_prove_the_clock_within_the_allowed_offset_fails_startup() {
    // Ahead: even the reply's arrival is more than a minute past the coordinator's reading.
    // Behind: even the request's departure is more than a minute short of it.
    for (coordinator_ms, words) in [
        (T0 + 5 - MAX_OFFSET - 1, "60001 ms ahead of"),
        (T0 + MAX_OFFSET + 1, "60001 ms behind"),
    ] {
        let mut m = machine(false);
        let mut f = Factories::default();
        expect_acquire(&mut m, T0);
        m.on_acquire_result(T0 + 5, Ok(offset_grant(coordinator_ms)));
        f.apply(&mut m);
        assert_eq!(f.enabled, None, "{words}");
        expect_grant_given_back(&mut m, T0 + 5, 1);
        match m.poll_action(T0 + 5) {
            Action::Failed(AcquireError::Fatal(failure)) => {
                assert_eq!(failure.kind, ErrorKind::Misconfigured);
                for needle in [words, "60000 ms", "max_clock_offset", "NTP"] {
                    assert!(
                        failure.reason.contains(needle),
                        "{needle}: {}",
                        failure.reason
                    );
                }
            }
            other => panic!("{words}: {other:?}"),
        }
    }
}

#[test]
fn a_grant_within_the_allowed_offset_either_way_is_used() {
    for coordinator_ms in [T0 + 5 - MAX_OFFSET, T0 + MAX_OFFSET] {
        let mut m = machine(false);
        let mut f = Factories::default();
        expect_acquire(&mut m, T0);
        m.on_acquire_result(T0 + 5, Ok(offset_grant(coordinator_ms)));
        f.apply(&mut m);
        assert!(f.can_generate(T0 + 6), "{coordinator_ms}");
    }
    // Without a limit, any offset is accepted.
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(
        T0 + 5,
        Ok(Grant::new(id(3), 1, secs(8 * 3600)).with_coordinator_ms(T0 + 50 * HOUR)),
    );
    f.apply(&mut m);
    assert!(f.can_generate(T0 + 6));
}

#[test]
fn a_renewal_that_shows_the_clock_drifted_past_the_allowed_offset_is_a_loss() {
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(T0 + 5, Ok(offset_grant(T0)));
    f.apply(&mut m);
    assert!(f.can_generate(T0 + 6));
    let at = expect_wait(&mut m, T0 + 5);
    expect_renew(&mut m, at);
    // The coordinator's clock now reads 61 s less than ours (ours stepped forward, say): its
    // rate is within the margin, so this is no coordinator jump, but the offset is too large.
    let coordinator_ms = at + 5 - MAX_OFFSET - 1_000;
    m.on_renew_result(
        at + 5,
        Ok(Renewal::new(1, secs(8 * 3600))
            .with_coordinator_ms(coordinator_ms)
            .with_max_clock_offset(Duration::from_millis(MAX_OFFSET))),
    );
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert!(
        matches!(
            &f.lost[..],
            [(
                LossReason::ClockOffset {
                    ahead: true,
                    offset_ms: 61_000,
                    max_ms: MAX_OFFSET
                },
                _
            )]
        ),
        "{:?}",
        f.lost
    );
    expect_loss_release(&mut m, at + 5, 1);
    // After a loss, the refusal is retried (the clock may be fixed), never a startup failure.
    assert_eq!(expect_acquire(&mut m, at + 5).0, Source::Reacquire);
    m.on_acquire_result(at + 10, Ok(offset_grant(coordinator_ms)));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    expect_grant_given_back(&mut m, at + 10, 1);
    assert!(matches!(m.poll_action(at + 10), Action::Wait { .. }));
    assert_eq!(m.state(), LeaseState::Reacquiring);
}

/// The refused grant `lease` is given back, whatever the machine does next.
#[track_caller]
fn expect_grant_given_back(m: &mut LeaseMachine<u32>, now: u64, lease: u32) {
    match m.poll_action(now) {
        Action::Release {
            lease: released, ..
        } => assert_eq!(*released, lease),
        other => panic!("expected the refused grant to be released at {now}, got {other:?}"),
    }
    m.on_release_result(now, Ok(()));
}

#[test]
fn a_machine_replacing_a_started_one_never_fails_and_labels_reacquisitions() {
    let cached = CachedLease {
        machine_id: id(42),
        lease: Arc::new(5u32),
        deadline_ms: T0 + HOUR,
        ttl: secs(8 * 3600),
        floor_ms: 0,
        issued_up_to_ms: 0,
    };
    let mut m = LeaseMachine::new(LeaseConfig::default(), false, Some(cached), Jitter::new(3))
        .unwrap()
        .after_startup();
    let mut f = Factories {
        enabled: Some((id(42), T0 + HOUR)),
        ..Factories::default()
    };
    expect_renew(&mut m, T0);
    m.on_renew_result(
        T0 + 5,
        Err(Failure::new(
            ErrorKind::Misconfigured,
            "password authentication failed",
        )),
    );
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost.len(), 1, "the lost cached lease is reported");
    expect_loss_release(&mut m, T0 + 5, 5);
    let (source, _) = expect_acquire(&mut m, T0 + 5);
    assert_eq!(source, Source::Reacquire);
    m.on_acquire_result(
        T0 + 10,
        Err(Failure::new(
            ErrorKind::Misconfigured,
            "password authentication failed",
        )),
    );
    f.apply(&mut m);
    assert!(!matches!(m.state(), LeaseState::Failed));
    let until = expect_wait(&mut m, T0 + 10);
    assert_eq!(expect_acquire(&mut m, until).0, Source::Reacquire);
}

/// The refused grant `lease` is given back before anything else happens.
#[track_caller]
fn expect_refused_release(m: &mut LeaseMachine<u32>, now: u64, lease: u32) {
    match m.poll_action(now) {
        Action::Release {
            lease: released,
            guard,
            ..
        } => assert_eq!((*released, guard), (lease, secs(10))),
        other => panic!("expected the refused grant to be released at {now}, got {other:?}"),
    }
    assert!(matches!(m.state(), LeaseState::Starting));
    m.on_release_result(now, Ok(()));
}

#[test]
fn a_grant_that_arrives_after_its_deadline_is_given_back() {
    let config = LeaseConfig::default().with_acquire_timeout(None);
    let mut m = LeaseMachine::new(config, false, None, Jitter::new(7)).unwrap();
    expect_acquire(&mut m, T0);
    // Sent at T0 for 8 h; the reply took longer than the lease less the margin.
    let late = T0 + 8 * HOUR;
    m.on_acquire_result(
        late,
        Ok(Grant::new(id(3), 9, secs(8 * 3600)).with_floor(T0 - 1)),
    );
    match m.poll_action(late) {
        Action::Release {
            lease, floor_ms, ..
        } => assert_eq!((*lease, floor_ms), (9, T0 - 1)),
        other => panic!("{other:?}"),
    }
    // A release that never answers does not hold acquisition up past its timeout; it is sent
    // again before the next acquire attempt (the refused grant counted as a failed one).
    assert_eq!(expect_wait(&mut m, late + 1), late + 30_000);
    let mut now = late + 30_000;
    let next = loop {
        match m.poll_action(now) {
            Action::Wait { until } => now = until,
            other => break other,
        }
    };
    match next {
        Action::Release { lease, .. } => assert_eq!(*lease, 9),
        other => panic!("{other:?}"),
    }
    m.on_release_result(now, Ok(()));
    assert!(matches!(m.poll_action(now), Action::Acquire { .. }));
}

#[test]
fn shutdown_while_giving_back_a_refused_grant_still_releases_it() {
    let mut m = machine(false);
    expect_acquire(&mut m, T0);
    m.on_acquire_result(T0, Ok(Grant::new(id(1), 5, secs(1))));
    m.shutdown(T0);
    match m.poll_action(T0) {
        Action::Release { lease, .. } => assert_eq!(*lease, 5),
        other => panic!("{other:?}"),
    }
    m.on_release_result(T0 + 1, Ok(()));
    assert!(matches!(m.poll_action(T0 + 1), Action::Stopped));
}

#[test]
fn reacquisition_backoff_is_capped_at_the_renew_interval() {
    // After a loss the manager retries forever; its backoff must not grow towards a day.
    let (mut m, mut f) = held(false, 4, 8 * HOUR);
    assert!(m.lease_lost(T0 + 1, "outage"));
    f.apply(&mut m);
    let mut now = T0 + 1;
    expect_loss_release(&mut m, now, 1);
    for attempt in 0..40 {
        match m.poll_action(now) {
            Action::Acquire { .. } => {
                m.on_acquire_result(now + 1, Err(retry("connection refused")));
                now += 1;
            }
            Action::Wait { until } => {
                assert!(
                    until - now <= 30 * 60_000,
                    "attempt {attempt}: waits {} ms",
                    until - now
                );
                now = until;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_lost_lease_is_released_with_its_floor_before_reacquiring() {
    // A coordinator restarted without persistence forgets the lease and the floor its renewals
    // recorded; the holder's renewal is `Lost`. Releasing the lost lease (the manager adds what
    // its factories issued) writes the floor back before anyone can be granted the ID again.
    let mut m = machine(false);
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(
        T0,
        Ok(Grant::new(id(6), 3, secs(8 * 3600)).with_floor(T0 - 500)),
    );
    f.apply(&mut m);
    let at = expect_wait(&mut m, T0);
    expect_renew(&mut m, at);
    m.on_renew_result(at + 1, Err(Failure::new(ErrorKind::Lost, "marker gone")));
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    match m.poll_action(at + 1) {
        Action::Release {
            lease, floor_ms, ..
        } => assert_eq!((*lease, floor_ms), (3, T0 - 500)),
        other => panic!("expected the lost lease to be released, got {other:?}"),
    }
    assert_eq!(m.state(), LeaseState::Reacquiring);
    // A release that fails (the coordinator is still down) is tried again between acquire
    // attempts until it gets through: the floor must reach the coordinator before a successor
    // can be granted the ID there.
    m.on_release_result(at + 2, Err(retry("connection refused")));
    assert_eq!(expect_acquire(&mut m, at + 2).0, Source::Reacquire);
    m.on_acquire_result(at + 3, Err(retry("connection refused")));
    let mut now = expect_wait(&mut m, at + 3);
    for _ in 0..3 {
        match m.poll_action(now) {
            Action::Release {
                lease, floor_ms, ..
            } => assert_eq!((*lease, floor_ms), (3, T0 - 500)),
            other => panic!("expected the failed release again, got {other:?}"),
        }
        m.on_release_result(now + 1, Err(retry("connection refused")));
        assert_eq!(expect_acquire(&mut m, now + 1).0, Source::Reacquire);
        m.on_acquire_result(now + 2, Err(retry("connection refused")));
        now = expect_wait(&mut m, now + 2);
    }
    match m.poll_action(now) {
        Action::Release { lease, .. } => assert_eq!(*lease, 3),
        other => panic!("{other:?}"),
    }
    m.on_release_result(now + 1, Ok(()));
    expect_acquire(&mut m, now + 1);
    m.on_acquire_result(now + 2, Err(retry("connection refused")));
    let later = expect_wait(&mut m, now + 2);
    // Once through, it is not sent again.
    expect_acquire(&mut m, later);
    f.apply(&mut m);
    assert_eq!(
        f.ops(Operation::Release),
        [
            (Source::Reacquire, OpResult::Retry),
            (Source::Reacquire, OpResult::Retry),
            (Source::Reacquire, OpResult::Retry),
            (Source::Reacquire, OpResult::Retry),
            (Source::Reacquire, OpResult::Ok)
        ]
    );

    // The same after the local deadline passed with renewals unanswered.
    let (mut m, mut f) = held(false, 9, 60_000);
    assert!(matches!(m.poll_action(T0 + 60_000), Action::Release { .. }));
    f.apply(&mut m);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
}
