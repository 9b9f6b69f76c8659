//! Deterministic simulation of the lease state machine: fake time, no sleeps.

use std::sync::Arc;
use std::time::Duration;

use lease_core::time::millis;
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
/// The default lease duration, which every acquire and renewal asks for.
const LEASE: u64 = 8 * HOUR;

fn id(n: u16) -> MachineId {
    MachineId::new(n).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A grant of `machine_id` with the handle `lease` for `ttl` ms.
fn grant(machine_id: u16, lease: u32, ttl: u64) -> Grant<u32> {
    Grant::new(id(machine_id), lease, Duration::from_millis(ttl))
}

fn renewal(lease: u32, ttl: u64) -> Renewal<u32> {
    Renewal::new(lease, Duration::from_millis(ttl))
}

fn machine_with(
    config: LeaseConfig,
    deterministic: bool,
    cached: Option<CachedLease<u32>>,
) -> LeaseMachine<u32> {
    LeaseMachine::new(config, deterministic, cached, Jitter::new(7)).unwrap()
}

fn machine(deterministic: bool) -> LeaseMachine<u32> {
    machine_with(LeaseConfig::default(), deterministic, None)
}

/// Lease 5 of `machine_id`, left in the cache by a previous manager with `deadline_ms`.
fn cached(machine_id: u16, deadline_ms: u64) -> CachedLease<u32> {
    CachedLease {
        machine_id: id(machine_id),
        lease: Arc::new(5),
        deadline_ms,
        ttl: secs(8 * 3600),
        floor_ms: 0,
        issued_up_to_ms: 0,
    }
}

fn fail(kind: ErrorKind, reason: &str) -> Failure {
    Failure::new(kind, reason)
}

/// An uncertain failure of any call.
fn refused<T>() -> Result<T, Failure> {
    Err(fail(ErrorKind::Retry, "connection refused"))
}

/// The factories as the driver would keep them, with the checks a generator would make.
#[derive(Debug, Default)]
struct Factories {
    enabled: Option<(MachineId, u64)>,
    /// The floor of the last enable.
    floor: Option<u64>,
    lost: Vec<(LossReason, u64)>,
    events: Vec<LeaseEvent>,
    cache: Option<CachedLease<u32>>,
    log: Vec<&'static str>,
}

impl Factories {
    /// Factories a previous manager left enabled with `machine_id` until `deadline_ms`.
    fn left_on(machine_id: u16, deadline_ms: u64) -> Self {
        Self {
            enabled: Some((id(machine_id), deadline_ms)),
            ..Self::default()
        }
    }

    fn apply(&mut self, m: &mut LeaseMachine<u32>) {
        while let Some(effect) = m.poll_effect() {
            match effect {
                Effect::EnableFactories {
                    machine_id,
                    floor_ms,
                    deadline_ms,
                } => {
                    self.log.push("enable");
                    self.enabled = Some((machine_id, deadline_ms));
                    self.floor = Some(floor_ms);
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

/// The acquire `m` sends at `now`: its source and timeout. Every call records as its floor the
/// latest deadline it can give, `now + lease duration - margin`.
#[track_caller]
fn expect_acquire(m: &mut LeaseMachine<u32>, now: u64) -> (Source, Duration) {
    match m.poll_action(now) {
        Action::Acquire {
            source,
            timeout,
            requested,
            now_ms,
            floor_ms,
        } => {
            assert_eq!(requested, secs(8 * 3600));
            assert_eq!((now_ms, floor_ms), (now, now + LEASE - MARGIN));
            (source, timeout)
        }
        other => panic!("expected acquire at {now}, got {other:?}"),
    }
}

/// The renewal `m` sends at `now`: its lease, source and timeout (and its floor checked, as an
/// acquire's).
#[track_caller]
fn expect_renew(m: &mut LeaseMachine<u32>, now: u64) -> (u32, Source, Duration) {
    match m.poll_action(now) {
        Action::Renew {
            lease,
            source,
            timeout,
            requested,
            floor_ms,
        } => {
            assert_eq!(
                (requested, floor_ms),
                (secs(8 * 3600), now + LEASE - MARGIN)
            );
            (*lease, source, timeout)
        }
        other => panic!("expected renew at {now}, got {other:?}"),
    }
}

/// The release `m` sends at `now`: its lease, guard, timeout and floor.
#[track_caller]
fn expect_release(m: &mut LeaseMachine<u32>, now: u64) -> (u32, Duration, Duration, u64) {
    match m.poll_action(now) {
        Action::Release {
            lease,
            guard,
            timeout,
            floor_ms,
        } => (*lease, guard, timeout, floor_ms),
        other => panic!("expected release at {now}, got {other:?}"),
    }
}

/// `m` releases `lease` at `now` with the default guard while in `state`; the release goes
/// through.
#[track_caller]
fn released(m: &mut LeaseMachine<u32>, now: u64, lease: u32, state: LeaseState) {
    let (released, guard, ..) = expect_release(m, now);
    assert_eq!((released, guard, m.state()), (lease, secs(10), state));
    m.on_release_result(now, Ok(()));
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

#[track_caller]
fn expect_failed(m: &mut LeaseMachine<u32>, now: u64) -> AcquireError {
    match m.poll_action(now) {
        Action::Failed(error) => error,
        other => panic!("expected startup to fail at {now}, got {other:?}"),
    }
}

/// `m`'s first acquire, sent at T0 and answered at `at` with `reply`, its effects applied.
#[track_caller]
fn answered(
    mut m: LeaseMachine<u32>,
    at: u64,
    reply: Result<Grant<u32>, Failure>,
) -> (LeaseMachine<u32>, Factories) {
    let mut f = Factories::default();
    expect_acquire(&mut m, T0);
    m.on_acquire_result(at, reply);
    f.apply(&mut m);
    (m, f)
}

/// A machine granted `machine_id` (lease 1) with `ttl` on its first attempt, answered at T0.
#[track_caller]
fn held(deterministic: bool, machine_id: u16, ttl: u64) -> (LeaseMachine<u32>, Factories) {
    let (m, f) = answered(machine(deterministic), T0, Ok(grant(machine_id, 1, ttl)));
    assert_eq!(f.enabled, Some((id(machine_id), T0 + ttl - MARGIN)));
    (m, f)
}

/// Polls from `from` to the scheduled renewal and answers it `delay` ms after sending with
/// `reply`, its effects applied; when it was sent.
#[track_caller]
fn renewed(
    m: &mut LeaseMachine<u32>,
    f: &mut Factories,
    from: u64,
    delay: u64,
    reply: Result<Renewal<u32>, Failure>,
) -> u64 {
    let at = expect_wait(m, from);
    assert_eq!(expect_renew(m, at).1, Source::Scheduled);
    m.on_renew_result(at + delay, reply);
    f.apply(m);
    at
}

#[test]
fn retries_until_acquired_with_backoff() {
    let mut m = machine(false);
    let mut f = Factories::default();
    let mut now = T0;
    for attempt in 1..=4u32 {
        assert_eq!(expect_acquire(&mut m, now), (Source::Initial, secs(30)));
        m.on_acquire_result(now + 5, refused());
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
    m.on_acquire_result(now + 5, Ok(grant(3, 9, LEASE)));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(3), now + LEASE - MARGIN)));
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
                m.on_acquire_result(now + 1, Err(fail(ErrorKind::Exhausted, "all ids leased")));
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
    expect_failed(&mut m, now + 1);
}

#[test]
fn a_hung_startup_call_times_out_at_the_deadline() {
    let config = LeaseConfig::default().with_acquire_timeout(Some(secs(20)));
    let mut m = machine_with(config, false, None);
    assert_eq!(expect_acquire(&mut m, T0).1, secs(20));
    // No result ever arrives: the machine itself times the call out and fails startup.
    assert_eq!(expect_wait(&mut m, T0 + 1), T0 + 20_000);
    let error = expect_failed(&mut m, T0 + 20_000);
    assert!(
        matches!(&error, AcquireError::Timeout { last_error: Some(e), .. } if e.kind == ErrorKind::Retry),
        "{error:?}"
    );
    // A late reply is ignored.
    while m.poll_effect().is_some() {}
    m.on_acquire_result(T0 + 20_001, Ok(grant(1, 1, HOUR)));
    assert!(m.poll_effect().is_none());
}

#[test]
fn acquisition_without_a_deadline_backs_off_at_most_the_renew_interval() {
    // Waiting for a lease as long as it takes, at startup without an acquire timeout or after a
    // loss: the backoff is capped at the renew interval, so a store that holds acquisitions off
    // for a while (an amnesia hold-off) is retried soon after it ends, not hours later.
    let config = LeaseConfig::default().with_acquire_timeout(None);
    let mut waiting = machine_with(config, false, None);
    let (mut lost, mut f) = held(false, 4, LEASE);
    assert!(lost.lease_lost(T0 + 1, "outage"));
    f.apply(&mut lost);
    released(&mut lost, T0 + 1, 1, LeaseState::Reacquiring);
    for (m, source) in [
        (&mut waiting, Source::Initial),
        (&mut lost, Source::Reacquire),
    ] {
        let mut now = T0 + 1;
        for attempt in 0..40 {
            assert_eq!(expect_acquire(m, now), (source, secs(30)));
            m.on_acquire_result(now + 1, refused());
            let until = expect_wait(m, now + 1);
            let waits = until - now - 1;
            assert!(
                waits <= 30 * 60_000,
                "{source:?} {attempt}: waits {waits} ms"
            );
            now = until;
        }
    }
}

#[test]
fn misconfiguration_fails_startup_at_once() {
    let reply = Err(fail(ErrorKind::Misconfigured, "POD_NAME is not set"));
    let (mut m, _) = answered(machine(false), T0 + 3, reply);
    let error = expect_failed(&mut m, T0 + 3);
    assert!(
        matches!(&error, AcquireError::Fatal(f) if f.reason == "POD_NAME is not set"),
        "{error:?}"
    );
    // An invalid configuration makes no machine at all.
    let bad = LeaseConfig::default().with_min_ttl(secs(20));
    assert!(LeaseMachine::<u32>::new(bad, false, None, Jitter::new(0)).is_err());
}

#[test]
fn ttl_below_minimum_is_not_used() {
    // On acquire: the grant is refused and acquisition retried.
    let (mut m, mut f) = answered(machine(false), T0, Ok(grant(1, 7, 29_999)));
    assert_eq!(f.enabled, None);
    released(&mut m, T0, 7, LeaseState::Starting);
    let until = expect_wait(&mut m, T0);
    expect_acquire(&mut m, until);
    m.on_acquire_result(until, Ok(grant(1, 1, 30_000)));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(1), until + 20_000)));

    // On renew: a loss.
    let (mut m, mut f) = held(false, 4, LEASE);
    let at = renewed(&mut m, &mut f, T0, 2, Ok(renewal(1, 10_000)));
    assert_eq!(f.enabled, None);
    let illegal = LossReason::IllegalTtl {
        ttl_ms: 10_000,
        min_ttl_ms: 30_000,
    };
    assert_eq!(f.lost[0].0, illegal);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert_eq!(
        f.ops(Operation::Renew),
        [(Source::Scheduled, OpResult::Lost)]
    );
    released(&mut m, at + 2, 1, LeaseState::Reacquiring);
    assert_eq!(expect_acquire(&mut m, at + 2).0, Source::Reacquire);
}

#[test]
fn renewal_is_scheduled_off_the_renew_interval_or_the_ttl() {
    // Long TTL: the renew interval wins, 30 min - 10 s after sending. Short TTL:
    // (ttl - margin) - margin. The minimum TTL still leaves time to renew before the local
    // deadline (`held` checks it: sent + ttl - margin).
    for (ttl, renew_at) in [
        (LEASE, T0 + 30 * 60_000 - MARGIN),
        (60_000, T0 + 40_000),
        (30_000, T0 + 10_000),
    ] {
        let (mut m, _) = held(false, 1, ttl);
        assert_eq!(expect_wait(&mut m, T0), renew_at, "ttl {ttl}");
    }
    // And a renewal reschedules from its own send time.
    let (mut m, mut f) = held(false, 1, LEASE);
    let at = expect_wait(&mut m, T0);
    assert_eq!(expect_renew(&mut m, at), (1, Source::Scheduled, secs(30)));
    m.on_renew_result(at + 100, Ok(renewal(2, LEASE)));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(1), at + LEASE - MARGIN)));
    assert_eq!(expect_wait(&mut m, at + 100), at + 30 * 60_000 - MARGIN);
    // The renewed lease handle is the one used from now on.
    assert_eq!(expect_renew(&mut m, at + 30 * 60_000 - MARGIN).0, 2);
    assert_eq!(f.cache.map(|c| *c.lease), Some(2));
}

