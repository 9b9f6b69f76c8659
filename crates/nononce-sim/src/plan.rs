//! What a run looks like: the configuration a caller gives, and the plan a seed draws from it
//! (backend, timing, fleet, clocks, network and faults).

use core::fmt;
use std::time::Duration;

use lease_core::MachineId;
use lease_manager::LeaseConfig;

use crate::model::Guards;
use crate::rng::Rng;

/// Which coordinator the fleet uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// The SQL lease table model (PostgreSQL semantics).
    Sql,
    /// The Redis hash model (Valkey 9 / Redis 8 semantics).
    Redis,
    /// The etcd cluster model (etcd v3 semantics).
    Etcd,
    /// Fixed IDs (StatefulSet ordinals, host lists): no coordinator, no floor.
    Static,
    /// The ZooKeeper ensemble model (ZooKeeper 3.6+ semantics). Never drawn from a seed (that
    /// would change the plans of the seeds the documentation and the tests name): runs name it
    /// (`--backend zookeeper`), and the sweep adds seeds of its own (`--zookeeper-seeds`).
    ZooKeeper,
}

impl Backend {
    /// Lowercase name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Sql => "sql",
            Self::Redis => "redis",
            Self::Etcd => "etcd",
            Self::Static => "static",
            Self::ZooKeeper => "zookeeper",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How far apart the fleet's clocks may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Clocks {
    /// Within the safety margin of each other (a quarter margin either way, little drift, no
    /// steps), and coordinator clock jumps below a quarter margin: the condition handover
    /// rests on when a store has lost its floors.
    Tight,
    /// Offsets up to an hour either way, drift up to 100 ppm and storms of up to 2 %, wall
    /// clock steps of up to an hour, suspends the clock does not count, coordinator clock
    /// jumps up to a lease.
    Wide,
}

impl Clocks {
    /// Lowercase name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tight => "tight",
            Self::Wide => "wide",
        }
    }
}

