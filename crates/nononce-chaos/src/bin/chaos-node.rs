//! A chaos node: leases a machine ID, generates nonces continuously and records everything.
//!
//! `chaos-node run ...` is one node; `chaos-node steal ...` overwrites one held lease in the
//! store (the "stolen lease" fault); `chaos-node wipe ...` deletes the run's lease data while
//! the server stays up (the "wiped store" fault); `chaos-node reserve ...` gives every ID but a
//! few to a foreign holder. Started by `cargo xtask chaos`. Stores: SQL (`postgres://`, `mysql://`,
//! `sqlite:`), `redis://`, `etcd://host:port[,host:port...][?max_lease_s=N]` and
//! `zk://host:port[,host:port...][/root][?session_timeout_s=N]`; `--name` is the table, the hash
//! key, on etcd the key prefix `/<name>/` and on ZooKeeper the root znode `/<name>`.
//!
//! The node's factories and lease manager share one [`NodeClock`]: the machine's clock plus
//! `--clock-offset-ms`; each SIGUSR1 steps it back by `--clock-step-ms`. The factories count
//! from `--epoch-ms` (the default epoch unless told). Each SIGUSR2 rebuilds the node's lease
//! manager with new factories: the running manager is dropped without releasing its lease, as
//! after a panic in its task, and a new one resumes that lease from the old one's cache.
//!
//! A factory issues one kind (counter or sortable) per size (plain and encrypted side by side
//! only by opting in, as both factories do here), and two factories on one machine
//! ID may repeat each other's values of one kind and size, so the node runs two factories that
//! split the series between them and never make one series on both:
//!
//! | factory | series |
//! |---|---|
//! | A | counter64, sortable96, counter128, encrypted64, encrypted96 (Blowfish: a 64-bit counter base), encrypted128 |
//! | B | sortable64, counter96, sortable128 |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use nononce::etcd::etcd_client::{
    Client as EtcdClient, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions,
    PutOptions, Txn, TxnOp,
};
use nononce::etcd::{EtcdOptions, EtcdStrategy};
use nononce::guard::{Announce, ConflictGuard, GuardConfig};
use nononce::lease::{
    LeaseCache, LeaseManager, LeaseTarget, MachineId, StoreAdmin as _, floor_terms,
};
use nononce::nonce::{Base, Clock as _, DEFAULT_EPOCH_MS, Factory, FactoryConfig};
use nononce::redis::{RedisOptions, RedisStrategy};
use nononce::statefulset::StatefulSetStrategy;
use nononce::zookeeper::zookeeper_client::{
    self as zk, Acls, CreateMode, MultiReadResult, MultiWriteResult,
};
use nononce::zookeeper::{ZooKeeperOptions, ZooKeeperStrategy};
use nononce::{LeaseConfig, Strategy};
use nononce_chaos::{CHAOS_KEY, Kind, NodeClock, Record, Stamp};

#[derive(Parser)]
#[command(about = "nononce chaos node")]
enum Command {
    /// Run one node until SIGTERM.
    Run(RunArgs),
    /// Overwrite one held lease in the store with a foreign token.
    Steal(StealArgs),
    /// Drop a run's lease table (PostgreSQL, MySQL/MariaDB) after the run.
    Drop(StealArgs),
    /// Give every ID from `--keep` on to a foreign holder, so that the nodes share a few IDs.
    Reserve(ReserveArgs),
    /// Delete the run's lease data while the server stays up (never initializing it again).
    Wipe(WipeArgs),
}

#[derive(clap::Args)]
struct WipeArgs {
    #[arg(long)]
    store: String,
    #[arg(long)]
    name: String,
    /// The wider form: `FLUSHALL` instead of `DEL` of the hash (Valkey/Redis), `TRUNCATE`
    /// instead of `DELETE` (PostgreSQL, MySQL/MariaDB); SQLite, etcd and ZooKeeper have one
    /// form.
    #[arg(long)]
    all: bool,
}

#[derive(clap::Args)]
struct ReserveArgs {
    #[arg(long)]
    store: String,
    #[arg(long)]
    name: String,
    /// IDs `0..keep` stay free.
    #[arg(long)]
    keep: u16,
    /// How long the foreign holder keeps the others.
    #[arg(long, default_value_t = 3_600_000)]
    ttl_ms: u64,
    /// Initializes the store first (its `migrate`): only on a store no node has used yet, never
    /// after a fault that made it lose its leases (its guard must hold the nodes off then).
    #[arg(long)]
    initialize: bool,
    /// SQL: the nodes' lease-sql URL options (`max_lease_s=5&max_clock_offset_s=31`, and
    /// `amnesia_guard=off` with their guard off), so that rows missing from a seeded table come
    /// back blocked for the nodes' own hold-off (free with their guard off).
    #[arg(long)]
    sql_options: Option<String>,
}

/// The token of the reserving holder: `steal` leaves its IDs alone.
const RESERVED_TOKEN: [u8; 16] = *b"chaos-reserved!!";
/// The Redis holder name of reserved IDs.
const RESERVED_REDIS: &str = "chaos-reserved";
/// The etcd lease key value of reserved IDs: a token in lease-etcd's form (32 hex digits),
/// [`RESERVED_TOKEN`]'s bytes.
const RESERVED_ETCD: &str = "6368616f732d72657365727665642121";
/// Operations per etcd transaction of the reservation (etcd allows 128 by default).
const ETCD_TXN_OPS: usize = 100;
/// The ZooKeeper lease znode data of reserved IDs: a token in lease-zookeeper's form (32 hex
/// digits), the same as etcd's.
const RESERVED_ZOOKEEPER: &str = RESERVED_ETCD;
/// Operations per ZooKeeper multi-op of the reservation and the wipe (each a few dozen bytes,
/// far below the server's 1 MB request limit).
const ZOOKEEPER_MULTI_OPS: usize = 100;

#[derive(clap::Args)]
struct RunArgs {
    /// Node index (stable across restarts).
    #[arg(long)]
    node: u32,
    /// Coordinator: postgres://, mysql://, sqlite:PATH, redis://, etcd://, zk://, or
    /// `statefulset`.
    #[arg(long)]
    store: String,
    /// Lease table (SQL), hash key (Redis), key prefix `/<name>/` (etcd) or root znode
    /// `/<name>` (ZooKeeper).
    #[arg(long, default_value = "chaos_leases")]
    name: String,
    /// The node's record file (created; an existing file is appended to).
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 5000)]
    lease_ms: u64,
    #[arg(long, default_value_t = 1000)]
    renew_ms: u64,
    #[arg(long, default_value_t = 2000)]
    min_ttl_ms: u64,
    #[arg(long, default_value_t = 750)]
    margin_ms: u64,
    #[arg(long, default_value_t = 1500)]
    call_timeout_ms: u64,
    /// Nonces of each kind and size per tick.
    #[arg(long, default_value_t = 3)]
    per_tick: u32,
    #[arg(long, default_value_t = 10)]
    tick_ms: u64,
    /// StatefulSet pod name (with `--store statefulset`), e.g. `chaos-7`.
    #[arg(long)]
    pod: Option<String>,
    /// Conflict guard: UDP address to bind (enables the guard).
    #[arg(long)]
    guard_bind: Option<SocketAddr>,
    /// Conflict guard seed peers.
    #[arg(long)]
    guard_seed: Vec<SocketAddr>,
    /// This node's clock minus the machine's clock, ms (negative: behind).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    clock_offset_ms: i64,
    /// How far each SIGUSR1 steps the clock back, ms.
    #[arg(long, default_value_t = 0)]
    clock_step_ms: u64,
    /// Redis: the largest offset of this node's clock from the server's (the amnesia hold-off
    /// adds twice it); SQL stores take it in their URL.
    #[arg(long, default_value_t = 3_600_000)]
    max_clock_offset_ms: u64,
    /// Redis: the amnesia guard off, its initialization marker check too (SQL stores take
    /// `amnesia_guard=off` in their URL; etcd has no such switch).
    #[arg(long)]
    without_amnesia_guard: bool,
    /// The epoch the factories count from, Unix ms.
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    /// Floors taken as clock ms, as before floors knew the epoch: the deadlines sent as floors
    /// and the bound of what was issued unconverted, the factories enabled with the floor as
    /// given (a factory off the default epoch then misreads its predecessors' floors).
    #[arg(long)]
    floors_in_clock_ms: bool,
    /// On a rebuild (SIGUSR2), the new manager resumes the lease from a copy of the cache
    /// without its record of what the old factories issued (`issued_up_to_ms` 0).
    #[arg(long)]
    without_issued_record: bool,
}