#[test]
fn slow_reply_shortens_the_deadline() {
    // The reply takes 25 s: the deadline still counts from the send time.
    let (mut m, f) = answered(machine(false), T0 + 25_000, Ok(grant(2, 1, 60_000)));
    assert_eq!(f.enabled, Some((id(2), T0 + 50_000)));
    // Renewal was due 40 s after sending.
    assert_eq!(expect_wait(&mut m, T0 + 25_000), T0 + 40_000);

    // A reply so slow its deadline has passed is never used.
    let (_, f) = answered(machine(false), T0 + 31_000, Ok(grant(2, 1, 40_000)));
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
                m.on_renew_result(now + 1, Err(fail(ErrorKind::Retry, "connection reset")));
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
    let (mut m, mut f) = answered(machine_with(config, false, None), T0, Ok(grant(1, 1, HOUR)));
    assert_eq!(renewed(&mut m, &mut f, T0, 0, refused()), T0 + 5_000);
    let next = renewed(&mut m, &mut f, T0 + 5_000, 0, refused());
    assert_eq!(expect_wait(&mut m, next), next + 15_000);
}

#[test]
fn confirmed_loss_disables_calls_back_and_reacquires() {
    let (mut m, mut f) = held(false, 9, LEASE);
    let lost = Err(fail(ErrorKind::Lost, "token mismatch"));
    let at = renewed(&mut m, &mut f, T0, 7, lost);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    assert_eq!(
        f.lost,
        [(
            LossReason::Lost("token mismatch".into()),
            T0 + LEASE - MARGIN - at - 7
        )]
    );
    assert!(f.cache.is_none());
    assert_eq!(m.machine_id(), None);
    released(&mut m, at + 7, 1, LeaseState::Reacquiring);
    // Reacquisition: immediately, then with backoff, and without a startup deadline.
    let mut now = at + 7;
    assert_eq!(expect_acquire(&mut m, now), (Source::Reacquire, secs(30)));
    for _ in 0..12 {
        m.on_acquire_result(now, Err(fail(ErrorKind::Exhausted, "full")));
        now = expect_wait(&mut m, now);
        expect_acquire(&mut m, now);
    }
    m.on_acquire_result(now, Ok(grant(10, 2, LEASE)));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(10), now + LEASE - MARGIN)));
    assert_eq!(
        f.ops(Operation::Acquire).last(),
        Some(&(Source::Reacquire, OpResult::Ok))
    );
}

