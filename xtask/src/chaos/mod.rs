//! `cargo xtask chaos [--long] [--seed N] [--backend NAME]... [--nodes N] [--secs S]`: runs
//! chaos nodes (`crates/nononce-chaos`) against each coordinator while injecting a seeded
//! schedule of faults, then checks every nonce they recorded.
//!
//! Faults (see docs/reliability.md, "Chaos runs"):
//! - `herd`: all nodes start at once (every run; the long run also kills and restarts all).
//! - `skew`: every node's clock runs ahead of or behind the machine's by a planned offset
//!   (up to 20 margins; the long run also an hour's worth), a new one at every restart.
//! - `clock_step`: SIGUSR1 makes a node step its clock back by 2-20 margins.
//!   Every node is told the run's clock bound (its largest planned offset and steps, and a
//!   second): the Redis and SQL amnesia hold-off outlasts the lease by twice it, and nodes
//!   refuse a lease on a clock further off the store's.
//! - `partition`: one node's TCP proxy stops forwarding (both ways) for longer than a lease.
//! - `reset`: one node's proxy resets every connection (RST), and every new one, for a while.
//! - `latency`: one node's proxy delays every chunk by hundreds of ms.
//! - `freeze`: SIGSTOP for longer than the lease, then SIGCONT.
//! - `kill9`: SIGKILL, restart a moment later (a new record file).
//! - `steal`: a direct write to the store gives one held ID to a foreign token.
//! - `coordinator`: the run's own server is killed (`kill -9`) and restarted: Valkey/Redis
//!   empty (the amnesia guard must hold acquisitions off), PostgreSQL/MariaDB/etcd with their
//!   data (crash recovery); SQLite: not applicable.
//! - `failover` (PostgreSQL): the streaming replica stops receiving WAL, the primary is killed
//!   more than a lease later, the lagging replica is promoted and every node's proxy repointed.
//! - `rolling`: every node in turn is stopped gracefully (releasing its ID) and restarted.
//!
//! Every wait is bounded, every child (nodes, servers, proxies) is stopped on drop, and
//! everything listens on loopback only.

mod args;
mod guard;
mod nodes;
mod proxy;
mod rng;
mod schedule;
mod servers;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use args::Backend;
use nodes::{Cluster, Node};
use proxy::{Mode, Proxies};
use rng::Rng;
use schedule::{Action, Features, LEASE_MS};
use servers::{EtcdServer, Mariadb, Postgres, RedisServer, loopback};

/// Longest the checker may take over one backend's files.
const CHECK_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest a `chaos-node steal` may take (it bounds its own work to 10 s).
const STEAL_TIMEOUT: Duration = Duration::from_secs(20);
/// IDs the nodes share beyond one each: the rest of the 512 are held by a foreign holder, so
/// IDs pass between nodes (and their clocks) all the time.
const SPARE_IDS: usize = 4;
/// How long the reservation of the other IDs lasts.
const RESERVE_MS: u64 = 3_600_000;

/// How long the nodes run after the last fault was healed.
const RECOVERY_MS: u64 = 6_000;
/// A node just started has not yet installed its SIGUSR1 handler: wait this long first.
const SIGNAL_READY: Duration = Duration::from_millis(1500);

/// lease-sql URL options for the nodes: the amnesia guard holds acquisitions off for the
/// longest lease (the nodes' lease) and twice the run's clock bound after the database's
/// identity changes; `extra` is appended (`--sql-options`).
fn sql_options(extra: Option<&str>, max_clock_offset_ms: u64) -> String {
    let mut options = format!(
        "max_lease_s={}&max_clock_offset_s={}",
        LEASE_MS.div_ceil(1000),
        max_clock_offset_ms / 1000
    );
    if let Some(extra) = extra {
        options.push('&');
        options.push_str(extra);
    }
    options
}

/// Options of the nodes' etcd URLs: the amnesia hold-off is the longest lease (the nodes').
fn etcd_options() -> String {
    format!("max_lease_s={}", LEASE_MS.div_ceil(1000))
}

