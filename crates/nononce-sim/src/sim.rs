//! The discrete-event simulation of one seed.
//!
//! One event queue ordered by true time (ties broken by the seeded generator), one generator,
//! no threads and no real time. Each node runs the real [`LeaseMachine`] through a sans-IO
//! driver written here (the same loop as `lease-manager`'s tokio driver: poll the action, do it,
//! report the result, apply the effects in order) and real [`Factory`]s on its own process
//! clock. Strategy calls are the model strategies' futures, polled whenever a reply reaches
//! the node.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{Acquire, Grant, MachineId, Release, Renew, Renewal, Strategy};
use lease_manager::backoff::Jitter;
use lease_manager::machine::LeaseEvent;
use lease_manager::{
    Action, Effect, Failure, LeaseCache, LeaseConfig, LeaseMachine, LeaseState, LeaseTarget,
    LossReason, floor_terms,
};
use never_twice::{Issued, Window};
use nonce_core::{Base, Clock, DEFAULT_EPOCH_MS, Error as NonceError, Factory, FactoryConfig};

use crate::check::{Checker, KindSet, Violation};
use crate::clock::{LinearClock, SimClock};
use crate::link::SimLink;
use crate::model::etcd::{self, EtcdResponse, EtcdServer, Key as EtcdKey, Recovery};
use crate::model::fixed::{FixedModel, HostList};
use crate::model::redis::{self, Persistence, RedisServer};
use crate::model::sql::{self, SqlServer};
use crate::model::zookeeper::{self, ZkRequest, ZkResponse, ZkServer};
use crate::model::{
    Client, Guards, Handles, ModelLease, NetError, Reply, Request, Server, Simulated,
};
use crate::plan::{Backend as BackendKind, Clocks, Fault, Network, Plan, Profile};
use crate::report::{SeedReport, Stats};
use crate::rng::Rng;
use crate::timeline::Recorder;
use crate::trace::{Entry as TraceEntry, Trace};
use lease_etcd::transport::{
    Header as EtcdHeader, Reply as EtcdReply, Request as EtcdRequest, TxnOp as EtcdTxnOp,
};
use lease_redis::transport::{Claim as RedisClaim, Reply as RedisReply, Request as RedisRequest};
use lease_sql::transport::{Claim as SqlClaim, Reply as SqlReply, Request as SqlRequest};
use lease_zookeeper::transport::{
    ReadResult as ZkReadResult, Reply as ZkReply, Request as ZkOp, WriteOp as ZkWriteOp,
};

/// Nonces of one kind one factory issues per tick, at most.
const MAX_PER_KIND: u64 = 4;
/// A burst of generation covers up to this many consecutive grid slots.
const MAX_BURST: u64 = 12;
/// Regular generation ticks per node per run, on average.
const TICKS_PER_RUN: u64 = 40;

/// `n` as a trace's or a counter's number (0 if it has none).
fn num(n: impl TryInto<u64>) -> u64 {
    n.try_into().unwrap_or(0)
}

/// Makes each node's strategy.
trait Backend {
    type S: Strategy<Lease = ModelLease, Error = Failure> + 'static;
    fn strategy(&self, link: SimLink, ordinal: u16, seed: u64) -> Self::S;
}

/// A backend crate's own strategy for each node ([`Client`]), made by `make` from the node's
/// link, the guards, the longest lease and a seed.
struct Real<S: Simulated> {
    guards: Guards,
    max_lease: Duration,
    make: fn(SimLink, Guards, Duration, u64) -> S,
    /// Every node's leases, by handle: a process resumes its predecessor's.
    handles: Handles<S::Lease>,
}

impl<S: Simulated> Real<S> {
    fn new(plan: &Plan, make: fn(SimLink, Guards, Duration, u64) -> S) -> Self {
        Self {
            guards: plan.guards,
            max_lease: Duration::from_millis(plan.profile.lease),
            make,
            handles: Handles::default(),
        }
    }
}

impl<S: Simulated + 'static> Backend for Real<S> {
    type S = Client<S>;
    fn strategy(&self, link: SimLink, _: u16, seed: u64) -> Self::S {
        let strategy = (self.make)(link, self.guards, self.max_lease, seed);
        Client::new(strategy, self.guards, Arc::clone(&self.handles))
    }
}

struct Fixed;

impl Backend for Fixed {
    type S = FixedModel<SimLink>;
    fn strategy(&self, link: SimLink, ordinal: u16, _: u64) -> Self::S {
        FixedModel::new(
            link,
            MachineId::new(ordinal).unwrap_or_else(|_| unreachable!()),
        )
    }
}

/// A node's factory of kinds `set` on `clock`, the kinds declared when `declare`, its
/// timestamps counted from `epoch_ms`.
fn factory(clock: &SimClock, set: KindSet, declare: bool, epoch_ms: u64) -> Factory<SimClock> {
    // Without the thread cache: its blocks live in the worker thread, which runs other seeds
    // too, so a seed's nonces would depend on what ran before it there.
    let mut config = FactoryConfig::new()
        .with_epoch_ms(epoch_ms)
        .with_thread_cache(false);
    if declare {
        let [k64, k96, k128] = match set {
            KindSet::A => [Base::Counter, Base::Sortable, Base::Counter],
            KindSet::B => [Base::Sortable, Base::Counter, Base::Sortable],
        };
        config = config.with_kind64(k64).with_kind96(k96).with_kind128(k128);
    }
    Factory::new(clock.clone(), config).unwrap_or_else(|e| panic!("a factory: {e:?}"))
}

/// Runs one seed's plan, recording its picture into `timeline` if one is given.
pub(crate) fn run(
    plan: Plan,
    rng: Rng,
    timeline: Option<Box<Recorder>>,
) -> (SeedReport, Option<Box<Recorder>>) {
    match plan.backend {
        BackendKind::Sql => Sim::new(Real::new(&plan, sql::strategy), plan, rng, timeline).run(),
        BackendKind::Redis => {
            Sim::new(Real::new(&plan, redis::strategy), plan, rng, timeline).run()
        }
        BackendKind::Etcd => Sim::new(Real::new(&plan, etcd::strategy), plan, rng, timeline).run(),
        BackendKind::Static => Sim::new(Fixed, plan, rng, timeline).run(),
        BackendKind::ZooKeeper => {
            Sim::new(Real::new(&plan, zookeeper::strategy), plan, rng, timeline).run()
        }
    }
}

/// A message between process `inc` of node `node` and the coordinator, about call `id`: the
/// `order`-th the sender sent that way.
#[derive(Debug, Clone)]
struct Message<T> {
    node: u16,
    order: u64,
    id: u64,
    inc: u32,
    body: T,
}

#[derive(Debug, Clone)]
enum Ev {
    Start {
        node: u16,
    },
    Wake {
        node: u16,
        inc: u32,
        seq: u64,
    },
    /// Generation: tick `chain` of the regular chain, or else a burst of `burst` slots more.
    Tick {
        node: u16,
        inc: u32,
        chain: Option<u64>,
        burst: u8,
    },
    ToServer(Message<Request>),
    ToNode(Message<Result<Reply, NetError>>),
    /// A [`Request::Sleep`] of process `inc` ends.
    Slept {
        node: u16,
        id: u64,
        inc: u32,
    },
    Resume {
        node: u16,
        inc: u32,
    },
    Kill {
        node: u16,
        inc: u32,
    },
    Shutdown {
        node: u16,
    },
    StormEnd {
        node: u16,
        seq: u64,
    },
    ServerUp {
        seq: u64,
    },
    Fault(Fault),
    End,
}

/// Everything but the nodes and the server.
struct Ctx {
    now: u64,
    rng: Rng,
    /// The events to come, by true time, the generator's tie-break and the order queued.
    queue: BTreeMap<(u64, u64, u64), Ev>,
    seq: u64,
    network: Network,
    profile: Profile,
    config: LeaseConfig,
    checker: Checker,
    stats: Stats,
    trace: Trace,
    violation: Option<String>,
    next_holder: u32,
    mean_tick_gap: u64,
    /// The run's picture, recorded only when one is asked for.
    timeline: Option<Box<Recorder>>,
    /// The guards: the driver's own are the issued record and the epoch floor.
    guards: Guards,
}

impl Ctx {
    /// The fault being applied hit `node` and lasts until `until`, for the picture.
    fn struck(&mut self, node: Option<u16>, until: Option<u64>) {
        if let Some(t) = self.timeline.as_mut() {
            t.struck(node, until);
        }
    }

    fn at(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let tie = self.rng.next_u64();
        self.queue.insert((at.max(self.now), tie, self.seq), ev);
    }

    /// Records `what` with up to three numbers (`{a}`, `{b}`, `{c}`; missing ones are 0).
    fn trace(&mut self, node: Option<u16>, what: &'static str, args: &[u64]) {
        let arg = |i| args.get(i).copied().unwrap_or(0);
        let (a, b, c) = (arg(0), arg(1), arg(2));
        self.trace.push(TraceEntry {
            at: self.now,
            node,
            what,
            a,
            b,
            c,
        });
    }

    /// A check failed on a nonce of `node` (machine ID `id`, if it has one).
    fn fail(&mut self, violation: &Violation, node: u16, id: Option<u16>) {
        if let Some(t) = self.timeline.as_mut() {
            t.found(violation, node, id, self.now);
        }
        if self.violation.is_none() {
            self.trace(None, "VIOLATION", &[]);
            self.violation = Some(format!(
                "{}\nlast events:\n{}",
                violation.message(),
                self.trace.render()
            ));
        }
    }