#[test]
fn deterministic_strategies_do_not_reacquire() {
    let (mut m, mut f) = held(true, 9, LEASE);
    let at = renewed(&mut m, &mut f, T0, 0, Err(fail(ErrorKind::Lost, "gone")));
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
fn stale_results_are_ignored_and_an_external_loss_signal_is_a_loss() {
    let (mut m, mut f) = held(false, 11, LEASE);
    m.on_renew_result(T0 + 1, Ok(renewal(1, HOUR)));
    m.on_acquire_result(T0 + 1, Ok(grant(2, 2, HOUR)));
    m.on_release_result(T0 + 1, Ok(()));
    f.apply(&mut m);
    assert_eq!(f.log, ["enable"]);
    assert_eq!(m.machine_id(), Some(id(11)));
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
    m.on_renew_result(at + 2, Ok(renewal(1, HOUR)));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    released(&mut m, at + 2, 1, LeaseState::Reacquiring);
    assert_eq!(expect_acquire(&mut m, at + 2).0, Source::Reacquire);
    // Nothing held: the signal is a no-op.
    assert!(!m.lease_lost(at + 3, "again"));
    f.apply(&mut m);
    assert_eq!(f.lost.len(), 1);
}

#[test]
fn cached_lease_is_renewed_first() {
    let resume = |deterministic, deadline_ms| {
        let cache = Some(cached(42, deadline_ms));
        let mut m = machine_with(LeaseConfig::default(), deterministic, cache);
        assert_eq!(expect_renew(&mut m, T0), (5, Source::Cache, secs(30)));
        assert_eq!(m.state(), LeaseState::Recovering);
        m
    };
    let mut m = resume(false, T0 + HOUR);
    let mut f = Factories::default();
    m.on_renew_result(T0 + 3, Ok(renewal(5, LEASE)));
    f.apply(&mut m);
    assert_eq!(f.enabled, Some((id(42), T0 + LEASE - MARGIN)));
    assert_eq!(f.ops(Operation::Renew), [(Source::Cache, OpResult::Ok)]);
    assert_eq!(f.ops(Operation::Acquire), []);

    // The renewal fails: disable (the old manager may have left them on) and acquire anew.
    let mut m = resume(false, T0 + HOUR);
    let mut f = Factories::left_on(42, T0 + HOUR);
    m.on_renew_result(T0 + 3, Err(fail(ErrorKind::Lost, "expired")));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.log, ["disable"]);
    assert_eq!(expect_acquire(&mut m, T0 + 3).0, Source::Initial);

    // An uncertain failure counts as a failure too: renew once, then acquire.
    let mut m = resume(true, T0 + HOUR);
    assert_eq!(expect_wait(&mut m, T0 + 1), T0 + 30_000);
    assert_eq!(expect_acquire(&mut m, T0 + 30_000).0, Source::Initial);

    // A cached lease whose deadline passed: disable at once, still try to renew it.
    let mut m = resume(false, T0 - 1);
    let mut f = Factories::left_on(42, T0 - 1);
    f.apply(&mut m);
    assert_eq!(f.log, ["disable"]);
}

