//! Handover of one machine ID between two nodes whose clocks disagree, through a real
//! [`LeaseManager`] and real nonce factories.
//!
//! [`run`] fills the store until one ID is free, lets node A lease it and generate, ends A's
//! lease (by a graceful release, or by a crash and the lease's expiry), lets node B, whose
//! clock is `offset_ms` off A's, lease the same ID and generate, and reports every nonce of B
//! that repeats one of A's and whether B's timestamps fell among A's (`never-twice` judges
//! both). With the timestamp floor a store that
//! [records floors](lease_core::Profile::records_floor) does neither, whatever the offset;
//! without it (see [`Scenario::without_floor`]) a successor whose clock lags by a little more
//! than the margin does both, which is how the scenario proves that it can fail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{
    Acquire, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};
use lease_manager::LeaseConfig;
use lease_manager::LeaseManager;
pub use never_twice::Kind;
use never_twice::{Holders, Overlap, Seen};
use nonce_core::{BootClock, Clock, Error as NonceError, Factory, FactoryConfig};

use crate::Harness;

/// How node A's lease ends before node B takes the ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum End {
    /// A shuts down: factories off, then a release (with the guard).
    Release,
    /// A crashes (its manager is dropped, nothing is released) and its lease ends in the store
    /// at once ([`Harness::expire`]), as an expiry or an operator's force release would end it.
    Expiry,
}

/// A set of nonce kinds a node generates: one kind per size, as a factory requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kinds {
    /// counter64, sortable96, counter128.
    CounterSortableCounter,
    /// sortable64, counter96, sortable128.
    SortableCounterSortable,
}

impl Kinds {
    const fn all(self) -> [Kind; 3] {
        match self {
            Self::CounterSortableCounter => [Kind::Counter64, Kind::Sortable96, Kind::Counter128],
            Self::SortableCounterSortable => [Kind::Sortable64, Kind::Counter96, Kind::Sortable128],
        }
    }
}

/// One handover to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// How far B's clock is from A's, in ms (negative: B is behind), as the handover would
    /// see it on an idle machine: when A's end and B's start take longer than the scenario
    /// plans (the release guard; nothing after an expiry), a B that is behind lags by that
    /// much more, so that its first timestamps still fall where the scenario puts them.
    pub offset_ms: i64,
    /// How A's lease ends.
    pub end: End,
    /// What both nodes generate.
    pub kinds: Kinds,
    /// How long each node generates.
    pub active: Duration,
    /// Strip the timestamp floor from the strategy (to show the scenario finds duplicates
    /// without it).
    pub without_floor: bool,
}

impl Scenario {
    /// B's clock `offset_ms` off A's, A's lease ending by `end`, each node generating `kinds`
    /// for 400 ms, with the floor.
    #[must_use]
    pub const fn new(offset_ms: i64, end: End, kinds: Kinds) -> Self {
        Self {
            offset_ms,
            end,
            kinds,
            active: Duration::from_millis(400),
            without_floor: false,
        }
    }

    /// The same scenario with each node generating for `active`.
    #[must_use]
    pub const fn with_active(mut self, active: Duration) -> Self {
        self.active = active;
        self
    }

    /// The same scenario with the timestamp floor stripped from the strategy.
    #[must_use]
    pub const fn without_floor(mut self) -> Self {
        self.without_floor = true;
        self
    }

    /// The scenarios every floor-recording backend should pass: clocks an hour and a few
    /// margins apart in both directions, both ends, both kind sets.
    #[must_use]
    pub fn standard() -> Vec<Self> {
        // Two margins behind: without the floor, B's first timestamps fall among A's last.
        let behind = -i64::try_from(2 * MARGIN.as_millis()).unwrap_or(i64::MAX);
        let hour = 3_600_000;
        // After a crash the floor is A's whole lease ahead: B's counters start past it once its
        // own deadline does, so B generates longer to get there.
        let long = Duration::from_millis(1500);
        vec![
            Self::new(behind, End::Release, Kinds::CounterSortableCounter),
            Self::new(behind, End::Release, Kinds::SortableCounterSortable),
            Self::new(behind, End::Expiry, Kinds::CounterSortableCounter).with_active(long),
            Self::new(behind, End::Expiry, Kinds::SortableCounterSortable).with_active(long),
            Self::new(-behind, End::Release, Kinds::SortableCounterSortable),
            Self::new(-behind, End::Expiry, Kinds::CounterSortableCounter),
            Self::new(-hour, End::Release, Kinds::CounterSortableCounter),
            Self::new(-hour, End::Expiry, Kinds::SortableCounterSortable),
            Self::new(hour, End::Release, Kinds::SortableCounterSortable),
            Self::new(hour, End::Expiry, Kinds::CounterSortableCounter),
        ]
    }
}

