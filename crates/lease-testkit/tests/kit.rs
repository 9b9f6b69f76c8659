//! The suite passes the reference strategy and catches each deliberate flaw.

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use lease_core::{
    Acquire, BoxStrategy, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};
use lease_testkit::memory::{Flaw, MemoryStore};
use lease_testkit::{Capabilities, Check, Options, Outcome, Report};

const HOUR: Duration = Duration::from_secs(3600);

fn options() -> Options {
    Options::new(HOUR)
}

/// The store itself as harness: `expire` is supported.
async fn with_hooks(store: MemoryStore, options: &Options) -> Report {
    lease_testkit::run(|| async { store.clone().with_capacity(512) }, options).await
}

/// A closure as harness: no `expire`, so the suite waits out TTLs.
async fn without_hooks(store: MemoryStore, options: &Options) -> Report {
    lease_testkit::run(
        || {
            let store = store.clone().with_capacity(512);
            async move {
                move || {
                    let store = store.clone();
                    async move { store.strategy() }
                }
            }
        },
        options,
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn reference_strategy_passes_every_check_with_hooks() {
    let report = lease_testkit::conformance(|| async { MemoryStore::new() }, &options()).await;
    assert_eq!(report.results.len(), Check::ALL.len());
    assert_eq!(report.strategy, "memory");
    for (check, outcome) in &report.results {
        let expected = if *check == Check::Deterministic {
            matches!(outcome, Outcome::Skipped(_))
        } else {
            *outcome == Outcome::Passed
        };
        assert!(expected, "{check}: {outcome:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn reference_strategy_passes_every_check_without_hooks() {
    let started = tokio::time::Instant::now();
    let report = without_hooks(MemoryStore::new(), &options()).await;
    report.assert_passed();
    assert_eq!(report.failed(), []);
    assert_eq!(
        report.outcome(Check::LostAfterTakeover),
        Some(&Outcome::Passed)
    );
    // Waiting out the TTL is what replaced `expire`.
    assert!(started.elapsed() > HOUR);
}

/// Each deliberate flaw fails the check named beside it, with the store as harness (`expire`
/// supported) and, where `closure` says so, with a closure that waits out TTLs instead.
#[tokio::test(start_paused = true)]
async fn each_flaw_is_caught() {
    use {Check as C, Flaw as F};
    for (flaw, check, closure) in [
        (F::LoserRecordsFloor, C::Herd, true),
        (F::RenewRevivesReleased, C::RenewAfterRelease, false),
        (F::RacyAcquire, C::DistinctIds, false),
        (F::RenewIgnoresToken, C::LostAfterTakeover, true),
        (F::RenewRotatesToken, C::RenewIsIdempotent, false),
        (F::LostAsRetry, C::LostAfterTakeover, false),
        (F::ReleaseFreesAtOnce, C::ReleaseGuard, false),
        (F::ReleaseIgnoresToken, C::LostAfterTakeover, true),
        (F::OverGrantsTtl, C::TtlHonoured, false),
        (F::ExpiresEarly, C::TtlHonoured, false),
        (F::NoExhausted, C::Exhausted, false),
        (F::ForgetsFloor, C::FloorTravels, true),
        (F::RenewLowersFloor, C::FloorTravels, true),
        (F::ReleaseFloorIgnoresToken, C::FloorTravels, true),
        (F::LostReleaseKeepsFloor, C::FloorTravels, true),
        (F::ForgetsFloor, C::FloorRecorded, true),
        (F::RenewLowersFloor, C::FloorRecorded, true),
        (F::AcquireLowersFloor, C::FloorRecorded, true),
        (F::LostRenewRaisesFloor, C::FloorRecorded, true),
        (F::IgnoresFloorPreference, C::FloorPreferred, true),
        (F::ForgetsFloor, C::FloorPreferred, false),
    ] {
        let store = MemoryStore::new().with_flaw(flaw);
        let mut reports = vec![with_hooks(store.clone(), &options()).await];
        if closure {
            reports.push(without_hooks(store, &options()).await);
        }
        for report in reports {
            assert!(
                report.failed().contains(&check),
                "{flaw:?} not caught by {check}:\n{report}"
            );
            assert!(report.to_string().contains(&format!("FAILED  {check}")));
        }
    }
}

/// The reference store behind the object-safe [`BoxStrategy`], as a strategy chosen at run
/// time reaches it.
struct Boxed(MemoryStore);

impl lease_testkit::Harness for Boxed {
    type Strategy = BoxStrategy;

    fn node(&self) -> impl Future<Output = BoxStrategy> + Send {
        let strategy: BoxStrategy = Box::new(self.0.strategy());
        async move { strategy }
    }

    fn expire(&self, id: MachineId) -> impl Future<Output = bool> + Send {
        self.0.expire(id);
        async { true }
    }
}

#[tokio::test(start_paused = true)]
async fn a_boxed_strategy_carries_the_floor_and_its_plain_release_keeps_it() {
    let outcome = lease_testkit::run_check(
        Check::FloorTravels,
        || async { Boxed(MemoryStore::new().with_capacity(512)) },
        &options(),
    )
    .await;
    assert_eq!(outcome, Outcome::Passed);
}

#[tokio::test(start_paused = true)]
async fn capped_ttl_needs_a_lower_min_ttl() {
    let capped = || async { MemoryStore::new().with_max_ttl(HOUR / 3) };
    let report = lease_testkit::run(capped, &options()).await;
    assert_eq!(report.failed(), [Check::TtlHonoured], "{report}");
    lease_testkit::conformance(capped, &options().with_min_ttl(HOUR / 3)).await;
}

#[tokio::test(start_paused = true)]
async fn a_small_store_fails_the_fill_checks_unless_declared_partial() {
    let small = || async { MemoryStore::new().with_capacity(64) };
    let report = lease_testkit::run(small, &options()).await;
    for check in [Check::Exhausted, Check::ReleaseGuard, Check::Herd] {
        assert!(report.failed().contains(&check), "{check}: {report}");
    }

    let partial = options().with_capabilities(Capabilities::DYNAMIC_PARTIAL);
    let report = lease_testkit::conformance(small, &partial).await;
    assert!(matches!(
        report.outcome(Check::Exhausted),
        Some(Outcome::Skipped(_))
    ));
    assert_eq!(
        report.outcome(Check::LostAfterTakeover),
        Some(&Outcome::Passed)
    );
}

/// A static strategy: always ID 7. With a drift, every acquire moves on by one more.
struct Fixed(Option<&'static AtomicU16>);

impl Strategy for Fixed {
    type Lease = MachineId;
    type Error = core::convert::Infallible;

    async fn acquire(&self, request: Acquire) -> Result<Grant<MachineId>, Self::Error> {
        let id = 7 + self.0.map_or(0, |d| d.fetch_add(1, Ordering::Relaxed));
        let id = MachineId::new(id).unwrap();
        Ok(Grant::new(id, id, request.requested))
    }
    async fn renew(
        &self,
        id: &MachineId,
        request: Renew,
    ) -> Result<Renewal<MachineId>, Self::Error> {
        Ok(Renewal::new(*id, request.requested))
    }
    async fn release(&self, _: &MachineId, _: Release) -> Result<(), Self::Error> {
        Ok(())
    }
    fn check_terms(&self, _: &LeaseTerms) -> Result<(), Self::Error> {
        Ok(())
    }
    fn profile(&self) -> Profile {
        Profile::new("fixed").deterministic()
    }
}

#[tokio::test(start_paused = true)]
async fn static_strategies_run_the_relevant_checks() {
    let options = Options::new(Duration::from_secs(60)).with_capabilities(Capabilities::STATIC);
    let report = lease_testkit::conformance(|| async { || async { Fixed(None) } }, &options).await;
    for check in Check::ALL {
        use Check as C;
        let applies = [
            C::RenewKeepsId,
            C::RenewIsIdempotent,
            C::TtlHonoured,
            C::Deterministic,
        ];
        let outcome = report.outcome(check);
        if applies.contains(&check) {
            assert_eq!(outcome, Some(&Outcome::Passed), "{check}");
        } else {
            assert!(matches!(outcome, Some(Outcome::Skipped(_))), "{check}");
        }
    }

    static DRIFT: AtomicU16 = AtomicU16::new(0);
    let drifting = || async { || async { Fixed(Some(&DRIFT)) } };
    let report = lease_testkit::run(drifting, &options).await;
    assert_eq!(report.failed(), [Check::Deterministic], "{report}");
}

#[tokio::test]
#[should_panic(expected = "guard must be positive")]
async fn invalid_options_are_rejected() {
    let options = options().with_guard(Duration::ZERO);
    lease_testkit::run(|| async { MemoryStore::new() }, &options).await;
}

#[test]
fn options_validation_names_the_setting() {
    assert!(options().validate().is_ok());
    let err = options().with_guard(HOUR).validate().unwrap_err();
    assert!(err.contains("guard"), "{err}");
    let err = options().with_concurrency(0).validate().unwrap_err();
    assert!(err.contains("concurrency"), "{err}");
    let err = options().with_min_ttl(2 * HOUR).validate().unwrap_err();
    assert!(err.contains("min_ttl"), "{err}");
}

fn generated_options() -> Options {
    Options::new(Duration::from_millis(400)).with_slack(Duration::from_millis(20))
}

/// The generated tests, on real time with short leases. The memory store is not deterministic.
mod generated {
    use lease_testkit::memory::MemoryStore;

    lease_testkit::conformance_tests!(
        || async { MemoryStore::new() },
        super::generated_options(),
        does_not_apply: [deterministic]
    );
}

/// The generated tests with the capabilities of a static strategy: only the checks every
/// strategy must pass apply.
mod generated_static {
    use lease_testkit::{Capabilities, memory::MemoryStore};

    lease_testkit::conformance_tests!(
        || async { MemoryStore::new() },
        super::generated_options().with_capabilities(Capabilities::STATIC),
        does_not_apply: [
            distinct_ids,
            lost_after_takeover,
            release_guard,
            exhausted,
            deterministic,
            floor_travels,
            floor_recorded,
            floor_preferred,
            herd,
            renew_after_release,
        ]
    );
}

/// The tests of this binary that libtest lists, with `--ignored` only the ignored ones.
fn listed_tests(ignored: bool) -> Vec<String> {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args(["--list", "--format", "terse"]);
    if ignored {
        command.arg("--ignored");
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_owned)
        .collect()
}

/// A check that does not apply is reported by cargo as ignored, never as passed: for each
/// generated module, the checks the suite skips for its harness are exactly the ones generated
/// ignored, and each check that applies is a test that runs.
#[test]
fn checks_that_do_not_apply_are_reported_as_ignored() {
    let all = listed_tests(false);
    let ignored = listed_tests(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    for (module, capabilities) in [
        ("generated", Capabilities::DYNAMIC),
        ("generated_static", Capabilities::STATIC),
    ] {
        // As libtest names the tests: this file's module path without the crate's name.
        let file = module_path!().split_once("::").map_or("", |(_, m)| m);
        let options = options().with_capabilities(capabilities);
        let report = runtime.block_on(lease_testkit::run(
            || async { MemoryStore::new() },
            &options,
        ));
        report.assert_passed();
        for (check, outcome) in &report.results {
            let test = format!("{file}::{module}::{check}");
            assert!(all.contains(&test), "{test} is not generated: {all:?}");
            let skipped = matches!(outcome, Outcome::Skipped(_));
            assert_eq!(
                ignored.contains(&test),
                skipped,
                "{test}: the suite says {outcome:?}; ignored tests: {ignored:?}"
            );
        }
        // The list of checks that do not apply is itself checked by a test that runs.
        let listed = format!("{file}::{module}::listed_checks_do_not_apply");
        assert!(
            all.contains(&listed) && !ignored.contains(&listed),
            "{all:?}"
        );
    }
}

/// A generated test of a check that does not apply fails unless the check is listed as not
/// applying, the test of a listed check fails if the check applies, and a generated test fails
/// when its check fails (`run_test` is what each generated test calls).
#[test]
fn a_check_that_does_not_apply_never_passes_unlisted() {
    let options = generated_options();
    let store = || async { MemoryStore::new() };
    let run = |check, listed: bool| {
        std::panic::catch_unwind(|| {
            if listed {
                lease_testkit::__private::run_not_applying(&[check], store, &options);
            } else {
                lease_testkit::__private::run_test(check, store, &options);
            }
        })
        .is_ok()
    };
    // The memory store is not deterministic: the check does not apply.
    assert!(!run(Check::Deterministic, false));
    assert!(run(Check::Deterministic, true));
    // Exhaustion applies to it.
    assert!(run(Check::Exhausted, false));
    assert!(!run(Check::Exhausted, true));
    // A generated test fails when its check fails.
    let flawed = || async { MemoryStore::new().with_flaw(Flaw::RenewRotatesToken) };
    let run_flawed = |check| {
        std::panic::catch_unwind(|| lease_testkit::__private::run_test(check, flawed, &options))
    };
    assert!(run_flawed(Check::RenewIsIdempotent).is_err());
    assert!(run_flawed(Check::Exhausted).is_ok());
}

/// The reference strategy with every acquire answered `delay` late: a store on a loaded machine.
struct Slow {
    inner: lease_testkit::memory::MemoryStrategy,
    delay: Duration,
}

impl Strategy for Slow {
    type Lease = lease_testkit::memory::MemoryLease;
    type Error = lease_testkit::memory::MemoryLeaseError;

    async fn acquire(&self, request: Acquire) -> Result<Grant<Self::Lease>, Self::Error> {
        tokio::time::sleep(self.delay).await;
        self.inner.acquire(request).await
    }
    async fn renew(
        &self,
        lease: &Self::Lease,
        request: Renew,
    ) -> Result<Renewal<Self::Lease>, Self::Error> {
        self.inner.renew(lease, request).await
    }
    async fn release(&self, lease: &Self::Lease, request: Release) -> Result<(), Self::Error> {
        self.inner.release(lease, request).await
    }
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Self::Error> {
        self.inner.check_terms(terms)
    }
    fn profile(&self) -> Profile {
        self.inner.profile()
    }
}

/// Runs `check` on fresh memory stores whose acquires each take `delay`, with leases of 10 s;
/// the outcome and how many harnesses the runs took.
async fn run_slowly(check: Check, delay: Duration) -> (Outcome, u32) {
    let harnesses = std::sync::atomic::AtomicU32::new(0);
    let outcome = lease_testkit::run_check(
        check,
        || {
            harnesses.fetch_add(1, Ordering::Relaxed);
            let store = MemoryStore::new();
            async move {
                move || {
                    let inner = store.strategy();
                    async move { Slow { inner, delay } }
                }
            }
        },
        &Options::new(Duration::from_secs(10)),
    )
    .await;
    (outcome, harnesses.into_inner())
}

/// 512 acquires of 25 ms each outlast leases of 10 s: the first ID comes free during the fill,
/// which proves nothing, so the check runs again with leases of 20 s, on a fresh store, and
/// passes.
#[tokio::test(start_paused = true)]
async fn a_check_too_slow_for_its_leases_runs_again_with_longer_ones() {
    let (outcome, harnesses) = run_slowly(Check::Exhausted, Duration::from_millis(25)).await;
    assert_eq!(outcome, Outcome::Passed);
    assert_eq!(harnesses, 2);
}

/// At 100 ms an acquire, the fill outlasts leases of 10 s, 20 s and 40 s: after
/// `RUNS_WHEN_TOO_SLOW` runs the check fails, saying it could not conclude, not that the
/// strategy handed out a held ID.
#[tokio::test(start_paused = true)]
async fn a_check_too_slow_every_time_fails_saying_so() {
    let (outcome, harnesses) = run_slowly(Check::Exhausted, Duration::from_millis(100)).await;
    let Outcome::Failed(why) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        why.starts_with("the check was too slow to conclude"),
        "{why}"
    );
    assert_eq!(harnesses, lease_testkit::RUNS_WHEN_TOO_SLOW);
}