#[derive(clap::Args)]
struct StealArgs {
    #[arg(long)]
    store: String,
    #[arg(long)]
    name: String,
    /// How long the foreign holder keeps the ID.
    #[arg(long, default_value_t = 5000)]
    ttl_ms: u64,
}

/// The node file, shared by the lease callbacks and the generator.
struct Log {
    out: Mutex<BufWriter<File>>,
    clock: NodeClock,
}

impl Log {
    fn put(&self, record: &Record) {
        self.put_all(std::slice::from_ref(record));
    }

    fn put_all(&self, records: &[Record]) {
        let mut out = lock(&self.out);
        for r in records {
            // A full disk ends the run's value anyway; the checker reports what is there.
            let _ = out.write_all(&r.encode());
        }
    }

    fn flush(&self) {
        let mut out = lock(&self.out);
        let _ = out.flush();
    }

    fn now(&self) -> Stamp {
        let (at, offset) = self.clock.now_with_offset();
        Stamp::new(at, offset)
    }
}

/// The value behind `mutex`, also after a panic of another holder.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

type NodeFactory = Factory<NodeClock>;

/// Records every lease window before the factories act on it, so the file never holds a nonce
/// before the window that allows it.
struct Recorder {
    factories: [Arc<NodeFactory>; 2],
    log: Arc<Log>,
    /// `--floors-in-clock-ms`: floors taken as clock ms, as before floors knew the epoch.
    floors_in_clock_ms: bool,
}

impl LeaseTarget for Recorder {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
        if self.factories.iter().any(|f| f.is_enabled()) {
            // A new window while one is open: close it first, so no nonce of one factory's old
            // generation is read as belonging to the new window.
            self.disable();
        }
        // The floor the factories hold their timestamps above, in the floors' terms (what the
        // checker holds them to): the lease's floor, or with floors in clock ms what the
        // factories make of it, `floor_ms - epoch` as a timestamp (both share one epoch).
        let held = if self.floors_in_clock_ms {
            floor_terms(floor_ms, self.factories[0].epoch_ms())
        } else {
            floor_ms
        };
        self.log.put(&Record::Enable {
            at: self.log.now(),
            machine_id: machine_id.get(),
            floor_ms: held,
            deadline_ms,
        });
        for factory in &self.factories {
            if self.floors_in_clock_ms {
                // As before the conversion: the floor as clock ms.
                if factory
                    .enable_above(machine_id, floor_ms, deadline_ms)
                    .is_err()
                {
                    factory.disable();
                }
            } else {
                LeaseTarget::enable(&**factory, machine_id, floor_ms, deadline_ms);
            }
        }
    }

    fn extend_deadline(&self, deadline_ms: u64) {
        self.log.put(&Record::Extend {
            at: self.log.now(),
            deadline_ms,
        });
        for factory in &self.factories {
            factory.set_deadline(deadline_ms);
        }
    }

    fn disable(&self) {
        for factory in &self.factories {
            factory.disable();
        }
        // After they returned: a nonce racing with disable is dropped by the factory, so every
        // kept nonce was asked for before this time.
        self.log.put(&Record::Disable { at: self.log.now() });
        self.log.flush();
    }

    fn issued_up_to_ms(&self) -> u64 {
        self.factories
            .iter()
            .map(|f| {
                if self.floors_in_clock_ms {
                    Factory::issued_up_to_ms(f)
                } else {
                    LeaseTarget::issued_up_to_ms(&**f)
                }
            })
            .max()
            .unwrap_or(0)
    }

    fn floor_of(&self, clock_ms: u64) -> u64 {
        if self.floors_in_clock_ms {
            return clock_ms;
        }
        self.factories
            .iter()
            .map(|f| LeaseTarget::floor_of(&**f, clock_ms))
            .max()
            .unwrap_or(clock_ms)
    }
}

fn main() -> std::process::ExitCode {
    let command = Command::parse();
    nononce_chaos::block_on("chaos-node", async {
        match command {
            Command::Run(args) => run(args).await,
            Command::Steal(args) => steal(args).await,
            Command::Drop(args) => drop_table(args).await,
            Command::Reserve(args) => reserve(args).await,
            Command::Wipe(args) => wipe(args).await,
        }
    })
}