    /// Sends a message over the simulated network, subject to the sender's partition.
    fn transmit(&mut self, partition: Option<Partition>, ev: Ev, node: u16) {
        self.stats.net("messages");
        let mut earliest = self.now;
        if let Some(p) = partition
            && p.until > self.now
        {
            if p.hold {
                earliest = p.until;
                self.stats.net("held-by-partition");
            } else {
                self.stats.net("dropped-by-partition");
                self.trace(Some(node), "message lost in a partition", &[]);
                return;
            }
        }
        if self.rng.chance(self.network.drop_ppm) {
            self.stats.net("dropped");
            let toward = u64::from(matches!(ev, Ev::ToNode(_)));
            self.trace(Some(node), "message dropped (to node: {a})", &[toward]);
            return;
        }
        if self.rng.chance(self.network.duplicate_ppm) {
            self.stats.net("duplicated");
            let again = earliest + self.network.delay(&mut self.rng);
            self.at(again, ev.clone());
        }
        let arrival = earliest + self.network.delay(&mut self.rng);
        if arrival.saturating_sub(self.now) >= 50 {
            self.stats.net("delayed-50ms-plus");
        }
        self.at(arrival, ev);
    }
}

#[derive(Debug, Clone, Copy)]
struct Partition {
    until: u64,
    hold: bool,
}

/// A node apart from its process: the machine's clock and network.
struct Shell {
    idx: u16,
    /// The host's name in a static fleet's node list.
    name: String,
    /// The machine ID a static strategy gives its next process.
    ordinal: u16,
    kinds: Vec<KindSet>,
    declare_kinds: bool,
    /// The epoch its next process's factories count from (`epoch-change` moves it).
    epoch_ms: u64,
    kernel: LinearClock,
    base_ppm: i64,
    storm_seq: u64,
    wall_steps: i64,
    next_inc: u32,
    /// Consecutive processes that failed to start: the restart backs off (`CrashLoopBackOff`).
    failed_starts: u32,
    partition: Option<Partition>,
    sent: [u64; 2],
    delivered: [u64; 2],
}

impl Shell {
    /// The next message of process `inc` about call `id` on its way `way` (0: to the server).
    fn message<T>(&mut self, way: usize, inc: u32, id: u64, body: T) -> Message<T> {
        self.sent[way] += 1;
        let (node, order) = (self.idx, self.sent[way]);
        Message {
            node,
            order,
            id,
            inc,
            body,
        }
    }
}

struct Node<S: Strategy<Lease = ModelLease, Error = Failure>> {
    shell: Shell,
    proc: Option<Proc<S>>,
}

enum Outcome {
    Acquired(Result<Grant<ModelLease>, Failure>),
    Renewed(Result<Renewal<ModelLease>, Failure>),
    Released(Result<(), Failure>),
}

/// A strategy call's future.
type Call = Pin<Box<dyn Future<Output = Outcome> + Send>>;

struct Pending {
    fut: Call,
    expires: u64,
}

#[derive(Debug, Clone, Copy)]
struct Frozen {
    /// The process clock when a suspend it does not count began.
    uncounted_from: Option<u64>,
    tick_missed: bool,
}

/// Why a process ends.
enum Exit {
    Failed,
    Stopped,
    Halted,
}

/// One process of a node: its clock, factories, strategy and lease machine.
struct Proc<S: Strategy<Lease = ModelLease, Error = Failure>> {
    inc: u32,
    clock: SimClock,
    offset: i64,
    factories: Vec<(Factory<SimClock>, KindSet)>,
    strategy: Arc<S>,
    link: SimLink,
    cache: LeaseCache<ModelLease>,
    machine: LeaseMachine<ModelLease>,
    /// A lease was held at least once (a manager restart then never gives up).
    started: bool,
    call: Option<Pending>,
    window: Option<Window>,
    holder: Option<u32>,
    lease_key: Option<u128>,
    enable_pending: bool,
    range_slot: Option<(u16, usize)>,
    frozen: Option<Frozen>,
    held_replies: Vec<(u64, Result<Reply, NetError>)>,
    wake_seq: u64,
    tick_seq: u64,
    state: &'static str,
    halted: bool,
    /// Shut down by a rolling deployment: the replacement starts soon.
    quick_restart: bool,
}

fn state_name(state: LeaseState) -> &'static str {
    match state {
        LeaseState::Starting => "starting",
        LeaseState::Recovering => "recovering",
        LeaseState::Held { .. } => "held",
        LeaseState::Reacquiring => "reacquiring",
        LeaseState::Halted => "halted",
        LeaseState::Releasing => "releasing",
        LeaseState::Stopped => "stopped",
        LeaseState::Failed => "failed",
        _ => "other",
    }
}

fn loss_name(reason: &LossReason) -> &'static str {
    match reason {
        LossReason::Lost(_) => "lost",
        LossReason::IllegalTtl { .. } => "illegal-ttl",
        LossReason::LocalExpiry => "local-expiry",
        LossReason::External(_) => "external",
        LossReason::CoordinatorClockJump { .. } => "coordinator-clock-jump",
        _ => "other",
    }
}