/// Runs the chaos harness; `Err` when a check failed or the harness could not run.
pub fn run(args: &[String]) -> Result<(), String> {
    let opts = args::parse(args)?;
    let root = crate::workspace_root();
    // First: it installs protoc, which building the nodes' etcd client needs.
    let services = crate::services::start()?;
    eprintln!("==> chaos: building nononce-chaos");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-p", "nononce-chaos", "--bins"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building nononce-chaos failed ({status})"));
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let bins = Bins {
        node: target.join("debug/chaos-node"),
        check: target.join("debug/chaos-check"),
        proxy: target.join("debug/chaos-proxy"),
    };
    let env = |key: &str| {
        services
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(key).ok())
    };
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let run_dir = root
        .join("target/chaos")
        .join(format!("seed{}-{stamp}", opts.seed));
    eprintln!(
        "==> chaos: seed {}, {} nodes, {} s per backend{}, files in {}",
        opts.seed,
        opts.nodes,
        opts.secs,
        if opts.long { " (long)" } else { "" },
        run_dir.display()
    );
    let mut results: Vec<(Backend, Result<serde_json::Value, String>, Duration)> = Vec::new();
    for (i, &backend) in opts.backends.iter().enumerate() {
        let started = Instant::now();
        let dir = run_dir.join(backend.name());
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = format!("chaos_{}_{}_{stamp}", backend.name(), opts.seed);
        let ctx = Ctx {
            bins: &bins,
            dir: &dir,
            name: &name,
            nodes: opts.nodes,
            secs: opts.secs,
            long: opts.long,
            within_margin: opts.within_margin,
            sql_options: opts.sql_options.as_deref(),
            rng: Rng::new(opts.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        };
        eprintln!("==> chaos: {} ({})", backend.name(), dir.display());
        let coordinator = match backend {
            Backend::Sqlite => Ok(Coordinator::Sqlite(format!(
                "sqlite:{}",
                dir.join("leases.db").display()
            ))),
            Backend::Postgres => Postgres::start(&dir, true).map(Coordinator::Postgres),
            Backend::Mariadb => Mariadb::start(&dir).map(Coordinator::Mariadb),
            Backend::Valkey | Backend::Redis8 => {
                let var = if backend == Backend::Valkey {
                    "NONONCE_TEST_VALKEY_BIN"
                } else {
                    "NONONCE_TEST_REDIS8_BIN"
                };
                env(var)
                    .ok_or_else(|| format!("{var} is not set"))
                    .and_then(|bin| RedisServer::start(PathBuf::from(bin), &dir))
                    .map(Coordinator::Redis)
            }
            Backend::Etcd => env("NONONCE_TEST_ETCD_BIN")
                .ok_or_else(|| "NONONCE_TEST_ETCD_BIN is not set".to_owned())
                .and_then(|bin| EtcdServer::start(PathBuf::from(bin), &dir))
                .map(Coordinator::Etcd),
        };
        let result = coordinator.and_then(|c| run_backend(ctx, c));
        if let Err(e) = &result {
            eprintln!("<== chaos: {}: {e}", backend.name());
        }
        results.push((backend, result, started.elapsed()));
    }
    let guard = if opts.guard {
        let dir = run_dir.join("guard");
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Some(guard::scenario(&bins, &dir))
    } else {
        None
    };
    drop(services);

    println!();
    println!(
        "{:<9} {:>9} {:>10} {:>13} {:>9} {:>7} {:>8} {:>6} {:>6}  faults",
        "backend",
        "nonces",
        "duplicates",
        "out-of-window",
        "handovers",
        "windows",
        "overlaps",
        "time",
        "result"
    );
    let mut failed = Vec::new();
    for (backend, result, took) in &results {
        match result {
            Ok(r) => {
                let get = |k: &str| r.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
                let faults: Vec<String> = r
                    .get("faults")
                    .and_then(serde_json::Value::as_object)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                let passed =
                    get("nonces") > 0 && get("duplicates") == 0 && get("out_of_window") == 0;
                if !passed {
                    failed.push(backend.name().to_owned());
                }
                println!(
                    "{:<9} {:>9} {:>10} {:>13} {:>9} {:>7} {:>8} {:>5}s {:>6}  {}",
                    backend.name(),
                    get("nonces"),
                    get("duplicates"),
                    get("out_of_window"),
                    get("handovers"),
                    get("windows"),
                    get("window_overlaps"),
                    took.as_secs(),
                    if passed { "PASS" } else { "FAIL" },
                    faults.join(" ")
                );
            }
            Err(e) => {
                failed.push(backend.name().to_owned());
                println!("{:<9} error: {e}", backend.name());
            }
        }
    }
    match guard {
        Some(Ok(line)) => println!("guard     {line}"),
        Some(Err(e)) => {
            failed.push("guard".into());
            println!("guard     FAIL: {e}");
        }
        None => {}
    }
    println!(
        "(seed {}; reproduce: cargo xtask chaos{} --seed {})",
        opts.seed,
        if opts.long { " --long" } else { "" },
        opts.seed
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "chaos failed: {}; files in {}",
            failed.join(", "),
            run_dir.display()
        ))
    }
}