async fn run(args: RunArgs) -> Result<(), String> {
    let file = File::options()
        .create(true)
        .append(true)
        .open(&args.out)
        .map_err(|e| format!("{}: {e}", args.out.display()))?;
    let log = Arc::new(Log {
        out: Mutex::new(BufWriter::with_capacity(1 << 16, file)),
        clock: NodeClock::new(args.clock_offset_ms)
            .map_err(|e| format!("could not start the clock's ticker thread: {e}"))?,
    });
    log.put(&Record::Start {
        node: args.node,
        at: log.now(),
        // The factories' epoch (see `make_factories`).
        epoch_ms: args.epoch_ms,
    });
    log.flush();
    step_clock_on_sigusr1(&log, args.clock_step_ms)?;
    // Registered before anything else can take time: a SIGUSR2 that came before its handler
    // would end the process.
    let usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
        .map_err(|e| format!("SIGUSR2: {e}"))?;
    let ms = Duration::from_millis;
    let config = LeaseConfig::default()
        .with_lease_duration(ms(args.lease_ms))
        .with_renew_interval(ms(args.renew_ms))
        .with_min_ttl(ms(args.min_ttl_ms))
        .with_margin(ms(args.margin_ms))
        .with_call_timeout(ms(args.call_timeout_ms))
        // Wait for a lease as long as it takes: the orchestrator stops the node.
        .with_acquire_timeout(None);
    config.validate().map_err(text)?;
    let store = args.store.clone();
    if store == "statefulset" {
        let pod = args.pod.clone().unwrap_or_else(|| "chaos-7".into());
        let strategy = StatefulSetStrategy::from_value("POD_NAME", &pod, 0).map_err(text)?;
        serve(strategy, config, log, usr2, &args).await
    } else if store.starts_with("redis://") {
        let options = RedisOptions::new()
            .with_key(args.name.clone())
            // Leases are seconds long, and so is the clock bound: the amnesia hold-off after a
            // restart is the lease and twice the bound.
            .with_max_lease_duration(ms(args.lease_ms))
            .with_max_clock_offset(ms(args.max_clock_offset_ms))
            .with_response_timeout(ms(args.call_timeout_ms))
            .with_connection_timeout(ms(args.call_timeout_ms))
            .with_amnesia_guard(if args.without_amnesia_guard {
                lease_redis::AmnesiaGuard::Off
            } else {
                lease_redis::AmnesiaGuard::HoldOff
            });
        // The server may be down (a restart fault): keep trying until it answers or we are told
        // to stop.
        let strategy = loop {
            match RedisStrategy::connect(&store, options.clone()).await {
                Ok(s) => break s,
                Err(e) => eprintln!("chaos-node {}: connect: {e}", args.node),
            }
            if wait_or_term(ms(500)).await {
                return Ok(());
            }
        };
        serve(strategy, config, log, usr2, &args).await
    } else if store.starts_with("etcd://") {
        // The client connects on first use: a cluster that is down makes acquire retry.
        let options = EtcdOptions::from_url(&store)
            .map_err(text)?
            .with_prefix(etcd_prefix(&args.name))
            // The clock bound the run holds nodes to, as for Redis.
            .with_max_clock_offset(ms(args.max_clock_offset_ms))
            .with_connect_timeout(ms(args.call_timeout_ms))
            .with_request_timeout(ms(args.call_timeout_ms));
        let strategy = EtcdStrategy::new(options).map_err(text)?;
        serve(strategy, config, log, usr2, &args).await
    } else if store.starts_with("zk://") {
        // The session opens on first use: an ensemble that is down makes acquire retry. Leases
        // last three quarters of the session timeout the URL asks for (and the ensemble grants).
        let options = zookeeper_options(&store, &args.name)?
            .with_connect_timeout(ms(args.call_timeout_ms))
            .with_request_timeout(ms(args.call_timeout_ms));
        let strategy = ZooKeeperStrategy::new(options).map_err(text)?;
        serve(strategy, config, log, usr2, &args).await
    } else {
        let strategy = lease_sql::SqlStrategy::connect_lazy(&store)
            .and_then(|s| s.with_table(&args.name))
            .map_err(text)?;
        // Every node migrates (idempotent, concurrency-safe); the store may be cut off.
        loop {
            match tokio::time::timeout(ms(5000), strategy.migrate()).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) => eprintln!("chaos-node {}: migrate: {e}", args.node),
                Err(_) => eprintln!("chaos-node {}: migrate timed out", args.node),
            }
            if wait_or_term(ms(500)).await {
                return Ok(());
            }
        }
        serve(strategy, config, log, usr2, &args).await
    }
}

/// The node's two factories on the log's clock, counting from `--epoch-ms`: as the facade
/// builds them, splitting the series between them (see the module docs); and their recorder.
fn make_factories(
    log: &Arc<Log>,
    args: &RunArgs,
) -> Result<([Arc<NodeFactory>; 2], Arc<Recorder>), String> {
    let build = |k64, k96, k128| {
        Factory::new(
            log.clock.clone(),
            // As the facade builds them: the thread cache on.
            FactoryConfig::new()
                .with_epoch_ms(args.epoch_ms)
                .with_base_key(&CHAOS_KEY)
                .with_thread_cache(true)
                // Factory A issues plain and encrypted nonces of one size side by side; the
                // checker keeps every series (kind and size) apart and never compares a
                // ciphertext with a plaintext, so the rare chance equality of the two is no
                // duplicate it counts.
                .with_plain_and_encrypted(true)
                .with_kind64(k64)
                .with_kind96(k96)
                .with_kind128(k128),
        )
        .map(Arc::new)
        .map_err(text)
    };
    let factories = [
        build(Base::Counter, Base::Sortable, Base::Counter)?,
        build(Base::Sortable, Base::Counter, Base::Sortable)?,
    ];
    let recorder = Arc::new(Recorder {
        factories: factories.clone(),
        log: log.clone(),
        floors_in_clock_ms: args.floors_in_clock_ms,
    });
    Ok((factories, recorder))
}

/// Steps the clock back by `step_ms` on every SIGUSR1 (a fault), recording each step.
fn step_clock_on_sigusr1(log: &Arc<Log>, step_ms: u64) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut usr1 = signal(SignalKind::user_defined1()).map_err(|e| format!("SIGUSR1: {e}"))?;
    let log = log.clone();
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            let from_offset_ms = log.clock.offset_ms();
            let offset = log.clock.step_back(step_ms);
            let (at, _) = log.clock.now_with_offset();
            log.put(&Record::ClockStep {
                at: Stamp::new(at, offset),
                from_offset_ms,
            });
            log.flush();
            eprintln!(
                "chaos-node: clock stepped back {step_ms} ms (offset {from_offset_ms} -> {offset} ms)"
            );
        }
    });
    Ok(())
}

/// Sleeps `d`; true if SIGTERM/SIGINT came first.
async fn wait_or_term(d: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = terminated() => true,
    }
}

async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// What the generator generates with: the node's factories (new ones after a rebuild), and
/// whether it generates without pausing between batches (around a rebuild).
struct Slot {
    factories: Mutex<[Arc<NodeFactory>; 2]>,
    burst: AtomicBool,
}

/// How long the generator runs without pausing before a rebuild's drop and after the new
/// manager is up: the last nonces of the old factories and the first of the new ones are as
/// close in time as the rebuild allows.
const BURST: Duration = Duration::from_millis(5);

/// Resolves once SIGTERM or SIGINT came (a clone of the receiver: no borrow outlives it).
fn stopping(term: &tokio::sync::watch::Receiver<bool>) -> impl Future<Output = ()> + use<> {
    let mut term = term.clone();
    async move {
        let _ = term.wait_for(|stopped| *stopped).await;
    }
}