impl<S: Strategy<Lease = ModelLease, Error = Failure> + 'static> Proc<S> {
    /// Brings the process clock to true time `ctx.now`; returns it.
    fn sync(&self, ctx: &Ctx, shell: &Shell) -> u64 {
        let local = shell.kernel.at(ctx.now).saturating_add(self.offset);
        self.clock.set(num(local));
        self.clock.now_ms()
    }

    fn trace(&self, ctx: &mut Ctx, shell: &Shell, what: &'static str, args: &[u64]) {
        ctx.trace(Some(shell.idx), what, args);
    }

    fn drop_call(&mut self) {
        self.call = None;
        self.link.reset();
    }

    /// Clock millisecond `clock_ms` in the floors' terms, the highest any factory gives it, as
    /// the tokio driver converts the deadlines it sends as floors; unconverted when that is
    /// switched off ([`Guards::epoch_floor`]).
    fn floor_of(&self, ctx: &Ctx, clock_ms: u64) -> u64 {
        if !ctx.guards.epoch_floor {
            return clock_ms;
        }
        self.factories
            .iter()
            .map(|(f, _)| LeaseTarget::floor_of(f, clock_ms))
            .max()
            .unwrap_or(clock_ms)
    }

    /// Raises the cached lease's bound of what was issued to what the factories report, as
    /// the tokio driver does; nothing when that record is switched off.
    fn record_issued(&self, ctx: &Ctx) {
        if ctx.guards.issued_record {
            self.cache.record_issued(self.issued(ctx));
        }
    }

    /// What the factories issued, the highest bound any reports: in the floors' terms, or
    /// with the epoch floor off, in clock ms, as before floors knew the epoch.
    fn issued(&self, ctx: &Ctx) -> u64 {
        self.factories
            .iter()
            .map(|(f, _)| {
                if ctx.guards.epoch_floor {
                    LeaseTarget::issued_up_to_ms(f)
                } else {
                    f.issued_up_to_ms()
                }
            })
            .max()
            .unwrap_or(0)
    }

    /// Enables every factory above `floor_ms` (converted by each, or with the epoch floor off
    /// taken as clock ms) until `deadline_ms`; returns the floor in the floors' terms, which
    /// the checker holds the timestamps to.
    fn enable(&self, ctx: &Ctx, id: MachineId, floor_ms: u64, deadline_ms: u64) -> u64 {
        let mut floor = floor_ms;
        for (f, _) in &self.factories {
            if ctx.guards.epoch_floor {
                LeaseTarget::enable(f, id, floor_ms, deadline_ms);
            } else {
                if f.enable_above(id, floor_ms, deadline_ms).is_err() {
                    f.disable();
                }
                // Timestamps above `floor_ms - epoch`, in the floors' terms.
                floor = floor_terms(floor_ms, f.epoch_ms());
            }
        }
        floor
    }

    /// Runs the machine until it waits: the driver loop.
    fn drive(&mut self, ctx: &mut Ctx, shell: &mut Shell) -> Option<Exit> {
        if self.frozen.is_some() || self.halted {
            return None;
        }
        let local = self.sync(ctx, shell);
        if self.call.as_ref().is_some_and(|c| local >= c.expires) {
            // The machine treats it as timed out at this poll: its reply must not be reported.
            self.drop_call();
            self.trace(ctx, shell, "call timed out", &[]);
        }
        for _ in 0..64 {
            let action = self.machine.poll_action(local);
            self.apply_effects(ctx, shell, local);
            let s = Arc::clone(&self.strategy);
            let (fut, timeout): (Call, _) = match action {
                Action::Acquire {
                    requested,
                    timeout,
                    now_ms,
                    floor_ms,
                    ..
                } => {
                    // The machine's clock readings in the floors' terms, as the tokio driver
                    // sends them.
                    let (now_ms, floor_ms) =
                        (self.floor_of(ctx, now_ms), self.floor_of(ctx, floor_ms));
                    self.trace(ctx, shell, "acquire sent (floor {a})", &[floor_ms]);
                    let request = Acquire::new(requested, now_ms, floor_ms);
                    let fut = async move { Outcome::Acquired(s.acquire(request).await) };
                    (Box::pin(fut), timeout)
                }
                Action::Renew {
                    lease,
                    requested,
                    timeout,
                    floor_ms,
                    ..
                } => {
                    let floor_ms = self.floor_of(ctx, floor_ms);
                    let what = "renew of id {a} sent (floor {b})";
                    self.trace(ctx, shell, what, &[lease.id.get().into(), floor_ms]);
                    let request = Renew::new(requested, floor_ms);
                    let fut = async move { Outcome::Renewed(s.renew(&lease, request).await) };
                    (Box::pin(fut), timeout)
                }
                Action::Release {
                    lease,
                    guard,
                    timeout,
                    floor_ms,
                } => {
                    // The targets are disabled by now: what they report is exact.
                    let floor = self.issued(ctx).max(floor_ms);
                    let what = "release of id {a} sent (floor {b})";
                    self.trace(ctx, shell, what, &[lease.id.get().into(), floor]);
                    let request = Release::new(guard, floor);
                    let fut = async move { Outcome::Released(s.release(&lease, request).await) };
                    (Box::pin(fut), timeout)
                }
                Action::Wait { until } => {
                    self.wake_seq += 1;
                    let t = shell.kernel.when(ctx.now, self.offset, until);
                    let (node, inc, seq) = (shell.idx, self.inc, self.wake_seq);
                    ctx.at(t, Ev::Wake { node, inc, seq });
                    return None;
                }
                Action::Halted => {
                    self.halted = true;
                    return Some(Exit::Halted);
                }
                Action::Failed(_) => return Some(Exit::Failed),
                Action::Stopped => return Some(Exit::Stopped),
                _ => return None,
            };
            self.begin(ctx, shell, local, timeout, fut);
        }
        panic!("node {}: the lease machine did not settle", shell.idx);
    }

    fn begin(
        &mut self,
        ctx: &mut Ctx,
        shell: &mut Shell,
        local: u64,
        timeout: Duration,
        fut: Call,
    ) {
        self.drop_call();
        self.call = Some(Pending {
            fut,
            expires: local.saturating_add(millis(timeout)),
        });
        self.poll_call(ctx, shell);
    }

    /// Polls the call in progress; whether it finished (its result is then reported).
    fn poll_call(&mut self, ctx: &mut Ctx, shell: &mut Shell) -> bool {
        let local = self.sync(ctx, shell);
        let Some(call) = self.call.as_mut() else {
            return false;
        };
        if local >= call.expires {
            self.drop_call();
            return true;
        }
        let mut cx = Context::from_waker(Waker::noop());
        match call.fut.as_mut().poll(&mut cx) {
            Poll::Pending => {
                self.flush(ctx, shell);
                false
            }
            Poll::Ready(outcome) => {
                self.drop_call();
                match outcome {
                    Outcome::Acquired(result) => {
                        match &result {
                            Ok(g) => self.trace(
                                ctx,
                                shell,
                                "granted id {a}, floor {b}, ttl {c} ms",
                                &[u64::from(g.machine_id.get()), g.floor_ms, millis(g.ttl)],
                            ),
                            Err(e) => self.trace(ctx, shell, e.kind.as_str(), &[]),
                        }
                        self.machine.on_acquire_result(local, result);
                    }
                    Outcome::Renewed(result) => {
                        if let Err(e) = &result {
                            self.trace(ctx, shell, e.kind.as_str(), &[]);
                        }
                        self.machine.on_renew_result(local, result);
                    }
                    Outcome::Released(result) => self.machine.on_release_result(local, result),
                }
                self.apply_effects(ctx, shell, local);
                true
            }
        }
    }

    fn flush(&mut self, ctx: &mut Ctx, shell: &mut Shell) {
        for (id, request) in self.link.take_outbox() {
            if let Request::Sleep(ms) = request {
                let (node, inc) = (shell.idx, self.inc);
                ctx.at(ctx.now + ms, Ev::Slept { node, id, inc });
                continue;
            }
            let ev = Ev::ToServer(shell.message(0, self.inc, id, request));
            ctx.transmit(shell.partition, ev, shell.idx);
        }
    }

    fn apply_effects(&mut self, ctx: &mut Ctx, shell: &Shell, local: u64) {
        while let Some(effect) = self.machine.poll_effect() {
            match effect {
                Effect::EnableFactories {
                    machine_id,
                    floor_ms,
                    deadline_ms,
                } => {
                    let floor = self.enable(ctx, machine_id, floor_ms, deadline_ms);
                    let id = machine_id.get();
                    self.window = Some(Window {
                        id,
                        floor,
                        deadline: deadline_ms,
                    });
                    self.enable_pending = true;
                    self.started = true;
                    if let Some(t) = ctx.timeline.as_mut() {
                        let deadline = shell.kernel.when(ctx.now, self.offset, deadline_ms);
                        t.enable(shell.idx, id, ctx.now, deadline);
                    }
                    ctx.stats.node("enables");
                    self.trace(
                        ctx,
                        shell,
                        "enable id {a} above floor {b} until {c}",
                        &[u64::from(id), floor_ms, deadline_ms],
                    );
                    // Generate at once, and just before the deadline.
                    let soon = local + ctx.rng.below(3) * ctx.profile.grid;
                    let burst = Self::burst(ctx);
                    self.tick_at(ctx, shell, soon, None, burst);
                    self.near_deadline_tick(ctx, shell, deadline_ms, 500_000);
                }
                Effect::ExtendDeadline { deadline_ms } => {
                    for (f, _) in &self.factories {
                        LeaseTarget::extend_deadline(f, deadline_ms);
                    }
                    if let Some(w) = self.window.as_mut() {
                        w.deadline = deadline_ms;
                    }
                    if let Some(t) = ctx.timeline.as_mut() {
                        let deadline = shell.kernel.when(ctx.now, self.offset, deadline_ms);
                        t.extend(shell.idx, deadline);
                    }
                    self.trace(ctx, shell, "deadline {a}", &[deadline_ms]);
                    self.near_deadline_tick(ctx, shell, deadline_ms, 200_000);
                }
                Effect::DisableFactories => {
                    for (f, _) in &self.factories {
                        LeaseTarget::disable(f);
                    }
                    if self.window.take().is_some() {
                        self.trace(ctx, shell, "disable", &[]);
                    }
                    if let Some(t) = ctx.timeline.as_mut() {
                        t.disable(shell.idx, ctx.now);
                    }
                }
                Effect::LeaseLost { reason, .. } => {
                    let name = loss_name(&reason);
                    ctx.stats.loss(name);
                    self.trace(ctx, shell, name, &[]);
                }
                Effect::StoreCache(cached) => {
                    let key = cached.lease.token;
                    if self.enable_pending {
                        self.enable_pending = false;
                        if self.lease_key != Some(key) || self.holder.is_none() {
                            self.lease_key = Some(key);
                            self.new_holder(ctx);
                        }
                    }
                    self.cache.store(cached);
                    // What the tokio driver records with every cached lease.
                    self.record_issued(ctx);
                }
                Effect::ClearCache => self.cache.clear(),
                Effect::Event(LeaseEvent::Operation(op)) => {
                    let outcome = op.error.as_ref().map_or("ok", |e| e.kind.as_str());
                    ctx.stats.operation(op.operation.as_str(), outcome);
                }
                Effect::Event(LeaseEvent::Retry(_)) => ctx.stats.node("retries scheduled"),
                Effect::Event(LeaseEvent::FloorAhead { ahead_ms, .. }) => {
                    ctx.stats.node("granted a floor ahead of its clock");
                    self.trace(ctx, shell, "floor {a} ms ahead", &[ahead_ms]);
                }
                _ => {}
            }
        }
        let state = state_name(self.machine.state());
        if state != self.state {
            ctx.stats.transition(self.state, state);
            self.state = state;
        }
    }

    fn new_holder(&mut self, ctx: &mut Ctx) {
        ctx.next_holder += 1;
        self.holder = Some(ctx.next_holder);
        self.range_slot = None;
    }

    /// Generation at the first grid slot at or after `local` (process clock): the next tick
    /// `chain` of the regular chain, or a burst with `burst` slots more after it.
    fn tick_at(&self, ctx: &mut Ctx, shell: &Shell, local: u64, chain: Option<u64>, burst: u8) {
        let grid = ctx.profile.grid;
        let aligned = local.div_ceil(grid) * grid;
        let t = shell.kernel.when(ctx.now, self.offset, aligned);
        let (node, inc) = (shell.idx, self.inc);
        let tick = Ev::Tick {
            node,
            inc,
            chain,
            burst,
        };
        ctx.at(t, tick);
    }

    fn burst(ctx: &mut Ctx) -> u8 {
        u8::try_from(ctx.rng.below(MAX_BURST)).unwrap_or(0)
    }

    /// With a chance of `per_million`, a burst of generation just before `deadline`.
    fn near_deadline_tick(&self, ctx: &mut Ctx, shell: &Shell, deadline: u64, per_million: u64) {
        if !ctx.rng.chance(per_million) {
            return;
        }
        let before = ctx.rng.between(1, ctx.profile.margin.max(2));
        let burst = Self::burst(ctx);
        self.tick_at(ctx, shell, deadline.saturating_sub(before), None, burst);
    }

    fn chain_tick(&mut self, ctx: &mut Ctx, shell: &Shell, local: u64) {
        self.tick_seq += 1;
        let gap = ctx.rng.between(ctx.profile.grid, 2 * ctx.mean_tick_gap);
        self.tick_at(ctx, shell, local + gap, Some(self.tick_seq), 0);
    }

    /// Generates a batch on every factory and checks each nonce.
    fn tick(&mut self, ctx: &mut Ctx, shell: &Shell) {
        self.sync(ctx, shell);
        if self.enable_pending {
            self.enable_pending = false;
            self.new_holder(ctx);
        }
        let window = self.window;
        let (mut lo, mut hi, mut count) = (u64::MAX, 0, 0u64);
        let mut id_seen = None;
        for (factory, set) in &self.factories {
            for kind in set.kinds() {
                let n = ctx.rng.between(1, MAX_PER_KIND);
                for _ in 0..n {
                    match kind.generate(factory) {
                        Ok(issued) => {
                            let Issued { ts, id, .. } = issued;
                            if let Err(v) = ctx.checker.nonce(shell.idx, window, kind, issued) {
                                ctx.fail(&v, shell.idx, Some(id));
                                return;
                            }
                            lo = lo.min(ts);
                            hi = hi.max(ts);
                            count += 1;
                            id_seen = Some(id);
                        }
                        Err(e) => {
                            let refusal = match e {
                                NonceError::WouldBlock { .. } => "refused: would block",
                                NonceError::LeaseExpired => "refused: lease expired",
                                NonceError::Disabled => "refused: disabled",
                                _ => {
                                    let v = ctx.checker.unexpected(shell.idx, kind, &e);
                                    ctx.fail(&v, shell.idx, None);
                                    return;
                                }
                            };
                            ctx.stats.node(refusal);
                            break;
                        }
                    }
                }
            }
        }
        if let (Some(id), Some(holder)) = (id_seen, self.holder) {
            if let Err(v) = ctx
                .checker
                .range(&mut self.range_slot, holder, shell.idx, id, lo, hi)
            {
                ctx.fail(&v, shell.idx, Some(id));
                return;
            }
            ctx.trace(
                Some(shell.idx),
                "issued {a} nonces, timestamps {b}..{c}",
                &[count, lo, hi],
            );
            ctx.stats.node("ticks with nonces");
        } else {
            ctx.stats.node("ticks without nonces");
        }
    }
}