/// [`Fault`]: each class with its documentation and its kebab-case name, in the order of
/// [`Fault::ALL`].
macro_rules! faults {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A class of injected fault, as counted in the report.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Fault {
            $($(#[$doc])* $variant,)*
        }

        impl Fault {
            /// Every class.
            pub const ALL: [Self; [$(Fault::$variant),*].len()] = [$(Self::$variant),*];

            /// Kebab-case name.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }
        }
    };
}

faults! {
    /// The link between a node and the coordinator is cut (messages dropped, or held and
    /// delivered at the heal as TCP would).
    Partition => "partition",
    /// The process dies (no release); restarted later as a new process without a cache.
    Crash => "crash",
    /// The process is stopped (SIGSTOP), often past its lease, then resumed.
    Freeze => "freeze",
    /// The machine sleeps; its boot clock counts the sleep.
    Suspend => "suspend",
    /// The machine sleeps and the process clock does not count it (it stands still).
    SuspendUncounted => "suspend-uncounted",
    /// The lease manager restarts in the same process and renews its cached lease.
    ManagerRestartCached => "manager-restart-cached",
    /// The lease manager restarts in the same process with the cache cleared.
    ManagerRestartUncached => "manager-restart-uncached",
    /// Graceful shutdown (factories off, release) and a new process.
    Rolling => "rolling-restart",
    /// Every node in turn shuts down gracefully and its replacement starts shortly after, as
    /// in a rolling deployment: released IDs are taken over by other nodes at once.
    RollingDeploy => "rolling-deploy",
    /// An outside signal says the lease is lost (a conflict guard).
    ExternalLoss => "external-loss",
    /// The node's wall clock steps forward (a process started afterwards sees it).
    WallStepForward => "wall-step-forward",
    /// The node's wall clock steps back.
    WallStepBackward => "wall-step-backward",
    /// The node's clock rate is off by up to 2 % for a while.
    DriftStorm => "drift-storm",
    /// The coordinator restarts without losing data (Redis: AOF `always`, new run ID; etcd: a
    /// new leader, which restarts every lease's TTL; ZooKeeper: a new leader, a new epoch,
    /// every session's timer started again).
    CoordinatorRestart => "coordinator-restart",
    /// Redis restarts without persistence: every lease and floor is forgotten.
    RedisAmnesia => "redis-amnesia",
    /// Redis restarts from its last RDB snapshot.
    RedisSnapshot => "redis-snapshot-restart",
    /// SQL fails over to a lagging asynchronous replica (new timeline).
    SqlFailover => "sql-failover-lagging",
    /// The coordinator's clock jumps forward (etcd's leases run on its monotonic clock, which
    /// does not jump).
    CoordinatorClockForward => "coordinator-clock-forward",
    /// The coordinator's clock jumps back.
    CoordinatorClockBackward => "coordinator-clock-backward",
    /// An operator force-releases a held ID.
    ForceRelease => "force-release",
    /// Redis fails over to a long-running replica that missed writes (a node that never saw
    /// the old run ID is not held off: documented).
    RedisFailover => "redis-failover",
    /// SQL loses its last commits without changing identity (`synchronous_commit = off`
    /// crash: documented as undetected).
    SqlLostCommits => "sql-lost-commits",
    /// The etcd leader is cut off and another is elected: a second or two without a leader,
    /// every lease's TTL restarted by the new one, and the old leader still answering
    /// keep-alives in its term for a moment.
    EtcdLeaderChange => "etcd-leader-change",
    /// An operator restores etcd from its last backup, or restarts it on an empty data
    /// directory, possibly under a new cluster ID, and keeps new processes from starting for the
    /// longest lease, as lease-etcd's documentation asks (a process that never saw the old store
    /// cannot tell: documented).
    EtcdRestore => "etcd-restore",
    /// The store loses its lease data while the server stays up (Redis: the lease hash deleted,
    /// `DEL` or `FLUSHALL`, its marker with it, run ID and uptime unchanged; SQL: the lease
    /// table truncated, or the rows of held IDs deleted, sometimes the table's coordinator row
    /// too; etcd: `del --prefix` of the lease prefix, its marker and hold-off keys included;
    /// ZooKeeper: the lease, guard and floor znodes, the marker and the hold-off deleted).
    StoreWiped => "store-wiped",
    /// A node is redeployed with another epoch (up to a lease earlier or later than the
    /// default): its next holder of an ID counts timestamps from elsewhere.
    EpochChange => "epoch-change",
    /// An operator adds a host to the static node list (or removes one added earlier) and rolls
    /// the new list out: every node restarts in turn and takes its ID from the new list, while
    /// the nodes not yet restarted run on the old one.
    HostListEdit => "host-list-edit",
    /// Every ZooKeeper server restarts on an empty data directory: every znode and session
    /// forgotten, the zxids counting from a new ensemble's.
    ZooKeeperDataLost => "zookeeper-data-lost",
}

impl Fault {
    /// Whether the fault makes the store forget leases and floors.
    #[must_use]
    pub const fn is_amnesia(self) -> bool {
        matches!(
            self,
            Self::RedisAmnesia
                | Self::RedisSnapshot
                | Self::SqlFailover
                | Self::RedisFailover
                | Self::SqlLostCommits
                | Self::EtcdRestore
                | Self::StoreWiped
                | Self::ZooKeeperDataLost
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Faults outside the conditions the documentation states; off by default. Each makes the
/// simulation look where the guarantee is documented (or found) not to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(clippy::struct_excessive_bools)]
pub struct Gaps {
    /// Redis failovers to a long-running replica.
    pub redis_failover: bool,
    /// SQL crashes that lose recent commits on the same server.
    pub sql_lost_commits: bool,
    /// Static strategies with wall clock steps back of up to the margin plus the release
    /// guard before a restart.
    pub static_clock_behind: bool,
    /// etcd restores (from the last backup, or onto an empty data directory), new processes kept
    /// from starting for the longest lease afterwards: the revision check misses a process that
    /// did not see the revisions the restore lost.
    pub etcd_restore: bool,
}

/// What a run simulates. [`Config::default`]: every guard on, the backend, clocks and fleet
/// size drawn from the seed, no documented gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The backend, or `None` to draw it from the seed.
    pub backend: Option<Backend>,
    /// The fleet size, or `None` for 16 to 64 drawn from the seed.
    pub nodes: Option<usize>,
    /// The clock regime, or `None` to draw it from the seed.
    pub clocks: Option<Clocks>,
    /// Which guards are on.
    pub guards: Guards,
    /// Which documented gaps to probe.
    pub gaps: Gaps,
    /// Fault classes never injected.
    pub without: Vec<Fault>,
    /// Whether nodes are redeployed on other epochs ([`Fault::EpochChange`]). Off by default,
    /// so that the seeds the documentation and the tests name keep their plans; the suite's
    /// run at 5,000 seeds turns it on (`--epoch-changes`).
    pub epoch_changes: bool,
    /// Whether static node lists are edited during runs ([`Fault::HostListEdit`]). Off by
    /// default for the same reason as [`epoch_changes`](Self::epoch_changes); the suite's run
    /// at 5,000 seeds turns it on (`--host-list-edits`).
    pub host_list_edits: bool,
    /// How many events the failure trace shows.
    pub trace_len: usize,
    /// Stop a seed at its first violation (the trace then ends there).
    pub stop_at_first: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            backend: None,
            nodes: None,
            clocks: None,
            guards: Guards::ALL,
            gaps: Gaps::default(),
            without: Vec::new(),
            epoch_changes: false,
            host_list_edits: false,
            trace_len: 40,
            stop_at_first: true,
        }
    }
}

/// Lease timing of one run: real defaults, or shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// Name for reports.
    pub name: &'static str,
    /// Lease duration, also the store's longest lease (ms); the amnesia hold-off adds twice
    /// the clock offset.
    pub lease: u64,
    /// Renew interval (ms).
    pub renew: u64,
    /// Safety margin and release guard (ms).
    pub margin: u64,
    /// Minimum TTL (ms).
    pub min_ttl: u64,
    /// Strategy call timeout (ms).
    pub call_timeout: u64,
    /// Startup acquire timeout (ms).
    pub acquire_timeout: u64,
    /// Acquire backoff base (ms).
    pub acquire_backoff: u64,
    /// Renew backoff base (ms).
    pub renew_backoff: u64,
    /// Generation ticks fall on multiples of this (node clock ms).
    pub grid: u64,
    /// A run lasts between these many leases.
    pub leases: (u64, u64),
    /// A process restarts this long after it exited (ms range).
    pub restart: (u64, u64),
}