/// What a handover produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoverReport {
    /// The ID handed over.
    pub machine_id: MachineId,
    /// Nonces A issued, all kinds.
    pub issued_a: usize,
    /// Nonces B issued, all kinds.
    pub issued_b: usize,
    /// B's calls refused with `WouldBlock` (its clock was behind the floor and could not wait)
    /// or `LeaseExpired` (the floor was at or past its deadline).
    pub refused_b: usize,
    /// B's nonces equal to one of A's of the same kind and size.
    pub duplicates: usize,
    /// B's timestamps among A's on the ID: the hazard behind a duplicate, found even when no
    /// value repeats.
    pub overlap: Option<Overlap>,
}

/// The lease of a scenario whose clocks differ by a few margins: short, so the floor a crashed
/// node leaves is only seconds ahead.
const SHORT_LEASE: Duration = Duration::from_secs(2);
/// The lease of a scenario whose clocks differ by up to an hour: longer than the offset, as
/// real leases are (8 h by default), or the lagging node's whole lease would lie below the floor.
const LONG_LEASE: Duration = Duration::from_secs(2 * 3600);
const MARGIN: Duration = Duration::from_millis(300);

impl Scenario {
    fn lease(&self) -> Duration {
        if self.offset_ms.unsigned_abs() > 10_000 {
            LONG_LEASE
        } else {
            SHORT_LEASE
        }
    }

    fn config(&self) -> LeaseConfig {
        LeaseConfig::default()
            .with_lease_duration(self.lease())
            .with_renew_interval(Duration::from_millis(700))
            .with_min_ttl(Duration::from_secs(1))
            .with_margin(MARGIN)
            .with_release_guard(MARGIN)
            .with_call_timeout(Duration::from_secs(1))
            .with_acquire_timeout(Some(Duration::from_secs(20)))
    }
}

/// A node's clock: the shared boot clock moved by an offset, and a wait of at most a second
/// (a node whose clock is an hour behind the floor reports `WouldBlock` instead).
#[derive(Debug, Clone, Copy)]
struct NodeClock(BootClock);

impl NodeClock {
    fn new(base: BootClock, offset_ms: i64) -> Self {
        Self(BootClock::with_offset(
            base.offset_ms().saturating_add_signed(offset_ms),
        ))
    }
}

impl Clock for NodeClock {
    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }

    fn wait_until_ms(&self, target_ms: u64) -> bool {
        target_ms.saturating_sub(self.now_ms()) <= 1000 && self.0.wait_until_ms(target_ms)
    }
}

/// A strategy with the floor stripped, as a store that keeps none: every floor sent is 0 and
/// every grant reports none.
struct WithoutFloor<S>(S);

impl<S: Strategy> Strategy for WithoutFloor<S> {
    type Lease = S::Lease;
    type Error = S::Error;

    async fn acquire(&self, request: Acquire) -> Result<Grant<S::Lease>, S::Error> {
        let mut grant = self
            .0
            .acquire(Acquire::new(request.requested, 0, 0))
            .await?;
        grant.floor_ms = 0;
        Ok(grant)
    }
    async fn renew(&self, lease: &S::Lease, request: Renew) -> Result<Renewal<S::Lease>, S::Error> {
        self.0.renew(lease, Renew::new(request.requested, 0)).await
    }
    async fn release(&self, lease: &S::Lease, request: Release) -> Result<(), S::Error> {
        self.0.release(lease, Release::new(request.guard, 0)).await
    }
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), S::Error> {
        self.0.check_terms(terms)
    }
    fn profile(&self) -> Profile {
        let inner = self.0.profile();
        let profile = Profile::new(inner.name);
        if inner.deterministic {
            profile.deterministic()
        } else {
            profile
        }
    }
}

/// What a node generated, judged as it went.
#[derive(Default)]
struct Generated {
    /// Every value both nodes issued so far, each with the node that issued it last.
    seen: Seen<Kind, u16>,
    issued: usize,
    refused: usize,
    /// Values this node issued that the other had issued.
    duplicates: usize,
    /// The lowest and highest timestamp it issued, in the floors' terms.
    range: Option<(u64, u64)>,
}