async fn serve<S: Strategy + 'static>(
    strategy: S,
    config: LeaseConfig,
    log: Arc<Log>,
    mut usr2: tokio::signal::unix::Signal,
    args: &RunArgs,
) -> Result<(), String> {
    // One strategy for every manager of the process, as an application that rebuilds its
    // manager keeps its store connection.
    let strategy = Arc::new(strategy);
    let (factories, recorder) = make_factories(&log, args)?;
    let (term_tx, term) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        terminated().await;
        let _ = term_tx.send(true);
    });
    let builder = LeaseManager::builder(Arc::clone(&strategy))
        .with_config(config.clone())
        .with_clock(log.clock.clone())
        .with_target(recorder);
    let manager = tokio::select! {
        started = builder.start() => started.map_err(text)?,
        () = stopping(&term) => {
            log.put(&Record::End { at: log.now() });
            log.flush();
            return Ok(());
        }
    };
    let guard = match args.guard_bind {
        Some(bind) => {
            let signal = manager.loss_signal();
            let conflict_log = log.clone();
            let guard = ConflictGuard::start(
                GuardConfig::new(bind).with_seeds(args.guard_seed.iter().copied()),
                Announce::new(manager.machine_id()),
                move |conflict| {
                    conflict_log.put(&Record::Conflict {
                        at: conflict_log.now(),
                    });
                    signal.lease_lost(conflict.to_string());
                },
            )
            .await
            .map_err(text)?;
            guard.follow(manager.watch_state());
            Some(guard)
        }
        None => None,
    };

    let slot = Arc::new(Slot {
        factories: Mutex::new(factories),
        burst: AtomicBool::new(false),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let (slot, stop, log) = (slot.clone(), stop.clone(), log.clone());
        let (per_tick, tick) = (args.per_tick, Duration::from_millis(args.tick_ms));
        std::thread::spawn(move || generate(&slot, &log, &stop, per_tick, tick))
    };
    let mut manager = Some(manager);
    loop {
        tokio::select! {
            () = stopping(&term) => break,
            Some(()) = usr2.recv() => {
                let Some(running) = manager.take() else { break };
                if guard.is_some() {
                    // The guard follows the first manager's state: no rebuild beside it.
                    eprintln!("chaos-node {}: SIGUSR2 ignored beside the conflict guard", args.node);
                    manager = Some(running);
                    continue;
                }
                manager = rebuild(running, &strategy, &config, &slot, &log, args, &term).await?;
                if manager.is_none() {
                    break;
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || generator.join()).await;
    if let Some(guard) = guard {
        guard.shutdown().await;
    }
    if let Some(manager) = manager {
        manager.shutdown().await;
    }
    log.put(&Record::End { at: log.now() });
    log.flush();
    Ok(())
}

/// Rebuilds the lease manager with new factories (SIGUSR2), as an application does after a
/// panic in its manager's task: the running manager is dropped, not shut down (its drop
/// disables the factories and stops its task without releasing the lease, and records in its
/// cache what they issued); new factories with the same options, and a new manager that resumes
/// the lease from that cache (`with_cache`). With `--without-issued-record` the new manager gets
/// a copy of the cached lease without that record. The generator runs without pausing from
/// [`BURST`] before the drop to [`BURST`] after the new manager is up, so the old factories'
/// last nonces and the new ones' first are as close as the renewal between them allows.
/// `None`: told to stop before the new manager held a lease.
async fn rebuild<S: Strategy + 'static>(
    running: LeaseManager<Arc<S>>,
    strategy: &Arc<S>,
    config: &LeaseConfig,
    slot: &Slot,
    log: &Arc<Log>,
    args: &RunArgs,
    term: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<LeaseManager<Arc<S>>>, String> {
    let (factories, recorder) = make_factories(log, args)?;
    slot.burst.store(true, Ordering::Relaxed);
    tokio::time::sleep(BURST).await;
    // The drop at the start of a millisecond, once the factories' clock (the ticker) reads it
    // too and they generated in it: the new manager's renewal then has the rest of that
    // millisecond to enable the new factories in it. Bounded: the ticker may run late.
    let ms = log.clock.exact_now_ms();
    let spin = Instant::now();
    while spin.elapsed() < Duration::from_millis(3)
        && (log.clock.exact_now_ms() == ms || log.clock.now_ms() <= ms)
    {
        std::hint::spin_loop();
    }
    std::thread::sleep(Duration::from_micros(50));
    let began = Instant::now();
    let cache = running.cache();
    drop(running);
    let cache = if args.without_issued_record {
        // A cache of its own: the old driver's task, stopped in the background, raises the
        // record in the old cache when it is dropped, never in this one.
        let copy = LeaseCache::new();
        if let Some(mut cached) = cache.get() {
            cached.issued_up_to_ms = 0;
            copy.store(cached);
        }
        copy
    } else {
        cache
    };
    let cached = cache
        .get()
        .map(|c| (c.machine_id.get(), c.floor_ms, c.issued_up_to_ms));
    *lock(&slot.factories) = factories;
    let builder = LeaseManager::builder(Arc::clone(strategy))
        .with_config(config.clone())
        .with_clock(log.clock.clone())
        .with_target(recorder)
        .with_cache(cache);
    let manager = tokio::select! {
        started = builder.start() => started.map_err(text)?,
        () = stopping(term) => {
            slot.burst.store(false, Ordering::Relaxed);
            return Ok(None);
        }
    };
    let took = began.elapsed();
    tokio::time::sleep(BURST).await;
    slot.burst.store(false, Ordering::Relaxed);
    eprintln!(
        "chaos-node {}: rebuilt (cached id, floor, issued: {cached:?}); id {:?} again {} us after the drop",
        args.node,
        manager.machine_id().map(MachineId::get),
        took.as_micros()
    );
    Ok(Some(manager))
}

/// Generates `per_tick` nonces of each kind and size every `tick`, at a bounded rate so files
/// stay small; flushes every 100 ms so `kill -9` loses at most that much.
fn generate(slot: &Slot, log: &Log, stop: &AtomicBool, per_tick: u32, tick: Duration) {
    let mut batch = Vec::with_capacity(per_tick as usize * 9 + 1);
    let mut last_flush = Instant::now();
    let mut warned = false;
    while !stop.load(Ordering::Relaxed) {
        // The factories of the running manager (new ones once a rebuild installed them).
        let [a, b] = lock(&slot.factories).clone();
        batch.clear();
        // Read before any nonce of the batch is asked for: the checker's bound on when they
        // were produced.
        batch.push(Record::Tick { at: log.now() });
        for _ in 0..per_tick {
            for kind in Kind::ALL {
                for bits in [64u16, 96, 128] {
                    let wide = |n: nononce::nonce::Nonce64| u128::from(n.to_u64());
                    let value = match (kind, bits) {
                        (Kind::Counter, 64) => a.counter64().map(wide),
                        (Kind::Counter, 96) => b.counter96().map(|n| n.to_u128()),
                        (Kind::Counter, _) => a.counter128().map(|n| n.to_u128()),
                        (Kind::Sortable, 64) => b.sortable64().map(wide),
                        (Kind::Sortable, 96) => a.sortable96().map(|n| n.to_u128()),
                        (Kind::Sortable, _) => b.sortable128().map(|n| n.to_u128()),
                        (Kind::Encrypted, 64) => a.encrypted64(Base::Counter).map(wide),
                        (Kind::Encrypted, 96) => a.encrypted96(Base::Counter).map(|n| n.to_u128()),
                        (Kind::Encrypted, _) => a.encrypted128(Base::Counter).map(|n| n.to_u128()),
                    };
                    match value {
                        Ok(value) => batch.push(Record::Nonce {
                            at: log.now(),
                            kind,
                            bits,
                            value,
                        }),
                        // The factories are set up so that this never happens; say so if it does.
                        Err(e @ nononce::nonce::Error::KindConflict { .. }) if !warned => {
                            warned = true;
                            eprintln!("chaos-node: {}{bits}: {e}", kind.name());
                        }
                        // Disabled / expired / would block: the lease layer said no.
                        Err(_) => {}
                    }
                }
            }
        }
        log.put_all(&batch);
        if last_flush.elapsed() >= Duration::from_millis(100) {
            log.flush();
            last_flush = Instant::now();
        }
        if !slot.burst.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
        }
    }
    log.flush();
}

/// An error as the node's messages quote it.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `work`, refused as `<what> timed out` after `secs` seconds.
async fn within<T>(
    secs: u64,
    what: &str,
    work: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(Duration::from_secs(secs), work)
        .await
        .map_err(|_| format!("{what} timed out"))?
}

/// The run's table, hash or prefix name, refused unless it is a plain lowercase identifier: it
/// is spliced into SQL.
fn plain_name(name: &str) -> Result<(), String> {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Ok(())
    } else {
        Err(format!("table name {name:?}: use [a-z0-9_]"))
    }
}

/// A direct connection to one database server kind.
enum Pool {
    Pg(sqlx::PgPool),
    My(sqlx::MySqlPool),
    Lite(sqlx::SqlitePool),
}

/// `$body` with `$p` the table's pool, whichever database it is.
macro_rules! with_pool {
    ($table:expr, $p:ident => $body:expr) => {
        match &$table.pool {
            Pool::Pg($p) => $body,
            Pool::My($p) => $body,
            Pool::Lite($p) => $body,
        }
    };
}

/// What differs between the databases' SQL.
struct Dialect {
    /// The name quoted.
    quote: char,
    /// The server's UTC clock, as the table's `expires_at`.
    now: &'static str,
    /// That clock plus the milliseconds of the next argument.
    later: &'static str,
    /// The row's token differs from the next argument (absent tokens too).
    other_token: &'static str,
    /// The ID as a 64-bit integer.
    id: &'static str,
    random: &'static str,
    /// The wide form of the wipe (SQLite has no TRUNCATE: an unqualified DELETE is its truncate).
    truncate: &'static str,
}

const POSTGRES: Dialect = Dialect {
    quote: '"',
    now: "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')",
    later: "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC') + ?::bigint * INTERVAL '1 millisecond'",
    other_token: "token IS DISTINCT FROM ?",
    id: "id::bigint",
    random: "random()",
    truncate: "TRUNCATE",
};

const MYSQL: Dialect = Dialect {
    quote: '`',
    now: "UTC_TIMESTAMP(6)",
    later: "TIMESTAMPADD(MICROSECOND, ? * 1000, UTC_TIMESTAMP(6))",
    other_token: "NOT (token <=> ?)",
    id: "CAST(id AS SIGNED)",
    random: "RAND()",
    truncate: "TRUNCATE TABLE",
};

const SQLITE: Dialect = Dialect {
    quote: '"',
    now: "strftime('%Y-%m-%d %H:%M:%f', 'now')",
    later: "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ? / 1000.0))",
    other_token: "token IS NOT ?",
    id: "id",
    random: "random()",
    truncate: "DELETE FROM",
};

/// The run's lease table on a SQL store, written to directly.
struct Table {
    pool: Pool,
    sql: &'static Dialect,
    /// Its name, quoted.
    name: String,
}

impl Table {
    async fn open(store: &str, name: &str) -> Result<Self, String> {
        plain_name(name)?;
        let (pool, sql) = if store.starts_with("postgres") {
            let pool = sqlx::PgPool::connect(store).await.map_err(text)?;
            (Pool::Pg(pool), &POSTGRES)
        } else if store.starts_with("mysql") || store.starts_with("mariadb") {
            let url = store.replacen("mariadb:", "mysql:", 1);
            let pool = sqlx::MySqlPool::connect(&url).await.map_err(text)?;
            (Pool::My(pool), &MYSQL)
        } else {
            // Waits for the nodes' writes rather than failing.
            use std::str::FromStr;
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(store)
                .map_err(text)?
                .busy_timeout(Duration::from_secs(5));
            let pool = sqlx::SqlitePool::connect_with(options)
                .await
                .map_err(text)?;
            (Pool::Lite(pool), &SQLITE)
        };
        let name = format!("{q}{name}{q}", q = sql.quote);
        Ok(Self { pool, sql, name })
    }

    /// `sql` as the database takes it: PostgreSQL numbers its `?` arguments.
    fn statement(&self, sql: &str) -> sqlx::AssertSqlSafe<String> {
        let mut out = String::new();
        for (i, part) in sql.split('?').enumerate() {
            if i > 0 {
                match self.pool {
                    Pool::Pg(_) => out.push_str(&format!("${i}")),
                    _ => out.push('?'),
                }
            }
            out.push_str(part);
        }
        sqlx::AssertSqlSafe(out)
    }

    /// Gives the rows whose ID is `id_is` (`=`, `>=`) `id` to `token` for `ttl_ms`.
    async fn set_token(
        &self,
        token: &[u8],
        ttl_ms: i64,
        id_is: &str,
        id: i64,
    ) -> Result<(), String> {
        let sql = self.statement(&format!(
            "UPDATE {} SET token = ?, expires_at = {}, lock_version = lock_version + 1 WHERE id {id_is} ?",
            self.name, self.sql.later
        ));
        with_pool!(self, p => sqlx::query(sql).bind(token).bind(ttl_ms).bind(id).execute(p).await.map(drop))
            .map_err(text)
    }

    /// Gives a held row (never a reserved one) to a foreign token for `ttl_ms`; its ID.
    async fn steal(&self, ttl_ms: i64) -> Result<Option<i64>, String> {
        let Dialect {
            now,
            other_token,
            id,
            random,
            ..
        } = self.sql;
        let sql = self.statement(&format!(
            "SELECT {id} FROM {} WHERE NOT (expires_at < {now}) AND {other_token} ORDER BY {random} LIMIT 1",
            self.name
        ));
        let reserved = &RESERVED_TOKEN[..];
        let id =
            with_pool!(self, p => sqlx::query_scalar(sql).bind(reserved).fetch_optional(p).await)
                .map_err(text)?;
        if let Some(id) = id {
            let token = rand::random::<u128>().to_le_bytes();
            self.set_token(&token, ttl_ms, "=", id).await?;
        }
        Ok(id)
    }

    /// Deletes every row (`truncate`: the wide form); what went, in words.
    async fn wipe(&self, truncate: bool) -> Result<String, String> {
        let count = self.statement(&format!("SELECT COUNT(*) FROM {}", self.name));
        let rows: i64 =
            with_pool!(self, p => sqlx::query_scalar(count).fetch_one(p).await).map_err(text)?;
        let how = if truncate {
            self.sql.truncate
        } else {
            "DELETE FROM"
        };
        let sql = self.statement(&format!("{how} {}", self.name));
        with_pool!(self, p => sqlx::query(sql).execute(p).await.map(drop)).map_err(text)?;
        let name = self.name.trim_matches(self.sql.quote);
        Ok(format!("{how} {name}: {rows} rows"))
    }
}

/// Drops the run's table from a shared database server (a SQLite file goes with the run).
async fn drop_table(args: StealArgs) -> Result<(), String> {
    within(10, "drop", async {
        let table = Table::open(&args.store, &args.name).await?;
        if !matches!(table.pool, Pool::Lite(_)) {
            let sql = table.statement(&format!("DROP TABLE IF EXISTS {}", table.name));
            with_pool!(table, p => sqlx::query(sql).execute(p).await.map(drop)).map_err(text)?;
        }
        Ok(())
    })
    .await
}

/// A connection to the Valkey/Redis server `store` names.
async fn redis_connection(store: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(store).map_err(text)?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(text)
}

/// Deletes the run's lease data while the server stays up, as an operator's `DEL`, `FLUSHALL`,
/// `TRUNCATE`, `DELETE FROM` or `etcdctl del --prefix` would, initialization markers included;
/// prints what went. Nothing is put back: the nodes' guards must find the loss.
async fn wipe(args: WipeArgs) -> Result<(), String> {
    plain_name(&args.name)?;
    let name = &args.name;
    let done = within(10, "wipe", async {
        if args.store.starts_with("redis://") {
            let mut con = redis_connection(&args.store).await?;
            let fields: i64 = redis::cmd("HLEN")
                .arg(name)
                .query_async(&mut con)
                .await
                .map_err(text)?;
            let (command, done) = if args.all {
                (
                    redis::cmd("FLUSHALL"),
                    format!("FLUSHALL: hash {name} had {fields} fields"),
                )
            } else {
                let mut del = redis::cmd("DEL");
                del.arg(name);
                (del, format!("DEL {name}: {fields} fields"))
            };
            let _: redis::Value = command.query_async(&mut con).await.map_err(text)?;
            return Ok(done);
        }
        if args.store.starts_with("etcd://") {
            let mut client = etcd_connect(&args.store).await?;
            let prefix = etcd_prefix(name);
            let deleted = client
                .delete(prefix.as_str(), Some(DeleteOptions::new().with_prefix()))
                .await
                .map_err(text)?
                .deleted();
            return Ok(format!("del --prefix {prefix}: {deleted} keys"));
        }
        if args.store.starts_with("zk://") {
            return wipe_zookeeper(&args.store, name).await;
        }
        Table::open(&args.store, name).await?.wipe(args.all).await
    })
    .await?;
    println!("{done}");
    Ok(())
}

/// Overwrites one held lease with a foreign token: its holder's next renewal fails.
async fn steal(args: StealArgs) -> Result<(), String> {
    let ttl = i64::try_from(args.ttl_ms).map_err(text)?;
    plain_name(&args.name)?;
    let id = within(10, "steal", async {
        if args.store.starts_with("redis://") {
            steal_redis(&args).await
        } else if args.store.starts_with("etcd://") {
            steal_etcd(&args).await
        } else if args.store.starts_with("zk://") {
            steal_zookeeper(&args).await
        } else {
            Table::open(&args.store, &args.name).await?.steal(ttl).await
        }
    })
    .await?;
    println!("{}", id.map_or_else(|| "none".into(), |id| id.to_string()));
    Ok(())
}

async fn steal_redis(args: &StealArgs) -> Result<Option<i64>, String> {
    let mut con = redis_connection(&args.store).await?;
    let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&args.name)
        .query_async(&mut con)
        .await
        .map_err(text)?;
    let ids: Vec<&String> = fields
        .iter()
        .filter(|(k, v)| lease_id("", k.as_bytes()).is_some() && v.as_str() != RESERVED_REDIS)
        .map(|(k, _)| k)
        .collect();
    if ids.is_empty() {
        return Ok(None);
    }
    let id = ids[rand::random_range(0..ids.len())].clone();
    let prefix = format!("token.{id}.");
    let markers: Vec<&String> = fields.keys().filter(|k| k.starts_with(&prefix)).collect();
    // Drop the holder's ownership marker (its renewals need it), then claim for a thief.
    if !markers.is_empty() {
        let () = redis::cmd("HDEL")
            .arg(&args.name)
            .arg(&markers)
            .query_async(&mut con)
            .await
            .map(|_: i64| ())
            .map_err(text)?;
    }
    let thief_marker = format!("token.{id}.chaos-thief");
    let _: i64 = redis::cmd("HSETEX")
        .arg(&args.name)
        .arg("PX")
        .arg(args.ttl_ms)
        .arg("FIELDS")
        .arg(2)
        .arg(&[id.as_str(), "chaos-thief", &thief_marker, &id][..])
        .query_async(&mut con)
        .await
        .map_err(text)?;
    id.parse().map(Some).map_err(text)
}