impl Profile {
    /// `LeaseConfig`'s defaults: 8 h lease, 30 min renewals, 10 s margin.
    pub const PRODUCTION: Self = Self {
        name: "8h",
        lease: 8 * 3_600_000,
        renew: 30 * 60_000,
        margin: 10_000,
        min_ttl: 30_000,
        call_timeout: 30_000,
        acquire_timeout: 60_000,
        acquire_backoff: 100,
        renew_backoff: 1_000,
        grid: 100,
        leases: (3, 5),
        restart: (500, 30_000),
    };
    /// Five-minute leases renewed every minute, 3 s margin.
    pub const MINUTES: Self = Self {
        name: "5min",
        lease: 300_000,
        renew: 60_000,
        margin: 3_000,
        min_ttl: 20_000,
        call_timeout: 5_000,
        acquire_timeout: 30_000,
        acquire_backoff: 100,
        renew_backoff: 500,
        grid: 50,
        leases: (6, 12),
        restart: (300, 10_000),
    };
    /// The chaos harness's timing: 5 s leases renewed every second, 0.75 s margin.
    pub const SECONDS: Self = Self {
        name: "5s",
        lease: 5_000,
        renew: 1_000,
        margin: 750,
        min_ttl: 2_000,
        call_timeout: 1_500,
        acquire_timeout: 15_000,
        acquire_backoff: 50,
        renew_backoff: 200,
        grid: 10,
        leases: (10, 30),
        restart: (100, 2_000),
    };