/// Generates the scenario's kinds on `factory` as `node` for its active time on a thread of its
/// own (the manager keeps renewing on the runtime meanwhile), each value checked against `seen`.
async fn generate(
    factory: &Arc<Factory<NodeClock>>,
    Scenario { kinds, active, .. }: Scenario,
    node: u16,
    seen: Seen<Kind, u16>,
) -> Result<Generated, String> {
    let factory = Arc::clone(factory);
    let work = tokio::task::spawn_blocking(move || {
        let mut out = Generated {
            seen,
            ..Generated::default()
        };
        let started = Instant::now();
        while started.elapsed() < active {
            for kind in kinds.all() {
                for _ in 0..64 {
                    match kind.generate(&factory) {
                        Ok(nonce) => {
                            out.issued += 1;
                            if let Err(other) = out.seen.insert(kind, nonce.value, node) {
                                if other == node {
                                    return Err(format!(
                                        "{kind:?} repeated a value within one node"
                                    ));
                                }
                                out.duplicates += 1;
                            }
                            let (lo, hi) = out.range.unwrap_or((nonce.ts, nonce.ts));
                            out.range = Some((lo.min(nonce.ts), hi.max(nonce.ts)));
                        }
                        Err(NonceError::WouldBlock { .. } | NonceError::LeaseExpired) => {
                            out.refused += 1;
                            break;
                        }
                        Err(e) => return Err(format!("{kind:?}: {e}")),
                    }
                }
            }
        }
        Ok(out)
    });
    work.await.map_err(|e| format!("generator thread: {e}"))?
}

/// Starts `who`, a lease manager of `strategy` on a new factory on `clock`, which must be
/// handed `id`, the `which` ID.
async fn start<S: Strategy + 'static>(
    strategy: S,
    scenario: &Scenario,
    clock: NodeClock,
    (id, who, which): (MachineId, &str, &str),
) -> Result<(Arc<Factory<NodeClock>>, LeaseManager<S>), String> {
    let factory = Factory::new(clock, FactoryConfig::new()).map_err(|e| format!("factory: {e}"))?;
    let factory = Arc::new(factory);
    let manager = LeaseManager::builder(strategy)
        .with_config(scenario.config())
        .with_clock(clock)
        .with_target(Arc::clone(&factory) as Arc<dyn lease_manager::LeaseTarget>)
        .start()
        .await
        .map_err(|e| format!("lease manager did not start: {e}"))?;
    if manager.machine_id() != Some(id) {
        let handed = manager.machine_id();
        return Err(format!(
            "{who} was handed {handed:?}, not the {which} id {id}"
        ));
    }
    Ok((factory, manager))
}

/// Runs `scenario` against a fresh store from `harness`.
///
/// # Errors
/// A message when the scenario could not be run as described (the store did not hand the one
/// free ID to B, a node failed to generate for another reason than `WouldBlock`, ...).
/// Duplicates are not an error: they are counted in [`HandoverReport::duplicates`].
pub async fn run<H: Harness>(harness: &H, scenario: Scenario) -> Result<HandoverReport, String>
where
    H::Strategy: 'static,
{
    if scenario.without_floor {
        run_with(harness, scenario, WithoutFloor).await
    } else {
        run_with(harness, scenario, |s| s).await
    }
}