pub struct Bins {
    pub node: PathBuf,
    pub check: PathBuf,
    pub proxy: PathBuf,
}

struct Ctx<'a> {
    bins: &'a Bins,
    dir: &'a Path,
    name: &'a str,
    nodes: usize,
    secs: u64,
    long: bool,
    /// Keep every clock within a quarter margin of the machine's, steps included.
    within_margin: bool,
    sql_options: Option<&'a str>,
    rng: Rng,
}

enum Coordinator {
    /// A file every node opens directly.
    Sqlite(String),
    /// Our own Valkey/Redis server, reached through the proxies.
    Redis(RedisServer),
    /// Our own PostgreSQL primary (and replica), reached through the proxies.
    Postgres(Postgres),
    /// Our own MariaDB server, reached through the proxies.
    Mariadb(Mariadb),
    /// Our own etcd member, reached through the proxies.
    Etcd(EtcdServer),
}

impl Coordinator {
    /// Where the proxies forward to (none: SQLite).
    fn upstream(&self) -> Option<SocketAddr> {
        match self {
            Coordinator::Sqlite(_) => None,
            Coordinator::Redis(s) => Some(loopback(s.port)),
            Coordinator::Postgres(s) => Some(loopback(s.port())),
            Coordinator::Mariadb(s) => Some(loopback(s.port())),
            Coordinator::Etcd(s) => Some(loopback(s.port())),
        }
    }

    /// The store URL for direct writes (the steal fault).
    fn direct_url(&self) -> String {
        match self {
            Coordinator::Sqlite(url) => url.clone(),
            Coordinator::Redis(s) => s.url(),
            Coordinator::Postgres(s) => s.url(),
            Coordinator::Mariadb(s) => s.url(),
            Coordinator::Etcd(s) => s.url(),
        }
    }

    /// The store URL a node is given, through its proxy on `port`.
    fn node_url(
        &self,
        port: Option<u16>,
        sql_extra: Option<&str>,
        max_clock_offset_ms: u64,
    ) -> String {
        let through = |url: String, port: Option<u16>, options: Option<String>| {
            let url = match port {
                Some(port) => with_port(&url, port),
                None => url,
            };
            match options {
                Some(o) => format!("{url}?{o}"),
                None => url,
            }
        };
        match self {
            Coordinator::Sqlite(url) => url.clone(),
            Coordinator::Redis(s) => through(s.url(), port, None),
            Coordinator::Postgres(s) => through(
                s.url(),
                port,
                Some(sql_options(sql_extra, max_clock_offset_ms)),
            ),
            Coordinator::Mariadb(s) => through(
                s.url(),
                port,
                Some(sql_options(sql_extra, max_clock_offset_ms)),
            ),
            Coordinator::Etcd(s) => through(s.url(), port, Some(etcd_options())),
        }
    }

    fn features(&self) -> Features {
        Features {
            proxy: self.upstream().is_some(),
            server: !matches!(self, Coordinator::Sqlite(_)),
            replica: matches!(self, Coordinator::Postgres(s) if s.has_replica()),
        }
    }

    fn is_down(&self) -> bool {
        match self {
            Coordinator::Sqlite(_) => false,
            Coordinator::Redis(s) => s.is_down(),
            Coordinator::Postgres(s) => s.is_down(),
            Coordinator::Mariadb(s) => s.is_down(),
            Coordinator::Etcd(s) => s.is_down(),
        }
    }

    fn kill(&mut self) -> &'static str {
        match self {
            Coordinator::Sqlite(_) => "",
            Coordinator::Redis(s) => {
                s.kill();
                "server killed (kill -9; restarts empty)"
            }
            Coordinator::Postgres(s) => {
                s.kill();
                "primary killed (kill -9 of the postmaster and every backend; restarts with crash recovery)"
            }
            Coordinator::Mariadb(s) => {
                s.kill();
                "server killed (kill -9; restarts with InnoDB crash recovery)"
            }
            Coordinator::Etcd(s) => {
                s.kill();
                "member killed (kill -9; restarts with its data: keys, floors and etcd leases)"
            }
        }
    }

    fn restart(&mut self) -> Result<(), String> {
        match self {
            Coordinator::Sqlite(_) => Ok(()),
            Coordinator::Redis(s) => s.restart(),
            Coordinator::Postgres(s) => s.restart(),
            Coordinator::Mariadb(s) => s.restart(),
            Coordinator::Etcd(s) => s.restart(),
        }
    }
}