#[test]
fn shutdown_disables_before_release() {
    let (mut m, mut f) = held(false, 8, LEASE);
    let at = expect_wait(&mut m, T0);
    m.shutdown(at - 5);
    // The disable is applied before the release action is even produced.
    f.apply(&mut m);
    assert_eq!(f.log, ["enable", "disable"]);
    assert!(f.cache.is_none());
    let (lease, guard, timeout, _) = expect_release(&mut m, at - 5);
    assert_eq!((lease, guard, timeout), (1, secs(10), secs(30)));
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
    let (mut m, _) = held(false, 8, LEASE);
    m.shutdown(T0 + 1);
    expect_release(&mut m, T0 + 1);
    assert_eq!(expect_wait(&mut m, T0 + 2), T0 + 30_001);
    assert!(matches!(m.poll_action(T0 + 30_001), Action::Stopped));

    // Shutdown during startup acquisition: nothing to release.
    let mut m = machine(false);
    expect_acquire(&mut m, T0);
    m.shutdown(T0 + 1);
    assert!(matches!(m.poll_action(T0 + 1), Action::Stopped));
    m.on_acquire_result(T0 + 2, Ok(grant(1, 1, HOUR)));
    assert!(matches!(m.poll_action(T0 + 2), Action::Stopped));

    // Shutdown while giving back a refused grant still releases it.
    let (mut m, _) = answered(machine(false), T0, Ok(grant(1, 5, 1_000)));
    m.shutdown(T0);
    assert_eq!(expect_release(&mut m, T0).0, 5);
    m.on_release_result(T0 + 1, Ok(()));
    assert!(matches!(m.poll_action(T0 + 1), Action::Stopped));
}