/// The etcd key prefix of a run: `/<name>/`.
fn etcd_prefix(name: &str) -> String {
    format!("/{name}/")
}

/// A client of the cluster `store` names (`etcd://...`), for direct writes.
async fn etcd_connect(store: &str) -> Result<EtcdClient, String> {
    let options = EtcdOptions::from_url(store).map_err(text)?;
    let connect = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(3));
    EtcdClient::connect(options.endpoints(), Some(connect))
        .await
        .map_err(|e| format!("etcd connect: {e}"))
}

/// A new etcd lease of `ttl_ms` (whole seconds, at least one).
async fn etcd_lease(client: &mut EtcdClient, ttl_ms: u64) -> Result<i64, String> {
    let seconds = i64::try_from(ttl_ms.div_ceil(1000).max(1)).map_err(text)?;
    Ok(client.lease_grant(seconds, None).await.map_err(text)?.id())
}

/// The ID of a lease key (etcd) or field (Valkey/Redis), `<prefix><id>` with `id` as the
/// backends write it (decimal, no leading zero, below 512); `None` for floors, markers and
/// anything else.
fn lease_id(prefix: &str, key: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    let id: u16 = text.parse().ok()?;
    // Written back as it was read: no sign, no leading zero.
    (id < MachineId::COUNT && id.to_string() == text).then_some(id)
}