/// How a coordinator that is down comes back.
enum OnUp {
    /// Redis restarts, keeping what its persistence kept.
    Redis(Persistence),
    /// etcd has a leader again.
    Etcd(Recovery),
    /// ZooKeeper has a leader again, its data kept or not.
    ZooKeeper {
        /// Whether it kept its data.
        keeps_data: bool,
    },
}

struct ServerState {
    server: Server,
    clock: LinearClock,
    down: bool,
    up_seq: u64,
    on_up: Option<OnUp>,
    run_ids: u64,
}

struct Sim<B: Backend> {
    plan: Plan,
    backend: B,
    ctx: Ctx,
    nodes: Vec<Node<B::S>>,
    server: Option<ServerState>,
    /// No process starts before this true time (after an etcd restore, for the longest lease).
    starts_held_until: u64,
    /// A static fleet's node list: each process takes its ID from the list as it is when the
    /// process starts.
    hosts: Option<HostList>,
    /// The slots of hosts added to the node list by edits (they run outside the simulated
    /// fleet).
    added_hosts: Vec<u64>,
}

/// Node `slot`'s host name. Fleet nodes take every sixteenth slot, so that an added host's name
/// sorts between two of theirs (names compare by bytes, and the slot is zero-padded).
fn host_name(slot: u64) -> String {
    format!("node-{slot:05}")
}

impl<B: Backend> Sim<B> {
    fn new(backend: B, plan: Plan, mut rng: Rng, timeline: Option<Box<Recorder>>) -> Self {
        let profile = plan.profile;
        let spread = match plan.clocks {
            Clocks::Tight => profile.margin / 4,
            Clocks::Wide => [profile.margin * 3, 3_600_000][rng.index(2)],
        };
        let max_ppm = match plan.clocks {
            // Accumulated drift over the run stays within an eighth of the margin.
            Clocks::Tight => {
                let bound = profile.margin.saturating_mul(125_000) / plan.duration.max(1);
                i64::try_from(bound.min(100)).unwrap_or(100)
            }
            Clocks::Wide => 100,
        };
        let nodes: Vec<Node<B::S>> = (0..plan.nodes)
            .map(|i| {
                let kinds = match rng.below(3) {
                    0 => vec![KindSet::A],
                    1 => vec![KindSet::B],
                    _ => vec![KindSet::A, KindSet::B],
                };
                let ppm = rng.signed(num(max_ppm));
                let idx = u16::try_from(i).unwrap_or(u16::MAX);
                Node {
                    shell: Shell {
                        idx,
                        name: host_name(u64::from(idx) * 16),
                        ordinal: idx,
                        kinds,
                        declare_kinds: rng.chance(500_000),
                        epoch_ms: DEFAULT_EPOCH_MS,
                        kernel: LinearClock::new(rng.signed(spread), ppm),
                        base_ppm: ppm,
                        storm_seq: 0,
                        wall_steps: 0,
                        next_inc: 0,
                        failed_starts: 0,
                        partition: None,
                        sent: [0; 2],
                        delivered: [0; 2],
                    },
                    proc: None,
                }
            })
            .collect();
        let hosts = (plan.backend == BackendKind::Static).then(|| {
            let names: Vec<&str> = nodes.iter().map(|n| n.shell.name.as_str()).collect();
            HostList::new(&names, plan.guards.explicit_ids)
        });
        let coordinator = LinearClock::new(rng.signed(3_600_000), rng.signed(100));
        let server = match plan.backend {
            BackendKind::Sql => Some(Server::Sql(SqlServer::new(plan.capacity))),
            BackendKind::Redis => {
                let up_since = coordinator.ms(0).saturating_sub(profile.lease * 3);
                Some(Server::Redis(RedisServer::new(plan.capacity, up_since, 1)))
            }
            BackendKind::Etcd => Some(Server::Etcd(EtcdServer::new(
                plan.capacity,
                0x6e6f_6e6f_6e63_6500 | plan.seed & 0xff,
            ))),
            BackendKind::ZooKeeper => Some(Server::ZooKeeper(ZkServer::new(
                plan.capacity,
                zookeeper::MIN_SESSION_MS,
                zookeeper::MAX_SESSION_MS,
            ))),
            BackendKind::Static => None,
        }
        .map(|mut server| ServerState {
            server: {
                server.set_guards(plan.guards);
                server
            },
            clock: coordinator,
            down: false,
            up_seq: 0,
            on_up: None,
            run_ids: 1,
        });
        let ctx = Ctx {
            now: 0,
            network: plan.network,
            profile,
            config: profile.lease_config(),
            checker: Checker::default(),
            stats: Stats::default(),
            trace: Trace::new(plan.trace_len),
            violation: None,
            next_holder: 0,
            timeline,
            mean_tick_gap: (plan.duration / TICKS_PER_RUN).max(profile.grid),
            guards: plan.guards,
            queue: BTreeMap::new(),
            seq: 0,
            rng,
        };
        Self {
            plan,
            backend,
            ctx,
            nodes,
            server,
            starts_held_until: 0,
            hosts,
            added_hosts: Vec::new(),
        }
    }

    fn run(mut self) -> (SeedReport, Option<Box<Recorder>>) {
        let stagger = (self.plan.profile.lease / 2).min(120_000);
        for i in 0..self.nodes.len() {
            let at = if self.plan.herd {
                self.ctx.rng.below(100)
            } else {
                self.ctx.rng.below(stagger)
            };
            let node = u16::try_from(i).unwrap_or(u16::MAX);
            self.ctx.at(at, Ev::Start { node });
        }
        for &(at, fault) in &self.plan.faults {
            self.ctx.at(at, Ev::Fault(fault));
        }
        self.ctx.at(self.plan.duration, Ev::End);
        while let Some(((at, ..), ev)) = self.ctx.queue.pop_first() {
            self.ctx.now = at;
            if matches!(ev, Ev::End) {
                break;
            }
            self.handle(ev);
            if self.plan.stop_at_first && self.ctx.violation.is_some() {
                break;
            }
        }
        self.report()
    }