#[test]
fn hung_renew_is_bounded_by_the_remaining_validity() {
    let config = LeaseConfig::default().with_call_timeout(secs(3600));
    let m = machine_with(config, false, None);
    let (mut m, mut f) = answered(m, T0, Ok(grant(1, 1, 60_000)));
    let at = expect_wait(&mut m, T0);
    // 60 s ttl - 10 s margin - 40 s elapsed: 10 s left, not the hour-long call timeout.
    assert_eq!(expect_renew(&mut m, at).2, secs(10));
    // The call hangs: the machine's own timeout and the local deadline coincide.
    assert_eq!(expect_wait(&mut m, at + 1), T0 + 50_000);
    released(&mut m, T0 + 50_000, 1, LeaseState::Reacquiring);
    assert_eq!(expect_acquire(&mut m, T0 + 50_000).0, Source::Reacquire);
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
}

#[test]
fn clock_suspend_past_the_deadline_disables_at_once() {
    let (mut m, mut f) = held(false, 12, LEASE);
    let resumed = T0 + LEASE - MARGIN + 2 * HOUR;
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
    renewed(&mut m, &mut f, T0, 5 * HOUR, Ok(renewal(1, 60_000)));
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost, [(LossReason::LocalExpiry, 0)]);
}

/// A one-ID coordinator with its own clock and the release guard of the Strategy contract.
#[derive(Default)]
struct OneId {
    holder: Option<(u32, u64)>,
    next_token: u32,
}