/// Gives one held ID's key (never a reserved one) to a foreign etcd lease of `ttl_ms`, as
/// another holder taking it over would: the key keeps its create revision, its value is a new
/// token and it is attached to the thief's lease, so the holder's next renewal proof (its
/// lease and the create revision) fails with the key taken over. The key must be unchanged
/// since it was read (a few tries).
async fn steal_etcd(args: &StealArgs) -> Result<Option<i64>, String> {
    let mut client = etcd_connect(&args.store).await?;
    let prefix = etcd_prefix(&args.name);
    for _ in 0..3 {
        let answer = client
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(text)?;
        let held: Vec<(u16, i64)> = answer
            .kvs()
            .iter()
            .filter(|kv| kv.value() != RESERVED_ETCD.as_bytes())
            .filter_map(|kv| Some((lease_id(&prefix, kv.key())?, kv.mod_revision())))
            .collect();
        if held.is_empty() {
            return Ok(None);
        }
        let (id, revision) = held[rand::random_range(0..held.len())];
        let lease = etcd_lease(&mut client, args.ttl_ms).await?;
        let key = format!("{prefix}{id}");
        let token = format!("{:032x}", rand::random::<u128>());
        let unchanged = Compare::mod_revision(key.clone(), CompareOp::Equal, revision);
        let put = TxnOp::put(key, token, Some(PutOptions::new().with_lease(lease)));
        let txn = Txn::new().when(vec![unchanged]).and_then(vec![put]);
        if client.txn(txn).await.map_err(text)?.succeeded() {
            return Ok(Some(i64::from(id)));
        }
        // The key changed since the read: nothing of the thief's uses this lease.
        let _ = client.lease_revoke(lease).await;
    }
    Ok(None)
}