    /// The lease configuration of this profile.
    #[must_use]
    pub fn lease_config(&self) -> LeaseConfig {
        let d = Duration::from_millis;
        LeaseConfig::default()
            .with_lease_duration(d(self.lease))
            .with_renew_interval(d(self.renew))
            .with_min_ttl(d(self.min_ttl))
            .with_margin(d(self.margin))
            .with_release_guard(d(self.margin))
            .with_call_timeout(d(self.call_timeout))
            .with_acquire_timeout(Some(d(self.acquire_timeout)))
            .with_acquire_backoff_base(d(self.acquire_backoff))
            .with_renew_backoff_base(d(self.renew_backoff))
    }
}

/// The network's behaviour in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// Per-million chance a message is lost.
    pub drop_ppm: u64,
    /// Per-million chance a message is delivered twice.
    pub duplicate_ppm: u64,
    /// Per-million chance a message is delayed 50 ms to 2 s.
    pub spike_ppm: u64,
    /// Per-million chance a message is delayed 2 to 60 s.
    pub long_ppm: u64,
}

impl Network {
    /// A delay in ms.
    pub fn delay(&self, rng: &mut Rng) -> u64 {
        let roll = rng.below(1_000_000);
        if roll < self.long_ppm {
            rng.between(2_000, 60_000)
        } else if roll < self.long_ppm + self.spike_ppm {
            rng.between(50, 2_000)
        } else {
            rng.between(0, 5)
        }
    }
}

/// The longest ZooKeeper run (ms). Its leases last at most three quarters of the longest
/// session the ensemble grants (30 s of 40 s), whatever the profile asks, so each node renews
/// every few seconds: a run as long as the 8 h profile's (one to two days) would cost twenty
/// times another backend's seed and add nothing an hour of 30 s leases does not show.
pub const ZOOKEEPER_MAX_RUN_MS: u64 = 3_600_000;

/// Everything a seed decided before the run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The seed.
    pub seed: u64,
    /// The backend.
    pub backend: Backend,
    /// The timing.
    pub profile: Profile,
    /// The fleet size.
    pub nodes: usize,
    /// Machine IDs the store offers (fewer than 512 makes them scarce: more handovers).
    pub capacity: u16,
    /// The clock regime.
    pub clocks: Clocks,
    /// Simulated duration (ms).
    pub duration: u64,
    /// The network.
    pub network: Network,
    /// Faults, by true time.
    pub faults: Vec<(u64, Fault)>,
    /// All nodes start within 100 ms of each other.
    pub herd: bool,
    /// Which guards are on.
    pub guards: Guards,
    /// Which documented gaps are probed.
    pub gaps: Gaps,
    /// Stop at the first violation.
    pub stop_at_first: bool,
    /// Trace length.
    pub trace_len: usize,
}

impl Plan {
    /// Draws the plan of `seed` under `config`. The first draws of a seed decide the plan; the
    /// run itself draws from the same generator afterwards.
    pub fn new(seed: u64, config: &Config, rng: &mut Rng) -> Self {
        let backend = config.backend.unwrap_or_else(|| match rng.below(100) {
            0..29 => Backend::Sql,
            29..58 => Backend::Etcd,
            58..87 => Backend::Redis,
            _ => Backend::Static,
        });
        let profile = match rng.below(10) {
            0..3 => Profile::PRODUCTION,
            3..7 => Profile::MINUTES,
            _ => Profile::SECONDS,
        };
        let nodes = config
            .nodes
            .unwrap_or_else(|| usize::try_from(rng.between(16, 64)).unwrap_or(16))
            .clamp(1, usize::from(MachineId::COUNT));
        let clocks = config.clocks.unwrap_or_else(|| {
            if rng.chance(400_000) {
                Clocks::Tight
            } else {
                Clocks::Wide
            }
        });
        let n = u16::try_from(nodes).unwrap_or(MachineId::COUNT);
        let capacity = if backend == Backend::Static || rng.chance(450_000) {
            MachineId::COUNT
        } else {
            // Scarce IDs: handovers, floors ahead and exhaustion.
            u16::try_from(rng.between(u64::from(n), u64::from(n) + 8))
                .unwrap_or(MachineId::COUNT)
                .min(MachineId::COUNT)
        };
        let mut duration = profile.lease * rng.between(profile.leases.0, profile.leases.1);
        if backend == Backend::ZooKeeper {
            duration = duration.min(ZOOKEEPER_MAX_RUN_MS);
        }
        let network = Network {
            drop_ppm: [0, 1_000, 10_000, 50_000][rng.index(4)],
            duplicate_ppm: [0, 5_000, 20_000][rng.index(3)],
            spike_ppm: [10_000, 50_000][rng.index(2)],
            long_ppm: [0, 1_000, 5_000][rng.index(3)],
        };
        let classes = Self::classes(backend, clocks, config);
        let mut faults = Vec::new();
        if !classes.is_empty() {
            let count = rng.between(6, 30);
            // Within a run of at least three leases, a quarter lease from either end.
            let edge = (profile.lease / 4).min(duration / 8);
            let (from, to) = (edge, duration - edge);
            for _ in 0..count {
                let at = rng.between(from, to);
                faults.push((at, classes[rng.index(classes.len())]));
            }
            // Amnesia is what the amnesia guard is for: make it likely where it is allowed.
            let amnesia: Vec<Fault> = classes.iter().copied().filter(|f| f.is_amnesia()).collect();
            if !amnesia.is_empty() && rng.chance(700_000) {
                for _ in 0..rng.between(1, 3) {
                    let at = rng.between(from, to);
                    faults.push((at, amnesia[rng.index(amnesia.len())]));
                }
            }
            faults.sort_unstable();
        }
        Self {
            seed,
            backend,
            profile,
            nodes,
            capacity,
            clocks,
            duration,
            network,
            faults,
            herd: rng.chance(500_000),
            guards: config.guards,
            gaps: config.gaps,
            stop_at_first: config.stop_at_first,
            trace_len: config.trace_len,
        }
    }