impl OneId {
    fn acquire(&mut self, now: u64, ttl: u64) -> Result<Grant<u32>, Failure> {
        if self.holder.is_some_and(|(_, expires)| expires > now) {
            return Err(fail(ErrorKind::Exhausted, "held"));
        }
        self.next_token += 1;
        self.holder = Some((self.next_token, now + ttl));
        Ok(grant(0, self.next_token, ttl))
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
    let mut coordinator = OneId::default();
    let mut a = machine(false);
    let mut fa = Factories::default();
    let config = LeaseConfig::default().with_acquire_timeout(None);
    let mut b = machine_with(config, false, None);
    let mut fb = Factories::default();

    expect_acquire(&mut a, T0);
    a.on_acquire_result(T0, coordinator.acquire(T0, LEASE));
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
            let (lease, guard, ..) = expect_release(&mut a, now);
            coordinator.release(now, lease, millis(guard));
            a.on_release_result(now, Ok(()));
        }
        match b.poll_action(now - skew) {
            Action::Acquire { .. } => {
                b.on_acquire_result(now - skew, coordinator.acquire(now, LEASE));
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
        let ok = |(delay, ttl, machine_id)| Step::Ok {
            delay,
            ttl,
            machine_id,
        };
        prop_oneof![
            6 => (0..40_000u64, 0..(9 * HOUR), 0..512u16).prop_map(ok),
            2 => (0..40_000u64, 25_000..120_000u64, 0..512u16).prop_map(ok),
            4 => (0..40_000u64, 0..7usize).prop_map(|(delay, kind)| Step::Err { delay, kind }),
            1 => Just(Step::Hang),
            1 => (0..40_000u64).prop_map(|delay| Step::External { delay }),
            1 => (0..40_000u64).prop_map(|delay| Step::Shutdown { delay }),
            1 => (0..(3 * HOUR)).prop_map(|extra| Step::Suspend { extra }),
        ]
    }

    /// Runs `steps` against a machine and checks the safety invariants after every transition.
    fn run(deterministic: bool, cached: bool, steps: &[Step]) {
        let cache = cached.then(|| super::cached(1, T0 + 20_000));
        let mut m = machine_with(LeaseConfig::default(), deterministic, cache);
        let mut f = if cached {
            Factories::left_on(1, T0 + 20_000)
        } else {
            Factories::default()
        };
        let mut now = T0;
        let mut started = false;
        let mut steps = steps.iter().cycle().take(steps.len() * 3);
        for _ in 0..500 {
            let action = m.poll_action(now);
            check(&mut m, &mut f, now, None);
            let (is_acquire, sent, timeout) = match action {
                Action::Acquire { timeout, .. } => {
                    if !started {
                        assert!(now < T0 + 60_000, "startup acquire after the deadline");
                        assert!(now + millis(timeout) <= T0 + 60_000);
                    }
                    (true, now, timeout)
                }
                Action::Renew { timeout, .. } => {
                    if let LeaseState::Held { deadline_ms, .. } = m.state() {
                        assert!(
                            now + millis(timeout) <= deadline_ms,
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
                    continue;
                }
                Action::Halted | Action::Failed(_) | Action::Stopped => return,
                _ => unreachable!(),
            };
            let Some(step) = steps.next() else { return };
            let cap = |delay: u64| sent + delay.min(millis(timeout));
            // The reply of the call sent: a grant or renewal of `(machine_id, ttl)`, or a failure.
            let mut reply = |m: &mut LeaseMachine<u32>, now, reply: Result<(u16, u64), Failure>| {
                let fresh = reply.as_ref().ok().map(|&(_, ttl)| (sent, ttl));
                if is_acquire {
                    m.on_acquire_result(now, reply.map(|(id, ttl)| grant(id, id.into(), ttl)));
                } else {
                    m.on_renew_result(now, reply.map(|(id, ttl)| renewal(id.into(), ttl)));
                }
                check(m, &mut f, now, fresh);
            };
            match step.clone() {
                Step::Ok {
                    delay,
                    ttl,
                    machine_id,
                } => {
                    now = cap(delay);
                    reply(&mut m, now, Ok((machine_id, ttl)));
                }
                Step::Err { delay, kind } => {
                    now = cap(delay);
                    reply(&mut m, now, Err(fail(KINDS[kind], "scripted")));
                }
                Step::Hang | Step::Suspend { .. } => now = sent + millis(timeout),
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

#[test]
fn every_call_records_its_latest_deadline_as_the_floor_and_factories_start_above_it() {
    // A floor an hour ahead of the clock at the reply (T0 + 2) is reported; one behind it is not.
    for (floor, ahead) in [(T0 + HOUR, Some(HOUR - 2)), (T0 - 5, None)] {
        let reply = Ok(grant(9, 1, LEASE).with_floor(floor));
        let (mut m, f) = answered(machine(false), T0 + 2, reply);
        assert_eq!(f.floor, Some(floor));
        let reported = f
            .events
            .iter()
            .find(|e| matches!(e, LeaseEvent::FloorAhead { .. }));
        let expected = ahead.map(|ahead_ms| LeaseEvent::FloorAhead {
            machine_id: id(9),
            floor_ms: floor,
            ahead_ms,
        });
        assert_eq!(reported, expected.as_ref());
        // The release never records less than the floor the lease was granted with.
        m.shutdown(T0 + 10);
        assert_eq!(expect_release(&mut m, T0 + 10).3, floor);
    }
    // `expect_acquire` and `expect_renew` check each call's floor: `sent + lease - margin`. A
    // coordinator that grants more than was asked cannot stretch the deadline past it.
    let (mut m, f) = answered(machine(false), T0 + 3, Ok(grant(4, 1, 24 * HOUR)));
    assert_eq!(f.enabled, Some((id(4), T0 + LEASE - MARGIN)));
    let at = expect_wait(&mut m, T0 + 3);
    expect_renew(&mut m, at);
}

#[test]
fn a_coordinator_clock_jump_past_the_margin_is_a_loss_other_moves_are_not() {
    // How far the coordinator's clock moves between two grants beyond this node's own elapsed
    // time: a minute is a loss; within the margin, or backwards, it is not.
    let c0 = T0 + 50 * HOUR;
    for step in [60_000_i64, 0, 10_000, -3_600_000] {
        let reply = Ok(grant(3, 1, LEASE).with_coordinator_ms(c0));
        let (mut m, mut f) = answered(machine(false), T0 + 5, reply);
        let at = expect_wait(&mut m, T0 + 5);
        expect_renew(&mut m, at);
        let coordinator = (c0 + at + 5 - T0).checked_add_signed(step).unwrap();
        let reply = renewal(1, LEASE).with_coordinator_ms(coordinator);
        m.on_renew_result(at + 5, Ok(reply));
        f.apply(&mut m);
        if step <= 10_000 {
            assert!(f.lost.is_empty(), "step {step}: {:?}", f.lost);
            assert!(f.can_generate(at + 6), "step {step}");
            continue;
        }
        assert_eq!(f.enabled, None);
        let jump = LossReason::CoordinatorClockJump {
            ahead_ms: 60_000,
            margin_ms: MARGIN,
        };
        assert_eq!(f.lost.iter().map(|l| &l.0).collect::<Vec<_>>(), [&jump]);
        let message = jump.to_string();
        assert!(message.contains("time synchronisation"), "{message}");
        released(&mut m, at + 5, 1, LeaseState::Reacquiring);
        assert_eq!(expect_acquire(&mut m, at + 5).0, Source::Reacquire);
    }
}

const MAX_OFFSET: u64 = 60_000;

/// A grant read on a coordinator clock at `coordinator_ms` by a strategy that allows a minute
/// of clock offset.
fn offset_grant(coordinator_ms: u64) -> Grant<u32> {
    grant(3, 1, LEASE)
        .with_coordinator_ms(coordinator_ms)
        .with_max_clock_offset(Duration::from_millis(MAX_OFFSET))
}

#[test]
fn a_grant_is_used_only_when_it_proves_the_clock_within_the_allowed_offset() {
    // Sent at T0, answered at T0 + 5. Ahead: even the reply's arrival is more than a minute past
    // the coordinator's reading. Behind: even the request's departure is more than a minute
    // short of it. Either fails startup; a minute either way is used.
    for (coordinator_ms, refused) in [
        (T0 + 5 - MAX_OFFSET - 1, Some("60001 ms ahead of")),
        (T0 + MAX_OFFSET + 1, Some("60001 ms behind")),
        (T0 + 5 - MAX_OFFSET, None),
        (T0 + MAX_OFFSET, None),
    ] {
        let (mut m, f) = answered(machine(false), T0 + 5, Ok(offset_grant(coordinator_ms)));
        let Some(words) = refused else {
            assert!(f.can_generate(T0 + 6), "{coordinator_ms}");
            continue;
        };
        assert_eq!(f.enabled, None, "{words}");
        released(&mut m, T0 + 5, 1, LeaseState::Failed);
        let error = expect_failed(&mut m, T0 + 5);
        let AcquireError::Fatal(failure) = &error else {
            panic!("{words}: {error:?}")
        };
        assert_eq!(failure.kind, ErrorKind::Misconfigured);
        for needle in [words, "60000 ms", "max_clock_offset", "NTP"] {
            assert!(
                failure.reason.contains(needle),
                "{needle}: {}",
                failure.reason
            );
        }
    }
    // Without a limit, any offset is accepted.
    let reply = Ok(grant(3, 1, LEASE).with_coordinator_ms(T0 + 50 * HOUR));
    assert!(
        answered(machine(false), T0 + 5, reply)
            .1
            .can_generate(T0 + 6)
    );
}

#[test]
fn a_renewal_that_shows_the_clock_drifted_past_the_allowed_offset_is_a_loss() {
    let (mut m, mut f) = answered(machine(false), T0 + 5, Ok(offset_grant(T0)));
    assert!(f.can_generate(T0 + 6));
    let at = expect_wait(&mut m, T0 + 5);
    expect_renew(&mut m, at);
    // The coordinator's clock now reads 61 s less than ours (ours stepped forward, say): its
    // rate is within the margin, so this is no coordinator jump, but the offset is too large.
    let coordinator_ms = at + 5 - MAX_OFFSET - 1_000;
    let reply = renewal(1, LEASE)
        .with_coordinator_ms(coordinator_ms)
        .with_max_clock_offset(Duration::from_millis(MAX_OFFSET));
    m.on_renew_result(at + 5, Ok(reply));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    let offset = LossReason::ClockOffset {
        ahead: true,
        offset_ms: 61_000,
        max_ms: MAX_OFFSET,
    };
    assert_eq!(f.lost.iter().map(|l| &l.0).collect::<Vec<_>>(), [&offset]);
    released(&mut m, at + 5, 1, LeaseState::Reacquiring);
    // After a loss, the refusal is retried (the clock may be fixed), never a startup failure.
    assert_eq!(expect_acquire(&mut m, at + 5).0, Source::Reacquire);
    m.on_acquire_result(at + 10, Ok(offset_grant(coordinator_ms)));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    released(&mut m, at + 10, 1, LeaseState::Reacquiring);
    assert!(matches!(m.poll_action(at + 10), Action::Wait { .. }));
}

#[test]
fn a_machine_replacing_a_started_one_never_fails_and_labels_reacquisitions() {
    let cache = Some(cached(42, T0 + HOUR));
    let mut m = machine_with(LeaseConfig::default(), false, cache).after_startup();
    let mut f = Factories::left_on(42, T0 + HOUR);
    let password = fail(ErrorKind::Misconfigured, "password authentication failed");
    expect_renew(&mut m, T0);
    m.on_renew_result(T0 + 5, Err(password.clone()));
    f.apply(&mut m);
    assert_eq!(f.enabled, None);
    assert_eq!(f.lost.len(), 1, "the lost cached lease is reported");
    released(&mut m, T0 + 5, 5, LeaseState::Reacquiring);
    assert_eq!(expect_acquire(&mut m, T0 + 5).0, Source::Reacquire);
    m.on_acquire_result(T0 + 10, Err(password));
    f.apply(&mut m);
    assert!(!matches!(m.state(), LeaseState::Failed));
    let until = expect_wait(&mut m, T0 + 10);
    assert_eq!(expect_acquire(&mut m, until).0, Source::Reacquire);
}

#[test]
fn a_grant_that_arrives_after_its_deadline_is_given_back() {
    let config = LeaseConfig::default().with_acquire_timeout(None);
    // Sent at T0 for 8 h; the reply took longer than the lease less the margin.
    let late = T0 + LEASE;
    let reply = Ok(grant(3, 9, LEASE).with_floor(T0 - 1));
    let (mut m, _) = answered(machine_with(config, false, None), late, reply);
    let (lease, _, _, floor) = expect_release(&mut m, late);
    assert_eq!((lease, floor), (9, T0 - 1));
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
    assert!(
        matches!(&next, Action::Release { lease, .. } if **lease == 9),
        "{next:?}"
    );
    m.on_release_result(now, Ok(()));
    expect_acquire(&mut m, now);
}

#[test]
fn a_lost_lease_is_released_with_its_floor_before_reacquiring() {
    // A coordinator restarted without persistence forgets the lease and the floor its renewals
    // recorded; the holder's renewal is `Lost`. Releasing the lost lease (the manager adds what
    // its factories issued) writes the floor back before anyone can be granted the ID again.
    let reply = Ok(grant(6, 3, LEASE).with_floor(T0 - 500));
    let (mut m, mut f) = answered(machine(false), T0, reply);
    let lost = Err(fail(ErrorKind::Lost, "marker gone"));
    let at = renewed(&mut m, &mut f, T0, 1, lost);
    assert_eq!(f.log, ["enable", "disable", "lost"]);
    let released_floor = |m: &mut LeaseMachine<u32>, now| {
        let (lease, _, _, floor) = expect_release(m, now);
        assert_eq!(
            (lease, floor, m.state()),
            (3, T0 - 500, LeaseState::Reacquiring)
        );
    };
    // A release that fails (the coordinator is still down) is tried again between acquire
    // attempts until it gets through: the floor must reach the coordinator before a successor
    // can be granted the ID there.
    let mut now = at + 1;
    for _ in 0..4 {
        released_floor(&mut m, now);
        m.on_release_result(now + 1, refused());
        assert_eq!(expect_acquire(&mut m, now + 1).0, Source::Reacquire);
        m.on_acquire_result(now + 2, refused());
        now = expect_wait(&mut m, now + 2);
    }
    released_floor(&mut m, now);
    m.on_release_result(now + 1, Ok(()));
    expect_acquire(&mut m, now + 1);
    m.on_acquire_result(now + 2, refused());
    let later = expect_wait(&mut m, now + 2);
    // Once through, it is not sent again.
    expect_acquire(&mut m, later);
    f.apply(&mut m);
    let retried = (Source::Reacquire, OpResult::Retry);
    let ok = (Source::Reacquire, OpResult::Ok);
    let releases = f.ops(Operation::Release);
    assert_eq!(releases, [retried, retried, retried, retried, ok]);
}