/// Gives IDs `keep..512` to a foreign holder on etcd: their lease keys, in lease-etcd's layout
/// (`<prefix><id>`, a 32-hex-digit token), attached to one etcd lease of `ttl_ms`. Floors are
/// left absent (0), as for a never-used ID.
async fn reserve_etcd(args: &ReserveArgs) -> Result<(), String> {
    let prefix = etcd_prefix(&args.name);
    if args.initialize {
        let options = EtcdOptions::from_url(&args.store)
            .map_err(text)?
            .with_prefix(prefix.clone());
        let strategy = EtcdStrategy::new(options).map_err(text)?;
        strategy.migrate().await.map_err(text)?;
    }
    let mut client = etcd_connect(&args.store).await?;
    let lease = etcd_lease(&mut client, args.ttl_ms).await?;
    let ids: Vec<u16> = (args.keep.min(MachineId::COUNT)..MachineId::COUNT).collect();
    for chunk in ids.chunks(ETCD_TXN_OPS) {
        let puts: Vec<TxnOp> = chunk
            .iter()
            .map(|id| {
                let lease = Some(PutOptions::new().with_lease(lease));
                TxnOp::put(format!("{prefix}{id}"), RESERVED_ETCD, lease)
            })
            .collect();
        client.txn(Txn::new().and_then(puts)).await.map_err(text)?;
    }
    Ok(())
}

/// The ZooKeeper root znode of a run: `/<name>`.
fn zookeeper_root(name: &str) -> String {
    format!("/{name}")
}

/// lease-zookeeper's options for the ensemble `store` names (`zk://...`), on the run's root.
fn zookeeper_options(store: &str, name: &str) -> Result<ZooKeeperOptions, String> {
    Ok(ZooKeeperOptions::from_url(store)
        .map_err(text)?
        .with_root(zookeeper_root(name)))
}

/// A session of its own on the ensemble `store` names, for direct writes, asking for a session
/// timeout of `timeout`. `detached`: dropping the client leaves the session open, so that its
/// ephemeral znodes live until the ensemble ends it, `timeout` after its last word.
async fn zookeeper_connect(
    store: &str,
    timeout: Duration,
    detached: bool,
) -> Result<zk::Client, String> {
    let options = ZooKeeperOptions::from_url(store).map_err(text)?;
    let mut connector = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(Duration::from_secs(3));
    if detached {
        connector = connector.with_detached();
    }
    connector
        .connect(options.hosts())
        .await
        .map_err(|e| format!("zookeeper connect to {}: {e}", options.hosts()))
}

/// Deletes `paths` (childless znodes), ignoring those already gone and folders that gained a
/// child since they were listed (the caller lists again): in multi-ops of
/// [`ZOOKEEPER_MULTI_OPS`], one by one where a multi-op was refused (a znode went meanwhile,
/// with its session or its holder's release, or a node wrote a floor). How many this call
/// deleted.
async fn zookeeper_delete_all(client: &zk::Client, paths: &[String]) -> Result<usize, String> {
    let mut deleted = 0;
    for chunk in paths.chunks(ZOOKEEPER_MULTI_OPS) {
        let mut writer = client.new_multi_writer();
        for path in chunk {
            writer.add_delete(path, None).map_err(text)?;
        }
        if writer.commit().await.is_ok() {
            deleted += chunk.len();
            continue;
        }
        for path in chunk {
            match client.delete(path, None).await {
                Ok(()) => deleted += 1,
                Err(zk::Error::NoNode | zk::Error::NotEmpty) => {}
                Err(e) => return Err(format!("delete {path}: {e}")),
            }
        }
    }
    Ok(deleted)
}

/// `deleteall <root>` while the ensemble stays up, as an operator's would: the initialization
/// marker first, then every lease (the nodes' ephemeral znodes included), guard and floor
/// znode, the folders, a hold-off znode, and the root. Nodes keep writing meanwhile (a claim
/// creates a lease znode, a node that found the marker gone creates it again with a hold-off):
/// a root that gained children since they were listed is listed and deleted again, a few
/// times. What went, in words.
async fn wipe_zookeeper(store: &str, name: &str) -> Result<String, String> {
    let client = zookeeper_connect(store, Duration::from_secs(5), false).await?;
    let root = zookeeper_root(name);
    let mut deleted = 0;
    for _ in 0..5 {
        let children = match client.list_children(&root).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => break,
            Err(e) => return Err(format!("list {root}: {e}")),
        };
        // The marker first: from then on no node claims, whatever else is still there.
        let marker = format!("{root}/initialized");
        let mut paths = Vec::new();
        let mut folders = Vec::new();
        for child in children {
            let folder = format!("{root}/{child}");
            if folder == marker {
                paths.insert(0, folder);
                continue;
            }
            match client.list_children(&folder).await {
                Ok(grandchildren) => {
                    paths.extend(grandchildren.iter().map(|g| format!("{folder}/{g}")));
                }
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(format!("list {folder}: {e}")),
            }
            folders.push(folder);
        }
        paths.extend(folders);
        deleted += zookeeper_delete_all(&client, &paths).await?;
        match client.delete(&root, None).await {
            Ok(()) => {
                deleted += 1;
                return Ok(format!("deleteall {root}: {deleted} znodes"));
            }
            Err(zk::Error::NoNode) => break,
            // Created under it since the listing: list again.
            Err(zk::Error::NotEmpty) => {}
            Err(e) => return Err(format!("delete {root}: {e}")),
        }
    }
    Ok(format!(
        "deleteall {root}: {deleted} znodes; nodes wrote under the root again meanwhile"
    ))
}

/// Gives one held ID (never a reserved one) to a foreign holder, as another holder taking it
/// over would: in one multi-op, the holder's ephemeral lease znode (at the version read) is
/// deleted, a new one with a new token is created on the thief's session, and the floor znode
/// is written again at the same value (every claim writes it), so that the holder's next
/// renewal, which expects the floor at the version it last wrote, finds the ID taken over. The
/// thief's session is left open to end `ttl_ms` (at least a second) later, its znode with it.
async fn steal_zookeeper(args: &StealArgs) -> Result<Option<i64>, String> {
    let ttl = Duration::from_millis(args.ttl_ms.max(1000));
    let client = zookeeper_connect(&args.store, ttl, true).await?;
    let root = zookeeper_root(&args.name);
    let leases = format!("{root}/leases");
    for _ in 0..3 {
        let children = match client.list_children(&leases).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(format!("list {leases}: {e}")),
        };
        let ids: Vec<u16> = children
            .iter()
            .filter_map(|c| lease_id("", c.as_bytes()))
            .collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let mut reader = client.new_multi_reader();
        for id in &ids {
            reader
                .add_get_data(&format!("{leases}/{id}"))
                .map_err(text)?;
        }
        let results = reader.commit().await.map_err(text)?;
        // Held by a node: ephemeral (the reservation's znodes are persistent), not reserved.
        let held: Vec<(u16, i32)> = ids
            .iter()
            .zip(&results)
            .filter_map(|(id, result)| match result {
                MultiReadResult::Data { data, stat }
                    if stat.ephemeral_owner != 0 && data != RESERVED_ZOOKEEPER.as_bytes() =>
                {
                    Some((*id, stat.version))
                }
                _ => None,
            })
            .collect();
        if held.is_empty() {
            return Ok(None);
        }
        let (id, version) = held[rand::random_range(0..held.len())];
        let lease = format!("{leases}/{id}");
        let floor = format!("{root}/floors/{id}");
        let floor_now = match client.get_data(&floor).await {
            Ok((data, stat)) => Some((data, stat.version)),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(format!("get {floor}: {e}")),
        };
        let token = format!("{:032x}", rand::random::<u128>());
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let mut writer = client.new_multi_writer();
        writer.add_delete(&lease, Some(version)).map_err(text)?;
        writer
            .add_create(&lease, token.as_bytes(), &ephemeral)
            .map_err(text)?;
        if let Some((data, floor_version)) = &floor_now {
            writer
                .add_set_data(&floor, data, Some(*floor_version))
                .map_err(text)?;
        }
        if let Ok(results) = writer.commit().await
            && results
                .iter()
                .any(|r| matches!(r, MultiWriteResult::Create { .. }))
        {
            return Ok(Some(i64::from(id)));
        }
        // Released, renewed or taken since the read: read again.
    }
    Ok(None)
}