/// `url` with its host and port replaced by `127.0.0.1:port` (the node's proxy).
fn with_port(url: &str, port: u16) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let user = auth
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    let path = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    format!("{scheme}://{user}127.0.0.1:{port}{path}")
}

/// Runs one backend: nodes, faults, stop, check. Returns the checker's JSON report.
fn run_backend(
    mut ctx: Ctx<'_>,
    mut coordinator: Coordinator,
) -> Result<serde_json::Value, String> {
    let mut cluster = Cluster::new(
        ctx.bins.node.clone(),
        ctx.dir.to_path_buf(),
        ctx.name.to_owned(),
    )?;
    if let Some(upstream) = coordinator.upstream() {
        cluster.proxies = Some(Proxies::start(
            &ctx.bins.proxy,
            upstream,
            ctx.nodes,
            &ctx.dir.join("proxy.log"),
        )?);
    }
    let plan = schedule::plan(
        &mut ctx.rng,
        ctx.nodes,
        ctx.secs,
        ctx.long,
        coordinator.features(),
    );
    cluster.clocks = plan.clocks;
    if ctx.within_margin {
        // The guarantee's documented condition on stores that can lose writes: clocks within
        // the margin of each other (a quarter each way, plus a quarter for a step).
        let bound = schedule::MARGIN_MS / 4;
        let signed = i64::try_from(bound).unwrap_or(0);
        for clocks in &mut cluster.clocks {
            for offset in &mut clocks.offsets_ms {
                *offset = (*offset).clamp(-signed, signed);
            }
            for step in &mut clocks.steps_ms {
                *step = (*step).min(bound);
            }
        }
    }
    // The stores' amnesia guards count on it and the nodes are held to it.
    cluster.max_clock_offset_ms = schedule::clock_bound_ms(&cluster.clocks, &plan.actions);
    cluster.note(
        "clock_bound",
        None,
        &format!(
            "nodes keep their clocks within {} ms of the store's (max_clock_offset)",
            cluster.max_clock_offset_ms
        ),
    );
    for i in 0..ctx.nodes {
        let port = cluster.proxies.as_ref().map(|p| p.ports[i]);
        cluster.nodes.push(Node {
            url: coordinator.node_url(port, ctx.sql_options, cluster.max_clock_offset_ms),
            child: None,
            incarnation: 0,
            spawned: Instant::now(),
        });
    }

    if matches!(coordinator, Coordinator::Redis(_)) {
        // The amnesia guard holds acquisitions off while the server's uptime is below the
        // longest lease and twice the clock bound: let a fresh server age first so the herd
        // start is about the herd.
        thread::sleep(Duration::from_millis(
            LEASE_MS + 2 * cluster.max_clock_offset_ms + 500,
        ));
    }
    reserve(&mut cluster, &coordinator, ctx.nodes + SPARE_IDS)?;
    cluster.started = Instant::now();
    // Many nodes starting at once.
    cluster.log("herd", None, "all nodes start at once");
    for i in 0..ctx.nodes {
        cluster.spawn(i)?;
    }
    // Every fault healed (a server fault may be pushed past the nominal end), then time to
    // recover before the nodes are stopped.
    let last_action = plan.actions.last().map_or(0, |(t, _)| *t);
    // A store that forgets (Valkey/Redis back empty, PostgreSQL promoting its lagging replica)
    // holds acquisitions off for the lease and twice the clock bound: run past that, so that
    // IDs change hands after the loss too.
    let forgets = matches!(
        coordinator,
        Coordinator::Redis(_) | Coordinator::Postgres(_)
    );
    let hold_off = LEASE_MS + 2 * cluster.max_clock_offset_ms;
    let last_loss = plan
        .actions
        .iter()
        .filter(|(_, a)| forgets && matches!(a, Action::CoordinatorUp | Action::FailoverPromote))
        // The server's uptime counts from its start, rounded down a second; then a retry
        // interval, and leases to hand over.
        .map(|(t, _)| t + hold_off + RECOVERY_MS + 2 * LEASE_MS)
        .max()
        .unwrap_or(0);
    let mut end = Duration::from_millis(
        (ctx.secs * 1000)
            .max(last_action + RECOVERY_MS)
            .max(last_loss),
    );
    // An action that takes long (a rolling restart, a server start) delays every later one by
    // as much, so that each fault keeps its planned length.
    let mut late = Duration::ZERO;
    for (t, action) in plan.actions {
        let at = Duration::from_millis(t) + late;
        let now = cluster.started.elapsed();
        if at > now {
            thread::sleep(at - now);
        } else {
            late += now - at;
        }
        act(&mut cluster, action, &mut coordinator, &ctx)?;
        collect_steals(&mut cluster, false);
    }
    end += late;
    let now = cluster.started.elapsed();
    if end > now {
        thread::sleep(end - now);
    }
    // Heal everything, then stop every node gracefully (it releases its ID).
    if let Some(p) = &mut cluster.proxies {
        p.set(None, Mode::Pass)?;
    }
    if coordinator.is_down() {
        coordinator.restart()?;
    }
    collect_steals(&mut cluster, true);
    cluster.stop_all();
    drop(cluster);
    drop(coordinator);
    let json = ctx.dir.join("report.json");
    let mut check = Command::new(&ctx.bins.check);
    check.arg(ctx.dir).arg("--json").arg(&json);
    let out = servers::output_within(check, "chaos-check", CHECK_TIMEOUT)?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let text = fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    // A failed check shows in the table (the caller fails the run on its figures).
    Ok(report)
}