async fn run_with<H, S, W>(
    harness: &H,
    scenario: Scenario,
    wrap: W,
) -> Result<HandoverReport, String>
where
    H: Harness,
    S: Strategy + 'static,
    W: Fn(H::Strategy) -> S,
{
    // Hold every ID but one, for longer than the scenario runs.
    let filler = harness.node().await;
    let mut fillers = Vec::new();
    let long = Acquire::new(Duration::from_secs(600), 0, 0);
    loop {
        match filler.acquire(long).await {
            Ok(grant) => fillers.push(grant),
            Err(_) if fillers.len() == usize::from(MachineId::COUNT) => break,
            Err(e) => {
                return Err(format!(
                    "filling the store stopped after {} grants: {e}",
                    fillers.len()
                ));
            }
        }
    }
    let Some(freed) = fillers.pop() else {
        return Err("the store granted nothing".into());
    };
    let id = freed.machine_id;
    if !harness.expire(id).await {
        let _ = filler
            .release(&freed.lease, Release::new(Duration::from_millis(1), 0))
            .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let base = BootClock::new();
    let clock_a = NodeClock::new(base, 0);

    let a_gets = (id, "node A", "one free");
    let (factory_a, manager_a) =
        start(wrap(harness.node().await), &scenario, clock_a, a_gets).await?;
    let a = generate(&factory_a, scenario, 0, Seen::new()).await?;
    let a_stopped = Instant::now();
    let planned = match scenario.end {
        End::Release => {
            manager_a.shutdown().await;
            let guard = MARGIN + Duration::from_millis(50);
            tokio::time::sleep(guard).await;
            guard
        }
        End::Expiry => {
            drop(manager_a);
            if !harness.expire(id).await {
                return Err("the expiry scenarios need a harness that can expire a lease".into());
            }
            Duration::ZERO
        }
    };
    if factory_a.is_enabled() {
        return Err("node A still generates after its lease ended".into());
    }
    // A loaded machine slows the handover: a B behind A lags by the delay beyond the plan too.
    let late = a_stopped.elapsed().saturating_sub(planned);
    let offset_ms = if scenario.offset_ms < 0 {
        scenario
            .offset_ms
            .saturating_sub(i64::try_from(late.as_millis()).unwrap_or(i64::MAX))
    } else {
        scenario.offset_ms
    };
    let clock_b = NodeClock::new(base, offset_ms);

    let b_gets = (id, "node B", "freed");
    let (factory_b, manager_b) =
        start(wrap(harness.node().await), &scenario, clock_b, b_gets).await?;
    let b = generate(&factory_b, scenario, 1, a.seen).await?;
    manager_b.shutdown().await;
    for grant in &fillers {
        let _ = filler
            .release(&grant.lease, Release::new(Duration::from_millis(1), 0))
            .await;
    }

    // A and B are the ID's two holders, nodes 0 and 1.
    let mut holders = Holders::new();
    let mut overlap = None;
    for (node, range) in [(0, a.range), (1, b.range)] {
        if let Some((lo, hi)) = range {
            let judged = holders.issued(&mut None, u32::from(node), node, id.get(), lo, hi);
            overlap = judged.err().or(overlap);
        }
    }
    Ok(HandoverReport {
        machine_id: id,
        issued_a: a.issued,
        issued_b: b.issued,
        refused_b: b.refused,
        duplicates: b.duplicates,
        overlap,
    })
}

/// Runs every [`Scenario::standard`] scenario and fails on the first duplicate or overlap.
///
/// # Errors
/// The first scenario that repeated a nonce, let B's timestamps fall among A's, in which A
/// issued nothing or B neither issued nor was refused, or that could not be run, with what it
/// saw.
pub async fn standard<F, Fut, H>(new_harness: F) -> Result<Vec<(Scenario, HandoverReport)>, String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = H>,
    H: Harness,
    H::Strategy: 'static,
{
    let mut outcomes = Vec::new();
    for scenario in Scenario::standard() {
        let harness = new_harness().await;
        let outcome = run(&harness, scenario)
            .await
            .map_err(|e| format!("{scenario:?}: {e}"))?;
        let idle = outcome.issued_a == 0 || outcome.issued_b + outcome.refused_b == 0;
        if outcome.duplicates > 0 || outcome.overlap.is_some() || idle {
            return Err(format!("{scenario:?}: {outcome:?}"));
        }
        outcomes.push((scenario, outcome));
    }
    Ok(outcomes)
}

/// Runs, without the floor, the [`Scenario::standard`] scenarios whose successor lags by a few
/// margins and that `which` selects, and fails unless each repeats a nonce: proof that the
/// scenarios can fail.
///
/// # Errors
/// The first scenario that repeated nothing or could not be run, with what it saw.
pub async fn repeats_without_floor<F, Fut, H>(
    new_harness: F,
    which: impl Fn(&Scenario) -> bool,
) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = H>,
    H: Harness,
    H::Strategy: 'static,
{
    let lagging = |s: &Scenario| s.offset_ms < 0 && s.offset_ms > -10_000 && which(s);
    for scenario in Scenario::standard().into_iter().filter(lagging) {
        let scenario = scenario.without_floor();
        let outcome = run(&new_harness().await, scenario).await?;
        if outcome.duplicates == 0 {
            return Err(format!("{scenario:?} repeated nothing: {outcome:?}"));
        }
    }
    Ok(())
}