/// Gives IDs `keep..512` to a foreign holder on ZooKeeper: persistent lease znodes
/// `<root>/leases/<id>` holding a token in lease-zookeeper's form, which the nodes see held
/// as long as they exist (`ttl_ms` does not apply: a persistent znode has no session to end
/// with, and a run is over long before the hour the other stores' reservations last). Floors
/// are left absent (0), as for a never-used ID. Without `--initialize` (after a wipe) only the
/// root and its leases folder are created, never the initialization marker.
async fn reserve_zookeeper(args: &ReserveArgs) -> Result<(), String> {
    if args.initialize {
        let options = zookeeper_options(&args.store, &args.name)?;
        let strategy = ZooKeeperStrategy::new(options).map_err(text)?;
        strategy.migrate().await.map_err(text)?;
    }
    let client = zookeeper_connect(&args.store, Duration::from_secs(5), false).await?;
    let leases = format!("{}/leases", zookeeper_root(&args.name));
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client
        .mkdir(&leases, &persistent)
        .await
        .map_err(|e| format!("mkdir {leases}: {e}"))?;
    let ids: Vec<u16> = (args.keep.min(MachineId::COUNT)..MachineId::COUNT).collect();
    for chunk in ids.chunks(ZOOKEEPER_MULTI_OPS) {
        let mut writer = client.new_multi_writer();
        for id in chunk {
            writer
                .add_create(
                    &format!("{leases}/{id}"),
                    RESERVED_ZOOKEEPER.as_bytes(),
                    &persistent,
                )
                .map_err(text)?;
        }
        if writer.commit().await.is_ok() {
            continue;
        }
        // Some exist already (held by a node, or reserved before): one by one.
        for id in chunk {
            let path = format!("{leases}/{id}");
            match client
                .create(&path, RESERVED_ZOOKEEPER.as_bytes(), &persistent)
                .await
            {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(format!("create {path}: {e}")),
            }
        }
    }
    Ok(())
}

/// Gives IDs `keep..512` to a foreign holder on Valkey/Redis: their fields and ownership
/// markers, expiring after `ttl_ms`.
async fn reserve_redis(args: &ReserveArgs) -> Result<(), String> {
    if args.initialize {
        let options = RedisOptions::new().with_key(args.name.clone());
        let strategy = RedisStrategy::connect(&args.store, options)
            .await
            .map_err(text)?;
        strategy.migrate().await.map_err(text)?;
    }
    let mut con = redis_connection(&args.store).await?;
    let mut cmd = redis::cmd("HSETEX");
    cmd.arg(&args.name).arg("PX").arg(args.ttl_ms).arg("FIELDS");
    cmd.arg(2 * u32::from(MachineId::COUNT - args.keep.min(MachineId::COUNT)));
    for id in args.keep..MachineId::COUNT {
        let id = id.to_string();
        cmd.arg(&id)
            .arg(RESERVED_REDIS)
            .arg(format!("token.{id}.{RESERVED_REDIS}"))
            .arg(&id);
    }
    if args.keep < MachineId::COUNT {
        let _: i64 = cmd.query_async(&mut con).await.map_err(text)?;
    }
    Ok(())
}

/// Gives every ID from `keep` to 511 to a foreign holder for `ttl_ms` (migrating the table
/// first), so the nodes hand the remaining few IDs to each other: every handover then crosses
/// clocks, and the floor is what keeps their timestamps apart.
async fn reserve(args: ReserveArgs) -> Result<(), String> {
    plain_name(&args.name)?;
    let ttl = i64::try_from(args.ttl_ms).map_err(text)?;
    within(20, "reserve", async {
        if args.store.starts_with("redis://") {
            return reserve_redis(&args).await;
        }
        if args.store.starts_with("etcd://") {
            return reserve_etcd(&args).await;
        }
        if args.store.starts_with("zk://") {
            return reserve_zookeeper(&args).await;
        }
        let url = match &args.sql_options {
            Some(options) => format!("{}?{options}", args.store),
            None => args.store.clone(),
        };
        let strategy = lease_sql::SqlStrategy::connect_lazy(&url)
            .and_then(|s| s.with_table(&args.name))
            .map_err(text)?;
        // Not an initialization: on a table that was seeded, rows deleted since come back
        // blocked for the amnesia hold-off (free with the nodes' guard off).
        strategy.migrate().await.map_err(text)?;
        let table = Table::open(&args.store, &args.name).await?;
        table
            .set_token(&RESERVED_TOKEN, ttl, ">=", i64::from(args.keep))
            .await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lowercase_names_are_spliced_into_sql() {
        assert!(plain_name("chaos_sqlite_1_17").is_ok());
        for bad in ["", "Chaos", "a-b", "a\"; DROP TABLE x; --", "t\u{e9}"] {
            assert!(plain_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn etcd_keys_follow_lease_etcds_layout() {
        let p = etcd_prefix("chaos_etcd_1_2");
        assert_eq!(p, "/chaos_etcd_1_2/");
        assert_eq!(lease_id(&p, b"/chaos_etcd_1_2/0"), Some(0));
        assert_eq!(lease_id(&p, b"/chaos_etcd_1_2/511"), Some(511));
        for other in [
            &b"/chaos_etcd_1_2/512"[..],
            b"/chaos_etcd_1_2/07",
            b"/chaos_etcd_1_2/+7",
            b"/chaos_etcd_1_2/floor/7",
            b"/chaos_etcd_1_2/",
            b"/other/7",
        ] {
            assert_eq!(lease_id(&p, other), None);
        }
        // Valkey/Redis fields: the ID's own, never its floor or ownership marker.
        assert_eq!(lease_id("", b"7"), Some(7));
        assert_eq!(
            lease_id("", b"floor.7").or(lease_id("", b"token.7.x")),
            None
        );
        // ZooKeeper: the root of a run is a znode of its own, the reservation's token one in
        // lease-zookeeper's form.
        assert_eq!(
            zookeeper_root("chaos_zookeeper_1_2"),
            "/chaos_zookeeper_1_2"
        );
        let options = zookeeper_options("zk://127.0.0.1:1,127.0.0.1:2", "chaos_zookeeper_1_2");
        assert_eq!(
            options.map(|o| o.root().to_owned()).as_deref(),
            Ok("/chaos_zookeeper_1_2")
        );
        assert_eq!(RESERVED_ZOOKEEPER.len(), 32);
        // The reserved token is a token in lease-etcd's form: 32 hex digits.
        let hex: String = RESERVED_TOKEN.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(RESERVED_ETCD, hex);
    }
}