    fn report(mut self) -> (SeedReport, Option<Box<Recorder>>) {
        let timeline = self.ctx.timeline.take();
        let c = &self.ctx.checker;
        let report = SeedReport {
            seed: self.plan.seed,
            backend: self.plan.backend,
            profile: self.plan.profile.name,
            clocks: self.plan.clocks,
            nodes: self.plan.nodes,
            capacity: self.plan.capacity,
            sim_ms: self.ctx.now,
            nonces: c.nonces,
            duplicates: c.duplicates,
            overlaps: c.overlaps,
            out_of_window: c.out_of_window,
            unexpected: c.unexpected,
            events: self.ctx.trace.events(),
            fingerprint: self.ctx.trace.fingerprint(),
            stats: self.ctx.stats,
            violation: self.ctx.violation,
        };
        (report, timeline)
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Start { node } => self.start(usize::from(node)),
            Ev::Wake { node, inc, seq } => {
                let n = usize::from(node);
                if self.runs(n, |p| p.inc == inc && p.wake_seq == seq) {
                    self.drive(n);
                }
            }
            Ev::Tick {
                node,
                inc,
                chain,
                burst,
            } => self.tick(usize::from(node), inc, chain, burst),
            Ev::ToServer(m) => {
                self.arrived(m.node, 0, m.order);
                self.at_server(m.node, m.body, m.id, m.inc);
            }
            Ev::ToNode(m) => {
                self.arrived(m.node, 1, m.order);
                self.deliver(usize::from(m.node), m.id, m.body, m.inc);
            }
            Ev::Slept { node, id, inc } => {
                self.deliver(usize::from(node), id, Ok(Reply::Slept), inc);
            }
            Ev::Resume { node, inc } => self.resume(usize::from(node), inc),
            Ev::Kill { node, inc } => {
                let n = usize::from(node);
                if self.runs(n, |p| p.inc == inc) {
                    self.ctx.trace(Some(node), "halted process restarted", &[]);
                    self.exit(n);
                }
            }
            Ev::Shutdown { node } => {
                let n = usize::from(node);
                if self.runs(n, |p| p.frozen.is_none()) {
                    self.shutdown(n, true);
                }
            }
            Ev::StormEnd { node, seq } => {
                let shell = &mut self.nodes[usize::from(node)].shell;
                if shell.storm_seq == seq {
                    shell.kernel.set_rate(self.ctx.now, shell.base_ppm);
                }
            }
            Ev::ServerUp { seq } => self.server_up(seq),
            Ev::Fault(fault) => self.fault(fault),
            Ev::End => {}
        }
    }

    fn start(&mut self, n: usize) {
        if self.ctx.now < self.starts_held_until && self.nodes[n].proc.is_none() {
            // The operator keeps new processes from starting until the hold ends.
            let later = self.starts_held_until + self.ctx.rng.below(self.plan.profile.restart.1);
            let node = self.nodes[n].shell.idx;
            self.ctx.at(later, Ev::Start { node });
            return;
        }
        let ctx = &mut self.ctx;
        let Node { shell, proc } = &mut self.nodes[n];
        if proc.is_some() {
            return;
        }
        if let Some(hosts) = &self.hosts {
            shell.ordinal = hosts
                .id_of(&shell.name)
                .unwrap_or_else(|e| panic!("host {}: {e}", shell.name))
                .get();
        }
        let inc = shell.next_inc;
        shell.next_inc += 1;
        let offset = shell.wall_steps;
        let local = num(shell.kernel.at(ctx.now).saturating_add(offset));
        let clock = SimClock::new(local);
        let (declare, epoch_ms) = (shell.declare_kinds, shell.epoch_ms);
        let new = |&set: &KindSet| (factory(&clock, set, declare, epoch_ms), set);
        let factories = shell.kinds.iter().map(new).collect();
        let link = SimLink::new(clock.clone());
        let seed = ctx.rng.next_u64();
        let strategy = Arc::new(self.backend.strategy(link.clone(), shell.ordinal, seed));
        // What `LeaseManagerBuilder::start` asks before anything else.
        if let Err(e) = strategy.check_terms(&ctx.config.terms()) {
            panic!("the strategy refuses the simulated lease configuration: {e}");
        }
        let machine = LeaseMachine::new(
            ctx.config.clone(),
            strategy.profile().deterministic,
            None,
            Jitter::new(ctx.rng.next_u64()),
        )
        .unwrap_or_else(|e| panic!("lease config: {e}"));
        ctx.trace(
            Some(shell.idx),
            "process {a} starts, clock {b}",
            &[u64::from(inc), local],
        );
        ctx.stats.node("process starts");
        let mut p = Proc {
            inc,
            clock,
            offset,
            factories,
            strategy,
            link,
            cache: LeaseCache::new(),
            machine,
            started: false,
            call: None,
            window: None,
            holder: None,
            lease_key: None,
            enable_pending: false,
            range_slot: None,
            frozen: None,
            held_replies: Vec::new(),
            wake_seq: 0,
            tick_seq: 0,
            state: "starting",
            halted: false,
            quick_restart: false,
        };
        p.chain_tick(ctx, shell, local);
        *proc = Some(p);
        self.drive(n);
    }

    fn drive(&mut self, n: usize) {
        let Node { shell, proc } = &mut self.nodes[n];
        let Some(p) = proc.as_mut() else { return };
        match p.drive(&mut self.ctx, shell) {
            None => {}
            Some(Exit::Halted) => {
                // A liveness probe restarts a pod whose lease manager halted.
                let (lo, hi) = self.plan.profile.restart;
                let later = self.ctx.now + 10 * self.ctx.rng.between(lo, hi);
                let (node, inc) = (shell.idx, p.inc);
                self.ctx.at(later, Ev::Kill { node, inc });
            }
            Some(Exit::Failed) => {
                self.ctx.stats.node("startup failures");
                let shell = &mut self.nodes[n].shell;
                shell.failed_starts = shell.failed_starts.saturating_add(1);
                self.exit(n);
            }
            Some(Exit::Stopped) => self.exit(n),
        }
    }

    /// The process ends; a new one starts after the restart delay.
    fn exit(&mut self, n: usize) {
        let Node { shell, proc } = &mut self.nodes[n];
        let mut quick = false;
        if let Some(p) = proc.take() {
            quick = p.quick_restart;
            if p.started {
                shell.failed_starts = 0;
            }
            if let Some(t) = self.ctx.timeline.as_mut() {
                t.disable(shell.idx, self.ctx.now);
            }
            self.ctx
                .trace(Some(shell.idx), "process {a} exits", &[u64::from(p.inc)]);
        }
        let (lo, hi) = if quick {
            (10, 3_000)
        } else {
            self.plan.profile.restart
        };
        let mut delay = self.ctx.rng.between(lo, hi);
        if shell.failed_starts > 0 {
            // Restarts of a process that keeps failing to start back off, up to five minutes
            // (or a lease, if shorter).
            let cap = self.plan.profile.lease.min(300_000);
            let factor = 1u64 << shell.failed_starts.min(16);
            delay = delay.saturating_mul(factor).min(cap);
        }
        let later = self.ctx.now + delay;
        self.ctx.at(later, Ev::Start { node: shell.idx });
    }

    fn tick(&mut self, n: usize, inc: u32, chain: Option<u64>, burst: u8) {
        let Some((ctx, shell, p)) = self.process(n, Some(inc)) else {
            return;
        };
        if chain.is_some_and(|seq| seq != p.tick_seq) {
            return;
        }
        if let Some(frozen) = p.frozen.as_mut() {
            frozen.tick_missed |= chain.is_some();
            return;
        }
        p.tick(ctx, shell);
        let local = p.clock.now_ms();
        let burst = if chain.is_some() {
            p.chain_tick(ctx, shell, local);
            Proc::<B::S>::burst(ctx)
        } else {
            burst
        };
        if burst > 0 {
            p.tick_at(ctx, shell, local + ctx.profile.grid, None, burst - 1);
        }
    }

    /// Message `order` of node `node`'s direction `way` (0: to the server, 1: back) arrives.
    fn arrived(&mut self, node: u16, way: usize, order: u64) {
        let delivered = &mut self.nodes[usize::from(node)].shell.delivered[way];
        if order < *delivered {
            self.ctx.stats.net("reordered");
        }
        *delivered = order.max(*delivered);
    }

    fn at_server(&mut self, node: u16, request: Request, id: u64, inc: u32) {
        let partition = self.nodes[usize::from(node)].shell.partition;
        let Some(state) = self.server.as_mut() else {
            return;
        };
        let now = state.clock.ms(self.ctx.now);
        let rng = &mut self.ctx.rng;
        let response = if !state.down {
            let summary = summarize(&request);
            let response = state.server.handle(self.ctx.now, now, request);
            let (what, a, b) = summary.outcome(&response);
            self.ctx.trace(Some(node), what, &[a, b, now]);
            Ok(response)
        } else if let Some(reply) = state.server.answer_while_down(now, &request, rng) {
            self.ctx.stats.net("answered by a deposed etcd leader");
            let what = "keep-alive answered by the deposed etcd leader";
            self.ctx.trace(Some(node), what, &[]);
            Ok(reply)
        } else {
            self.ctx.stats.net("refused: coordinator down");
            if !self.ctx.rng.chance(700_000) {
                return;
            }
            Err(NetError)
        };
        let shell = &mut self.nodes[usize::from(node)].shell;
        let ev = Ev::ToNode(shell.message(1, inc, id, response));
        self.ctx.transmit(partition, ev, node);
    }

    /// Hands the answer to call `id` to process `inc` of node `n`, if it still runs.
    fn deliver(&mut self, n: usize, id: u64, response: Result<Reply, NetError>, inc: u32) {
        let Some((ctx, shell, p)) = self.process(n, Some(inc)) else {
            return;
        };
        if p.frozen.is_some() {
            // Waits (in the kernel's socket buffer) until the process runs again.
            p.held_replies.push((id, response));
            return;
        }
        if p.link.deliver(id, response) && p.poll_call(ctx, shell) {
            self.drive(n);
        }
    }

    fn resume(&mut self, n: usize, inc: u32) {
        let Some((ctx, shell, p)) = self.process(n, Some(inc)) else {
            return;
        };
        let Some(frozen) = p.frozen.take() else {
            return;
        };
        if let Some(from) = frozen.uncounted_from {
            // The clock stood still while the machine slept.
            let kernel_now = shell.kernel.at(ctx.now);
            p.offset = i64::try_from(from).unwrap_or(i64::MAX) - kernel_now;
        }
        let local = p.sync(ctx, shell);
        ctx.trace(Some(shell.idx), "resumes, clock {a}", &[local]);
        // Generating threads race the lease manager after SIGCONT.
        let tick_first = ctx.rng.chance(500_000);
        if tick_first {
            p.tick(ctx, shell);
        }
        for (id, response) in std::mem::take(&mut p.held_replies) {
            if p.link.deliver(id, response) {
                p.poll_call(ctx, shell);
            }
        }
        if frozen.tick_missed {
            p.chain_tick(ctx, shell, local);
        }
        self.drive(n);
        if !tick_first
            && let Some((ctx, shell, p)) = self.process(n, Some(inc))
            && p.frozen.is_none()
        {
            p.tick(ctx, shell);
        }
    }

    fn server_up(&mut self, seq: u64) {
        let Some(state) = self.server.as_mut() else {
            return;
        };
        if state.up_seq != seq {
            return;
        }
        state.down = false;
        let now = state.clock.ms(self.ctx.now);
        match (state.on_up.take(), &mut state.server) {
            (Some(OnUp::Redis(persistence)), Server::Redis(server)) => {
                state.run_ids += 1;
                let lost = server.restart(now, state.run_ids, persistence);
                self.ctx.trace(
                    None,
                    "redis up, run id {a}, {b} leases forgotten",
                    &[state.run_ids, num(lost)],
                );
            }
            (Some(OnUp::Etcd(recovery)), Server::Etcd(server)) => {
                let forgotten = server.start(now, recovery);
                self.ctx.trace(
                    None,
                    "etcd has a leader, term {a}, revision {b}, {c} leases forgotten",
                    &[server.term(), num(server.revision()), num(forgotten)],
                );
            }
            (Some(OnUp::ZooKeeper { keeps_data }), Server::ZooKeeper(server)) => {
                let forgotten = server.start(now, keeps_data);
                self.ctx.trace(
                    None,
                    "zookeeper has a leader, epoch {a}, {b} live sessions, {c} sessions forgotten",
                    &[num(server.epoch()), num(server.sessions()), num(forgotten)],
                );
            }
            _ => self.ctx.trace(None, "coordinator up", &[]),
        }
    }

    /// The context, and node `n`'s shell and process if it runs one (process `inc`, if named).
    fn process(
        &mut self,
        n: usize,
        inc: Option<u32>,
    ) -> Option<(&mut Ctx, &mut Shell, &mut Proc<B::S>)> {
        let Node { shell, proc } = &mut self.nodes[n];
        let p = proc.as_mut().filter(|p| inc.is_none_or(|i| i == p.inc))?;
        Some((&mut self.ctx, shell, p))
    }

    /// Whether node `n` runs a process that passes `test`.
    fn runs(&self, n: usize, test: impl FnOnce(&Proc<B::S>) -> bool) -> bool {
        self.nodes[n].proc.as_ref().is_some_and(test)
    }

    /// A node with a running, unfrozen process (the fault's target), if any.
    fn pick_running(&mut self, started_only: bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.runs(i, |p| p.frozen.is_none() && (!started_only || p.started)))
            .collect();
        (!candidates.is_empty()).then(|| candidates[self.ctx.rng.index(candidates.len())])
    }

    /// Graceful shutdown: factories off, then the release.
    fn shutdown(&mut self, n: usize, quick: bool) {
        self.busy(n);
        let Some((ctx, shell, p)) = self.process(n, None) else {
            return;
        };
        let local = p.sync(ctx, shell);
        p.drop_call();
        p.halted = false;
        p.quick_restart = quick;
        p.machine.shutdown(local);
        ctx.trace(Some(shell.idx), "graceful shutdown", &[]);
        self.drive(n);
    }

    /// A busy node was generating when the fault hit it (half the time).
    fn busy(&mut self, n: usize) {
        if !self.ctx.rng.chance(500_000) {
            return;
        }
        if let Some((ctx, shell, p)) = self.process(n, None)
            && p.frozen.is_none()
        {
            p.tick(ctx, shell);
        }
    }

    fn lease_fraction(&mut self, lo_permille: u64, hi_permille: u64) -> u64 {
        self.plan.profile.lease * self.ctx.rng.between(lo_permille, hi_permille) / 1000
    }

    /// Every node shuts down gracefully in a random order, one every `stagger` ms or so, each
    /// replacement starting shortly after; returns the stagger.
    fn roll_out(&mut self) -> u64 {
        let mut order: Vec<u16> = (0..self.nodes.len())
            .map(|i| self.nodes[i].shell.idx)
            .collect();
        for i in (1..order.len()).rev() {
            let j = self.ctx.rng.index(i + 1);
            order.swap(i, j);
        }
        let stagger = self.ctx.rng.between(20, 2_000);
        let mut at = self.ctx.now;
        for node in order {
            self.ctx.at(at, Ev::Shutdown { node });
            at += self.ctx.rng.between(stagger / 2, stagger);
        }
        stagger
    }

    /// [`Fault::HostListEdit`]: a host added to the node list between two of the fleet's (or,
    /// a third of the time, one added earlier removed), then the new list rolled out.
    fn edit_host_list(&mut self) -> Option<()> {
        let hosts = self.hosts.as_mut()?;
        let removed = !self.added_hosts.is_empty() && self.ctx.rng.chance(330_000);
        let slot = if removed {
            let slot = self
                .added_hosts
                .swap_remove(self.ctx.rng.index(self.added_hosts.len()));
            hosts.remove(&host_name(slot));
            slot
        } else {
            let slots = num(self.nodes.len()) * 16;
            let slot = loop {
                let slot = self.ctx.rng.below(slots);
                if !slot.is_multiple_of(16) && !self.added_hosts.contains(&slot) {
                    break slot;
                }
            };
            hosts.add(&host_name(slot));
            self.added_hosts.push(slot);
            slot
        };
        let what = if removed {
            "node list: host {a} removed ({b} entries); rolled out, a node every {c} ms"
        } else {
            "node list: host {a} added ({b} entries); rolled out, a node every {c} ms"
        };
        let entries = num(hosts.entries().len());
        let stagger = self.roll_out();
        self.ctx.trace(None, what, &[slot, entries, stagger]);
        Some(())
    }

    fn fault(&mut self, fault: Fault) {
        let applied = self.apply_fault(fault).is_some();
        if applied {
            self.ctx.stats.fault(fault.name());
        }
        if let Some(t) = self.ctx.timeline.as_mut() {
            t.fault(applied.then_some(fault.name()), self.ctx.now);
        }
    }

    #[allow(clippy::too_many_lines)]
    fn apply_fault(&mut self, fault: Fault) -> Option<()> {
        let now = self.ctx.now;
        let profile = self.plan.profile;
        match fault {
            Fault::Partition => {
                let n = self.ctx.rng.index(self.nodes.len());
                let until = now + self.lease_fraction(50, 1500);
                let hold = self.ctx.rng.chance(500_000);
                self.nodes[n].shell.partition = Some(Partition { until, hold });
                let node = self.nodes[n].shell.idx;
                self.ctx.struck(Some(node), Some(until));
                self.ctx.trace(
                    Some(node),
                    "partitioned until {a} (held: {b})",
                    &[until, u64::from(hold)],
                );
                Some(())
            }
            Fault::Crash => {
                let n = self.pick_running(false)?;
                self.busy(n);
                let node = self.nodes[n].shell.idx;
                self.ctx.trace(Some(node), "crash", &[]);
                self.ctx.struck(Some(node), None);
                self.exit(n);
                Some(())
            }
            Fault::Freeze | Fault::Suspend | Fault::SuspendUncounted => {
                let n = self.pick_running(false)?;
                let duration = match fault {
                    Fault::Freeze if self.ctx.rng.chance(600_000) => {
                        // Past the lease.
                        self.lease_fraction(1000, 1300) + profile.margin
                    }
                    Fault::Freeze => self.lease_fraction(10, 500),
                    _ => self.lease_fraction(100, 2000),
                };
                self.busy(n);
                let (ctx, shell, p) = self.process(n, None)?;
                let local = p.sync(ctx, shell);
                p.frozen = Some(Frozen {
                    uncounted_from: (fault == Fault::SuspendUncounted).then_some(local),
                    tick_missed: false,
                });
                ctx.trace(Some(shell.idx), "frozen for {a} ms", &[duration]);
                ctx.struck(Some(shell.idx), Some(now + duration));
                let (node, inc) = (shell.idx, p.inc);
                ctx.at(now + duration, Ev::Resume { node, inc });
                Some(())
            }
            Fault::ManagerRestartCached | Fault::ManagerRestartUncached => {
                let n = self.pick_running(true)?;
                let (ctx, shell, p) = self.process(n, None)?;
                if p.halted {
                    return None;
                }
                // What the tokio driver does after a panic in its task.
                p.drop_call();
                for (f, _) in &p.factories {
                    LeaseTarget::disable(f);
                }
                p.record_issued(ctx);
                p.window = None;
                if fault == Fault::ManagerRestartUncached {
                    p.cache.clear();
                }
                // Half the time the process builds new factories for the new manager (the
                // cache's documentation invites it): they know nothing of what the old ones
                // issued but what the cache carries.
                let new_factories = ctx.rng.chance(500_000);
                if new_factories {
                    for (f, set) in &mut p.factories {
                        *f = factory(&p.clock, *set, shell.declare_kinds, f.epoch_ms());
                    }
                }
                let config = ctx.config.clone().with_acquire_timeout(None);
                p.machine = LeaseMachine::new(
                    config,
                    p.strategy.profile().deterministic,
                    p.cache.get(),
                    Jitter::new(ctx.rng.next_u64()),
                )
                .unwrap_or_else(|e| panic!("lease config: {e}"))
                .after_startup();
                p.state = "starting";
                let cached = u64::from(fault == Fault::ManagerRestartCached);
                ctx.struck(Some(shell.idx), None);
                ctx.trace(
                    Some(shell.idx),
                    "lease manager restarts (cache: {a}, new factories: {b})",
                    &[cached, u64::from(new_factories)],
                );
                self.drive(n);
                Some(())
            }
            Fault::Rolling => {
                let n = self.pick_running(false)?;
                self.ctx.struck(Some(self.nodes[n].shell.idx), None);
                self.shutdown(n, false);
                Some(())
            }
            Fault::EpochChange => {
                let n = self.pick_running(false)?;
                // Up to a lease either way: an earlier epoch puts the node's timestamps ahead
                // of its predecessors', a later one behind them.
                let lease = self.plan.profile.lease;
                let delta = self.ctx.rng.signed(lease);
                let shell = &mut self.nodes[n].shell;
                shell.epoch_ms = DEFAULT_EPOCH_MS.saturating_add_signed(delta);
                self.ctx.trace(
                    Some(shell.idx),
                    "redeployed with epoch {a} ({b} ms from the default)",
                    &[shell.epoch_ms, delta.unsigned_abs()],
                );
                self.ctx.struck(Some(shell.idx), None);
                self.shutdown(n, false);
                Some(())
            }
            Fault::HostListEdit => self.edit_host_list(),
            Fault::RollingDeploy => {
                let stagger = self.roll_out();
                self.ctx.trace(
                    None,
                    "rolling deployment, one node every {a} ms",
                    &[stagger],
                );
                Some(())
            }
            Fault::ExternalLoss => {
                let n = self.pick_running(true)?;
                let (ctx, shell, p) = self.process(n, None)?;
                let local = p.sync(ctx, shell);
                if p.machine.lease_lost(local, "conflict guard") {
                    p.drop_call();
                }
                ctx.trace(Some(shell.idx), "external loss signal", &[]);
                ctx.struck(Some(shell.idx), None);
                self.drive(n);
                Some(())
            }
            Fault::WallStepForward | Fault::WallStepBackward => {
                let n = self.ctx.rng.index(self.nodes.len());
                let step = if self.plan.backend == BackendKind::Static {
                    // Within the margin plus the release guard: the documented condition.
                    self.ctx.rng.between(1, 2 * profile.margin)
                } else if self.ctx.rng.chance(300_000) {
                    self.ctx.rng.between(60_000, 3_600_000)
                } else {
                    self.ctx.rng.between(1, 2 * profile.margin)
                };
                let step = i64::try_from(step).unwrap_or(0);
                let back = fault == Fault::WallStepBackward;
                let delta = if back { -step } else { step };
                let shell = &mut self.nodes[n].shell;
                shell.wall_steps += delta;
                let node = shell.idx;
                let what = "wall clock steps {a} ms (back: {b})";
                let args = [step.unsigned_abs(), u64::from(delta < 0)];
                self.ctx.trace(Some(node), what, &args);
                self.ctx.struck(Some(node), None);
                if self.plan.backend == BackendKind::Static
                    && delta < 0
                    && self.runs(n, |p| p.frozen.is_none())
                {
                    // The pod is restarted on the stepped clock: its new process starts behind
                    // the old one's last timestamps, by up to the step.
                    self.busy(n);
                    self.ctx.trace(Some(node), "restarted after the step", &[]);
                    self.exit(n);
                }
                Some(())
            }
            Fault::DriftStorm => {
                let n = self.ctx.rng.index(self.nodes.len());
                let ppm = self.ctx.rng.signed(20_000);
                let until = now + self.lease_fraction(100, 1000);
                let shell = &mut self.nodes[n].shell;
                shell.kernel.set_rate(now, ppm);
                shell.storm_seq += 1;
                let (node, seq) = (shell.idx, shell.storm_seq);
                self.ctx.at(until, Ev::StormEnd { node, seq });
                self.ctx.struck(Some(node), Some(until));
                self.ctx.trace(
                    Some(node),
                    "clock rate off by {a} ppm",
                    &[ppm.unsigned_abs()],
                );
                Some(())
            }
            Fault::CoordinatorClockForward | Fault::CoordinatorClockBackward => {
                let jump = match self.plan.clocks {
                    Clocks::Tight => self.ctx.rng.between(1, (profile.margin / 4).max(1)),
                    Clocks::Wide if self.ctx.rng.chance(300_000) => self.lease_fraction(100, 1000),
                    Clocks::Wide => self.ctx.rng.between(1, 3 * profile.margin),
                };
                let state = self.server.as_mut()?;
                let delta = i64::try_from(jump).unwrap_or(0);
                let back = fault == Fault::CoordinatorClockBackward;
                let delta = if back { -delta } else { delta };
                let what = if state.server.leases_on_wall_clock() {
                    state.clock.step(now, delta);
                    "coordinator clock jumps {a} ms (back: {b})"
                } else {
                    "the coordinator's wall clock jumps {a} ms (back: {b}); its leases run on its monotonic clock"
                };
                self.ctx.trace(None, what, &[jump, u64::from(delta < 0)]);
                Some(())
            }
            Fault::ForceRelease => {
                let state = up(&mut self.server)?;
                let now_c = state.clock.ms(now);
                let held = state.server.held(now_c);
                if held.is_empty() {
                    return None;
                }
                let id = held[self.ctx.rng.index(held.len())];
                state.server.force_release(now, now_c, id);
                self.ctx.trace(
                    None,
                    "operator force-releases id {a}",
                    &[u64::from(id.get())],
                );
                Some(())
            }
            Fault::CoordinatorRestart
            | Fault::RedisAmnesia
            | Fault::RedisSnapshot
            | Fault::SqlFailover
            | Fault::SqlLostCommits
            | Fault::RedisFailover
            | Fault::EtcdLeaderChange
            | Fault::EtcdRestore
            | Fault::ZooKeeperDataLost => self.coordinator_down(fault),
            Fault::StoreWiped => self.store_wiped(),
        }
    }

    /// The store's lease data vanishes while the server stays up.
    fn store_wiped(&mut self) -> Option<()> {
        let now = self.ctx.now;
        let state = up(&mut self.server)?;
        let now_c = state.clock.ms(now);
        let rng = &mut self.ctx.rng;
        let (what, lost, record) = match &mut state.server {
            Server::Redis(server) => (
                "redis lease hash deleted: {a} leases lost",
                server.wipe(now_c),
                false,
            ),
            Server::Sql(server) => {
                // The coordinator row lives in a table of its own: an operator may wipe it too.
                let record = rng.chance(250_000);
                if rng.chance(500_000) {
                    let lost = server.held(now_c).len();
                    server.wipe(now, None, record);
                    (
                        "sql lease table truncated: {a} leases lost (coordinator row too: {b})",
                        lost,
                        record,
                    )
                } else {
                    // A cleanup script deletes the rows of some held IDs.
                    let mut held = server.held(now_c);
                    if held.is_empty() {
                        return None;
                    }
                    let keep = held.len() - 1 - rng.index(held.len().min(8));
                    for _ in 0..keep {
                        held.swap_remove(rng.index(held.len()));
                    }
                    let lost = server.wipe(now, Some(&held), record);
                    (
                        "sql rows of {a} held ids deleted (coordinator row too: {b})",
                        lost,
                        record,
                    )
                }
            }
            Server::Etcd(server) => (
                "etcd prefix deleted: {a} leases lost",
                server.wipe(now_c),
                false,
            ),
            Server::ZooKeeper(server) => (
                "zookeeper lease data deleted: {a} leases lost",
                server.wipe(now_c),
                false,
            ),
        };
        self.ctx.trace(None, what, &[num(lost), u64::from(record)]);
        Some(())
    }

    fn coordinator_down(&mut self, fault: Fault) -> Option<()> {
        let now = self.ctx.now;
        let short = self.plan.profile.lease <= 5_000;
        let mut down_for = if short {
            self.ctx.rng.between(100, 3_000)
        } else {
            self.ctx.rng.between(500, 20_000)
        };
        let lag = if self.ctx.rng.chance(200_000) {
            self.ctx.rng.between(10_000, 60_000)
        } else {
            self.ctx.rng.between(0, 10_000)
        };
        let state = up(&mut self.server)?;
        let now_c = state.clock.ms(now);
        let mut lost = 0;
        match (&mut state.server, fault) {
            (Server::Redis(_), Fault::CoordinatorRestart) => {
                state.on_up = Some(OnUp::Redis(Persistence::Always));
            }
            (Server::Redis(_), Fault::RedisAmnesia) => {
                state.on_up = Some(OnUp::Redis(Persistence::None));
            }
            (Server::Redis(_), Fault::RedisSnapshot) => {
                state.on_up = Some(OnUp::Redis(Persistence::Snapshot));
            }
            (Server::Redis(server), Fault::RedisFailover) => {
                state.run_ids += 1;
                lost = server.fail_over(now_c, lag, state.run_ids);
            }
            (Server::Sql(_), Fault::CoordinatorRestart) => {}
            (Server::Sql(server), Fault::SqlFailover) => lost = server.fail_over(now, lag),
            (Server::Sql(server), Fault::SqlLostCommits) => {
                lost = server.lose_recent_commits(now, lag);
            }
            (Server::Etcd(server), Fault::CoordinatorRestart) => {
                server.stop(now_c);
                state.on_up = Some(OnUp::Etcd(Recovery::Restart));
            }
            (Server::Etcd(server), Fault::EtcdLeaderChange) => {
                // Followers wait one to two election timeouts; the cut-off leader steps down
                // within one (check quorum), unless the leadership moved on purpose.
                down_for = self.ctx.rng.between(1_000, 2_500);
                let deposed = self
                    .ctx
                    .rng
                    .chance(500_000)
                    .then(|| now_c + self.ctx.rng.between(0, down_for));
                server.lose_leader(now_c, deposed);
                state.on_up = Some(OnUp::Etcd(Recovery::Election));
            }
            (Server::Etcd(server), Fault::EtcdRestore) => {
                server.stop(now_c);
                let from_backup = self.ctx.rng.chance(700_000);
                let new_cluster_id = self.ctx.rng.chance(500_000);
                state.on_up = Some(OnUp::Etcd(Recovery::Restore {
                    from_backup,
                    new_cluster_id,
                }));
                // As lease-etcd's documentation asks: no new process for the longest lease.
                let until = now + down_for + self.plan.profile.lease;
                self.starts_held_until = self.starts_held_until.max(until);
            }
            (Server::ZooKeeper(server), Fault::CoordinatorRestart) => {
                server.stop(now_c);
                state.on_up = Some(OnUp::ZooKeeper { keeps_data: true });
            }
            (Server::ZooKeeper(server), Fault::ZooKeeperDataLost) => {
                server.stop(now_c);
                state.on_up = Some(OnUp::ZooKeeper { keeps_data: false });
            }
            _ => return None,
        }
        state.down = true;
        state.up_seq += 1;
        let seq = state.up_seq;
        self.ctx.trace(
            None,
            "coordinator down for {a} ms (lag {b} ms, {c} writes lost)",
            &[down_for, lag, num(lost)],
        );
        self.ctx.at(now + down_for, Ev::ServerUp { seq });
        self.ctx.struck(None, Some(now + down_for));
        Some(())
    }
}