    /// The fault classes a run of `backend` with `clocks` may see.
    fn classes(backend: Backend, clocks: Clocks, config: &Config) -> Vec<Fault> {
        let wide = clocks == Clocks::Wide;
        let dynamic = backend != Backend::Static;
        let gaps = config.gaps;
        Fault::ALL
            .into_iter()
            .filter(|f| match f {
                Fault::Crash
                | Fault::Freeze
                | Fault::Suspend
                | Fault::ManagerRestartCached
                | Fault::ManagerRestartUncached
                | Fault::Rolling
                | Fault::RollingDeploy
                | Fault::ExternalLoss => true,
                // The static model keeps no floor (lease-static's floor file is not modelled):
                // a node redeployed on a later epoch repeats its own earlier values there.
                Fault::EpochChange => dynamic && config.epoch_changes,
                Fault::HostListEdit => !dynamic && config.host_list_edits,
                Fault::WallStepForward | Fault::DriftStorm | Fault::SuspendUncounted => wide,
                Fault::WallStepBackward => {
                    (wide && dynamic) || (!dynamic && gaps.static_clock_behind)
                }
                Fault::Partition
                | Fault::CoordinatorRestart
                | Fault::CoordinatorClockForward
                | Fault::CoordinatorClockBackward
                | Fault::ForceRelease => dynamic,
                // etcd and ZooKeeper report no time, so their nodes are not held to a clock:
                // after their data is gone only clocks that agree keep a new holder above an old
                // one's timestamps, as after a restore (documented).
                Fault::StoreWiped => {
                    dynamic && !(matches!(backend, Backend::Etcd | Backend::ZooKeeper) && wide)
                }
                Fault::ZooKeeperDataLost => backend == Backend::ZooKeeper && !wide,
                // With wide clocks too: the amnesia hold-off outlasts a forgotten holder's
                // timestamps by the clock offset every node keeps to the store's clock.
                Fault::RedisAmnesia | Fault::RedisSnapshot => backend == Backend::Redis,
                Fault::SqlFailover => backend == Backend::Sql,
                Fault::RedisFailover => backend == Backend::Redis && gaps.redis_failover,
                Fault::SqlLostCommits => backend == Backend::Sql && gaps.sql_lost_commits,
                Fault::EtcdLeaderChange => backend == Backend::Etcd,
                Fault::EtcdRestore => backend == Backend::Etcd && !wide && gaps.etcd_restore,
            })
            .filter(|f| !config.without.contains(f))
            .collect()
    }
}