/// Logs the steals that finished (all of them with `wait`: each is bounded by its timeout).
fn collect_steals(cluster: &mut Cluster, wait: bool) {
    let (done, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut cluster.background)
        .into_iter()
        .partition(|h| wait || h.is_finished());
    cluster.background = pending;
    for handle in done {
        let result = handle
            .join()
            .unwrap_or_else(|_| Err("steal thread panicked".into()));
        match result {
            Ok(out) if out.status.success() => {
                let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                cluster.log("steal", None, &format!("id {id} given to a foreign token"));
            }
            Ok(out) => cluster.note(
                "steal_failed",
                None,
                String::from_utf8_lossy(&out.stderr).trim(),
            ),
            Err(e) => cluster.note("steal_failed", None, &e),
        }
    }
}

/// Leaves only IDs `0..keep` to the nodes (`chaos-node reserve`).
fn reserve(cluster: &mut Cluster, coordinator: &Coordinator, keep: usize) -> Result<(), String> {
    let mut cmd = Command::new(&cluster.bin);
    cmd.args([
        "reserve",
        "--store",
        &coordinator.direct_url(),
        "--name",
        &cluster.name,
    ])
    .args([
        "--keep",
        &keep.to_string(),
        "--ttl-ms",
        &RESERVE_MS.to_string(),
    ]);
    let out = servers::output_within(cmd, "reserve", STEAL_TIMEOUT)?;
    if !out.status.success() {
        return Err(format!(
            "chaos-node reserve: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    cluster.note(
        "scarce_ids",
        None,
        &format!("IDs {keep}..511 held by a foreign holder: the nodes share IDs 0..{keep}"),
    );
    Ok(())
}

fn set_proxy(cluster: &mut Cluster, i: usize, mode: Mode) -> Result<(), String> {
    match &mut cluster.proxies {
        Some(p) => p.set(Some(i), mode),
        None => Ok(()),
    }
}

#[allow(clippy::too_many_lines)] // one match over every action
fn act(
    cluster: &mut Cluster,
    action: Action,
    coordinator: &mut Coordinator,
    ctx: &Ctx<'_>,
) -> Result<(), String> {
    match action {
        Action::Partition(i, on) => {
            set_proxy(cluster, i, if on { Mode::Stall } else { Mode::Pass })?;
            if on {
                cluster.log("partition", Some(i), "proxy stalls all traffic both ways");
            }
        }
        Action::Reset(i, on) => {
            set_proxy(cluster, i, if on { Mode::Reset } else { Mode::Pass })?;
            if on {
                cluster.log(
                    "reset",
                    Some(i),
                    "proxy resets every connection (RST), new ones too, until healed",
                );
            }
        }
        Action::Latency(i, ms) => {
            set_proxy(
                cluster,
                i,
                if ms == 0 { Mode::Pass } else { Mode::Delay(ms) },
            )?;
            if ms > 0 {
                cluster.log("latency", Some(i), &format!("{ms} ms per chunk"));
            }
        }
        Action::Freeze(i) => {
            cluster.signal(i, "-STOP");
            cluster.log("freeze", Some(i), "SIGSTOP longer than the lease");
        }
        Action::Thaw(i) => cluster.signal(i, "-CONT"),
        Action::Kill(i) => {
            cluster.kill(i);
            cluster.log("kill9", Some(i), "SIGKILL");
        }
        Action::Restart(i) => {
            if cluster.nodes[i].child.is_none() {
                cluster.spawn(i)?;
            }
        }
        Action::ClockStep(i) => {
            if cluster.nodes[i].child.is_none() {
                cluster.note("clock_step_skipped", Some(i), "node not running");
                return Ok(());
            }
            let age = cluster.nodes[i].spawned.elapsed();
            if age < SIGNAL_READY {
                thread::sleep(SIGNAL_READY - age);
            }
            let incarnation = cluster.nodes[i].incarnation;
            let (_, step) = cluster.clocks[i].get(incarnation);
            cluster.signal(i, "-USR1");
            cluster.log(
                "clock_step",
                Some(i),
                &format!("SIGUSR1: the node steps its clock back {step} ms"),
            );
        }
        Action::Steal => {
            // In the background: against a server that is down it takes until its timeout,
            // and the schedule must go on meanwhile.
            let mut cmd = Command::new(&cluster.bin);
            cmd.args([
                "steal",
                "--store",
                &coordinator.direct_url(),
                "--name",
                &cluster.name,
            ])
            .args(["--ttl-ms", &LEASE_MS.to_string()]);
            cluster.background.push(thread::spawn(move || {
                servers::output_within(cmd, "steal", STEAL_TIMEOUT)
            }));
        }
        Action::CoordinatorDown => {
            let detail = coordinator.kill();
            cluster.log("coordinator", None, detail);
        }
        Action::CoordinatorUp => {
            coordinator.restart()?;
            cluster.note("coordinator_up", None, "server answers again");
            if matches!(coordinator, Coordinator::Redis(_)) {
                // It came back empty: the foreign holder's IDs too.
                reserve(cluster, coordinator, ctx.nodes + SPARE_IDS)?;
            }
        }
        Action::FailoverLag => {
            if let Coordinator::Postgres(pg) = coordinator {
                let lsn = pg.lag_replica()?;
                cluster.log(
                    "failover",
                    None,
                    &format!("the replica stops receiving WAL at {lsn}; the primary goes on"),
                );
            }
        }
        Action::FailoverPromote => {
            if let Coordinator::Postgres(pg) = coordinator {
                let (primary, replica) = pg.fail_over()?;
                let upstream = loopback(pg.port());
                if let Some(p) = &mut cluster.proxies {
                    p.repoint(upstream)?;
                }
                cluster.note(
                    "failover_promoted",
                    None,
                    &format!(
                        "primary killed at WAL {primary}; the replica, at {replica}, promoted; every node's proxy now forwards to it ({upstream})"
                    ),
                );
            }
        }
        Action::Rolling => {
            cluster.log(
                "rolling",
                None,
                "every node stopped gracefully and restarted in turn",
            );
            for i in 0..ctx.nodes {
                cluster.signal(i, "-CONT");
                cluster.signal(i, "-TERM");
                cluster.wait_stopped(i);
                cluster.spawn(i)?;
                thread::sleep(Duration::from_millis(200));
            }
        }
        Action::Herd => {
            cluster.log(
                "herd",
                None,
                "every node killed, then all restarted at once",
            );
            for i in 0..ctx.nodes {
                cluster.kill(i);
            }
            for i in 0..ctx.nodes {
                cluster.spawn(i)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_port;

    #[test]
    fn urls_are_pointed_at_the_proxy() {
        assert_eq!(
            with_port("postgres://postgres@127.0.0.1:5432/postgres", 9),
            "postgres://postgres@127.0.0.1:9/postgres"
        );
        assert_eq!(
            with_port("redis://127.0.0.1:6390", 9),
            "redis://127.0.0.1:9"
        );
        assert_eq!(with_port("etcd://127.0.0.1:2390", 9), "etcd://127.0.0.1:9");
    }
}