/// The coordinator's server, if there is one and it is up.
fn up(server: &mut Option<ServerState>) -> Option<&mut ServerState> {
    server.as_mut().filter(|state| !state.down)
}

/// A request, remembered to describe its outcome in the trace.
enum Summary {
    SqlClaim,
    SqlOther(&'static str, u64),
    RedisRead,
    RedisClaim(u64),
    RedisOther(&'static str, u64),
    EtcdRange,
    EtcdTxn(u64),
    EtcdLease,
    ZkConnect,
    /// A multi-op (the ID of its first lease znode, `u64::MAX` when none), or another request.
    ZkWrite(u64),
    ZkRead,
    ZkOther,
    Sleep,
}

fn summarize(request: &Request) -> Summary {
    match request {
        Request::Sql(statement) => {
            let (what, id) = match statement.request {
                SqlRequest::Claim { .. } => return Summary::SqlClaim,
                SqlRequest::Renew { id, .. } => ("sql renew id {a}: {b}", id.get()),
                SqlRequest::Release { id, .. } => ("sql release id {a}: {b}", id.get()),
                SqlRequest::RaiseFloor { id, .. } => ("sql raise floor id {a}: {b}", id.get()),
                SqlRequest::Diagnose => ("sql diagnose", 0),
                _ => ("sql guard bookkeeping", 0),
            };
            Summary::SqlOther(what, id.into())
        }
        Request::Sleep(_) => Summary::Sleep,
        Request::Redis(RedisRequest::Read { .. }) => Summary::RedisRead,
        Request::Redis(RedisRequest::Claim { id, .. }) => Summary::RedisClaim(u64::from(id.get())),
        Request::Redis(RedisRequest::Renew { id, .. }) => {
            Summary::RedisOther("redis renew id {a}: {b}", u64::from(id.get()))
        }
        Request::Redis(RedisRequest::Release { id, .. }) => {
            Summary::RedisOther("redis release id {a}: {b}", u64::from(id.get()))
        }
        Request::Redis(_) => Summary::RedisOther("redis start hold-off: open at {b}", 0),
        Request::Etcd(EtcdRequest::Range { .. }) => Summary::EtcdRange,
        Request::Etcd(EtcdRequest::Txn(txn)) => {
            let lease_id = |key: &str| match EtcdKey::parse(key) {
                Some(EtcdKey::Lease(id)) => Some(id),
                _ => None,
            };
            let id = match txn.then.first() {
                Some(EtcdTxnOp::Put { key, .. }) => lease_id(key),
                _ => None,
            }
            .or_else(|| txn.when.iter().find_map(|c| lease_id(&c.key)));
            Summary::EtcdTxn(id.map_or(u64::MAX, u64::from))
        }
        Request::Etcd(_) => Summary::EtcdLease,
        Request::ZooKeeper(ZkRequest::Connect { .. }) => Summary::ZkConnect,
        Request::ZooKeeper(ZkRequest::On { request, .. }) => match request {
            ZkOp::Read(_) => Summary::ZkRead,
            ZkOp::Write(ops) => {
                let id = ops.iter().find_map(|op| {
                    let path = match op {
                        ZkWriteOp::Check { path, .. }
                        | ZkWriteOp::Create { path, .. }
                        | ZkWriteOp::SetData { path, .. }
                        | ZkWriteOp::Delete { path, .. } => path,
                    };
                    path.strip_prefix("/nononce/leases/")?.parse::<u64>().ok()
                });
                Summary::ZkWrite(id.unwrap_or(u64::MAX))
            }
            _ => Summary::ZkOther,
        },
    }
}

impl Summary {
    fn outcome(&self, response: &Reply) -> (&'static str, u64, u64) {
        match (self, response) {
            (Self::Sleep, _) => ("wait over", 0, 0),
            (
                Self::SqlClaim,
                Reply::Sql(Ok(SqlReply::Claim(SqlClaim::Won { id, floor_ms, .. }))),
            ) => (
                "sql claim: id {a}, floor before {b}, db clock {c}",
                id.get().into(),
                *floor_ms,
            ),
            (Self::SqlClaim, _) => ("sql claim: nothing (db clock {c})", 0, 0),
            (Self::SqlOther(what, id), Reply::Sql(Ok(SqlReply::Matched { ours, .. }))) => {
                (what, *id, u64::from(*ours))
            }
            (Self::SqlOther(what, id), _) => (what, *id, 0),
            (Self::RedisRead, Reply::Redis(RedisReply::Read { free, .. })) => {
                ("redis read: {a} free", num(free.readable.len()), 0)
            }
            (Self::RedisClaim(id), Reply::Redis(RedisReply::Claim(claim))) => match claim {
                RedisClaim::Won { floor_ms, .. } => {
                    ("redis claim id {a}: won, floor before {b}", *id, *floor_ms)
                }
                RedisClaim::HeldOff { open_at_ms, .. } => (
                    "redis claim id {a}: no marker, held off until {b}",
                    *id,
                    *open_at_ms,
                ),
                RedisClaim::ServerChanged(_) => ("redis claim id {a}: another server", *id, 0),
                _ => ("redis claim id {a}: taken", *id, 0),
            },
            (Self::RedisOther(what, id), Reply::Redis(RedisReply::Renewed { renewed, .. })) => {
                (what, *id, u64::from(*renewed))
            }
            (Self::RedisOther(what, id), Reply::Redis(RedisReply::Released(ours))) => {
                (what, *id, u64::from(*ours))
            }
            (Self::RedisOther(what, id), Reply::Redis(RedisReply::OpenAt(at))) => (what, *id, *at),
            (Self::RedisRead | Self::RedisClaim(_) | Self::RedisOther(..), _) => {
                ("redis: unexpected reply", 0, 0)
            }
            (Self::EtcdLease, Reply::Etcd(EtcdResponse::LeaseNotFound)) => {
                ("etcd: requested lease not found", 0, 0)
            }
            (_, Reply::Etcd(EtcdResponse::Answer(reply))) => self.etcd(reply),
            (_, Reply::ZooKeeper(response)) => self.zookeeper(response),
            (Self::EtcdTxn(id), _) => ("etcd txn on id {a}: refused", *id, 0),
            _ => ("etcd: unexpected reply", 0, 0),
        }
    }

    /// The outcome of a ZooKeeper request.
    fn zookeeper(&self, response: &ZkResponse) -> (&'static str, u64, u64) {
        match (self, response) {
            (_, ZkResponse::Connected(session)) => (
                "zookeeper session {a} opened, timeout {b} ms",
                session.id.cast_unsigned(),
                num(session.timeout.as_millis()),
            ),
            (_, ZkResponse::SessionExpired) => ("zookeeper: session expired", 0, 0),
            (_, ZkResponse::ConnectionLoss) => ("zookeeper: request after a later one", 0, 0),
            (Self::ZkWrite(id), ZkResponse::Answer(ZkReply::Written(_))) => {
                ("zookeeper multi on id {a}: applied", *id, 0)
            }
            (Self::ZkWrite(id), ZkResponse::Answer(ZkReply::Refused { index, .. })) => (
                "zookeeper multi on id {a}: refused at op {b}",
                *id,
                num(*index),
            ),
            (Self::ZkRead, ZkResponse::Answer(ZkReply::Read(results))) => {
                let found = results
                    .iter()
                    .filter(|r| !matches!(r, ZkReadResult::Missing))
                    .count();
                (
                    "zookeeper read: {a} of {b} found",
                    num(found),
                    num(results.len()),
                )
            }
            (_, ZkResponse::Answer(ZkReply::Done)) => ("zookeeper: done", 0, 0),
            _ => ("zookeeper: unexpected reply", 0, 0),
        }
    }

    /// The outcome of an etcd request that etcd answered.
    fn etcd(&self, reply: &EtcdReply) -> (&'static str, u64, u64) {
        let revision = |header: &Option<EtcdHeader>| header.map_or(0, |h| num(h.revision));
        match (self, reply) {
            (Self::EtcdRange, EtcdReply::Range { header, kvs }) => {
                let what = "etcd range: {a} keys, revision {b}";
                (what, num(kvs.len()), revision(header))
            }
            (
                Self::EtcdTxn(id),
                EtcdReply::Txn {
                    header, succeeded, ..
                },
            ) => {
                let revision = revision(header);
                if *succeeded {
                    ("etcd txn on id {a}: succeeded, revision {b}", *id, revision)
                } else {
                    ("etcd txn on id {a}: failed, revision {b}", *id, revision)
                }
            }
            (Self::EtcdTxn(id), _) => ("etcd txn on id {a}: refused", *id, 0),
            (Self::EtcdLease, EtcdReply::Granted { ttl_s, .. }) => {
                ("etcd lease grant: ttl {a} s", num(*ttl_s), 0)
            }
            (Self::EtcdLease, EtcdReply::KeptAlive { header, ttl_s }) => {
                let term = header.map_or(0, |h| h.raft_term);
                ("etcd keep-alive: ttl {a} s, term {b}", num(*ttl_s), term)
            }
            (Self::EtcdLease, EtcdReply::Revoked) => ("etcd lease revoke", 0, 0),
            (Self::EtcdLease, EtcdReply::TimeToLive { ttl_s }) => {
                let what = "etcd lease time-to-live: {a} s (-1: none)";
                (what, ttl_s.cast_unsigned(), 0)
            }
            _ => ("etcd: unexpected reply", 0, 0),
        }
    }
}
