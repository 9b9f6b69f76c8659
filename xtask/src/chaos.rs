//! `cargo xtask chaos [--long] [--seed N] [--backend NAME]... [--nodes N] [--secs S]`: runs
//! chaos nodes (`crates/nononce-chaos`) against each coordinator while injecting a seeded
//! schedule of faults, then checks every nonce they recorded.
//!
//! Faults (see docs/reliability.md, "Chaos runs"):
//! - `herd`: all nodes start at once (every run; the long run also kills and restarts all).
//! - `partition`: one node's TCP proxy stops forwarding (both ways) for longer than a lease.
//! - `latency`: one node's proxy delays every chunk by hundreds of ms.
//! - `freeze`: SIGSTOP for longer than the lease, then SIGCONT.
//! - `kill9`: SIGKILL, restart a moment later (a new record file).
//! - `steal`: a direct write to the store gives one held ID to a foreign token.
//! - `coordinator`: Valkey/Redis: our own server is killed and restarted empty (the amnesia
//!   guard must hold acquisitions off); PostgreSQL/MariaDB: every node's proxy cuts the
//!   database off (restarting the shared server would disturb others); SQLite: not applicable.
//! - `rolling`: every node in turn is stopped gracefully (releasing its ID) and restarted.
//!
//! Every wait is bounded and every child (nodes, servers, proxies) is stopped on drop.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Lease timing every node uses (ms): short, so faults outlast leases within seconds.
const LEASE_MS: u64 = 5000;
const NODE_TIMING: [(&str, u64); 5] = [
    ("--lease-ms", LEASE_MS),
    ("--renew-ms", 1000),
    ("--min-ttl-ms", 2000),
    ("--margin-ms", 750),
    ("--call-timeout-ms", 1500),
];
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Sqlite,
    Postgres,
    Mariadb,
    Valkey,
    Redis8,
}

impl Backend {
    const ALL: [Backend; 5] = [
        Backend::Sqlite,
        Backend::Valkey,
        Backend::Redis8,
        Backend::Postgres,
        Backend::Mariadb,
    ];

    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mariadb => "mariadb",
            Backend::Valkey => "valkey9",
            Backend::Redis8 => "redis8",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }
}

struct Options {
    seed: u64,
    long: bool,
    nodes: usize,
    secs: u64,
    backends: Vec<Backend>,
    guard: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        seed: 1,
        long: false,
        nodes: 8,
        secs: 0,
        backends: Vec::new(),
        guard: true,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--long" => o.long = true,
            "--no-guard" => o.guard = false,
            "--seed" => {
                o.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--nodes" => {
                o.nodes = value("--nodes")?
                    .parse()
                    .map_err(|e| format!("--nodes: {e}"))?;
            }
            "--secs" => {
                o.secs = value("--secs")?
                    .parse()
                    .map_err(|e| format!("--secs: {e}"))?
            }
            "--backend" => {
                for name in value("--backend")?.split(',') {
                    o.backends.push(Backend::parse(name).ok_or_else(|| {
                        format!(
                            "unknown backend {name}: use sqlite, valkey9, redis8, postgres, mariadb"
                        )
                    })?);
                }
            }
            other => {
                return Err(format!(
                    "unknown chaos argument {other}: use --long, --seed N, --backend NAME[,NAME], --nodes N, --secs S, --no-guard"
                ));
            }
        }
    }
    if o.nodes < 2 {
        return Err("--nodes must be at least 2".into());
    }
    if o.backends.is_empty() {
        o.backends = Backend::ALL.to_vec();
    }
    if o.secs == 0 {
        o.secs = if o.long { 150 } else { 30 };
    }
    Ok(o)
}

/// Runs the chaos harness; `Err` when a check failed or the harness could not run.
pub fn run(args: &[String]) -> Result<(), String> {
    let opts = parse(args)?;
    let root = crate::workspace_root();
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
    };
    let services = crate::services::start()?;
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
    let mut results: Vec<(Backend, Result<serde_json::Value, String>)> = Vec::new();
    for (i, &backend) in opts.backends.iter().enumerate() {
        let dir = run_dir.join(backend.name());
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = format!("chaos_{}_{}_{stamp}", backend.name(), opts.seed);
        let ctx = Ctx {
            bins: &bins,
            dir: &dir,
            name: &name,
            backend,
            nodes: opts.nodes,
            secs: opts.secs,
            long: opts.long,
            rng: Rng::new(opts.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        };
        eprintln!("==> chaos: {} ({})", backend.name(), dir.display());
        let result = match backend {
            Backend::Sqlite => {
                let url = format!("sqlite:{}", dir.join("leases.db").display());
                run_backend(ctx, Coordinator::Direct(url))
            }
            Backend::Postgres | Backend::Mariadb => {
                let var = if backend == Backend::Postgres {
                    "NONONCE_TEST_POSTGRES_URL"
                } else {
                    "NONONCE_TEST_MYSQL_URL"
                };
                match env(var) {
                    Some(url) => run_backend(ctx, Coordinator::Sql(url)),
                    None => Err(format!("{var} is not set")),
                }
            }
            Backend::Valkey | Backend::Redis8 => {
                let var = if backend == Backend::Valkey {
                    "NONONCE_TEST_VALKEY_BIN"
                } else {
                    "NONONCE_TEST_REDIS8_BIN"
                };
                match env(var) {
                    Some(bin) => RedisServer::start(PathBuf::from(bin), &dir)
                        .and_then(|server| run_backend(ctx, Coordinator::Redis(server))),
                    None => Err(format!("{var} is not set")),
                }
            }
        };
        if let Err(e) = &result {
            eprintln!("<== chaos: {}: {e}", backend.name());
        }
        results.push((backend, result));
    }
    let guard = if opts.guard {
        let dir = run_dir.join("guard");
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Some(guard_scenario(&bins, &dir))
    } else {
        None
    };
    drop(services);

    println!();
    println!(
        "{:<9} {:>10} {:>10} {:>13} {:>9} {:>7} {:>8}  faults",
        "backend", "nonces", "duplicates", "out-of-window", "handovers", "windows", "result"
    );
    let mut failed = Vec::new();
    for (backend, result) in &results {
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
                    "{:<9} {:>10} {:>10} {:>13} {:>9} {:>7} {:>8}  {}",
                    backend.name(),
                    get("nonces"),
                    get("duplicates"),
                    get("out_of_window"),
                    get("handovers"),
                    get("windows"),
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

struct Bins {
    node: PathBuf,
    check: PathBuf,
}

struct Ctx<'a> {
    bins: &'a Bins,
    dir: &'a Path,
    name: &'a str,
    backend: Backend,
    nodes: usize,
    secs: u64,
    long: bool,
    rng: Rng,
}

enum Coordinator {
    /// SQLite: a file every node opens directly.
    Direct(String),
    /// PostgreSQL/MariaDB URL: nodes reach it through their proxies.
    Sql(String),
    /// Our own Valkey/Redis server, reached through the proxies.
    Redis(RedisServer),
}

/// splitmix64: seeded, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).unwrap_or(0)
    }
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Partition(usize, bool),
    Latency(usize, u64),
    Freeze(usize),
    Thaw(usize),
    Kill(usize),
    Restart(usize),
    Steal,
    CoordinatorDown,
    CoordinatorUp,
    Rolling,
    Herd,
}

/// The seeded fault schedule: (ms after start, action), sorted.
fn schedule(ctx: &mut Ctx<'_>, has_proxy: bool, has_coordinator: bool) -> Vec<(u64, Action)> {
    let n = ctx.nodes;
    let end_ms = ctx.secs * 1000;
    let mut classes = vec!["freeze", "kill9", "steal", "rolling"];
    if has_proxy {
        classes.extend(["partition", "latency"]);
    }
    if has_coordinator {
        classes.push("coordinator");
    }
    // The short run: every class once, in seeded order; the long run: random classes every
    // few seconds, with every class at least once.
    let mut picks: Vec<&str> = Vec::new();
    let mut order = classes.clone();
    for i in (1..order.len()).rev() {
        let j = ctx.rng.index(i + 1);
        order.swap(i, j);
    }
    picks.extend(order);
    if ctx.long {
        let slots = usize::try_from((end_ms - 15_000) / 4_000).unwrap_or(0);
        while picks.len() < slots {
            let c = classes[ctx.rng.index(classes.len())];
            if c == "rolling" && picks.iter().filter(|p| **p == "rolling").count() >= 2 {
                continue;
            }
            picks.push(c);
        }
        picks.push("herd");
    }
    // Leave 5 s at the start for the first leases and ~8 s at the end for recovery.
    let first = 5_000;
    let last = end_ms.saturating_sub(8_000).max(first + 1);
    let step = (last - first) / picks.len() as u64;
    // Nodes in seeded order, one per fault in turn: faults on one node's proxy never overlap
    // (a heal would end the other fault early).
    let mut nodes: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = ctx.rng.index(i + 1);
        nodes.swap(i, j);
    }
    let mut out = Vec::new();
    for (k, class) in picks.iter().enumerate() {
        let t = first + step * k as u64 + ctx.rng.range(0, step / 3);
        let node = nodes[k % n];
        match *class {
            "partition" => {
                out.push((t, Action::Partition(node, true)));
                out.push((
                    t + LEASE_MS + ctx.rng.range(500, 2000),
                    Action::Partition(node, false),
                ));
            }
            "latency" => {
                out.push((t, Action::Latency(node, ctx.rng.range(200, 1200))));
                out.push((t + ctx.rng.range(3000, 5000), Action::Latency(node, 0)));
            }
            "freeze" => {
                out.push((t, Action::Freeze(node)));
                out.push((t + LEASE_MS + ctx.rng.range(500, 2000), Action::Thaw(node)));
            }
            "kill9" => {
                out.push((t, Action::Kill(node)));
                out.push((t + ctx.rng.range(300, 1500), Action::Restart(node)));
            }
            "steal" => out.push((t, Action::Steal)),
            "coordinator" => {
                out.push((t, Action::CoordinatorDown));
                // Sometimes shorter than a lease (renewals retry), sometimes longer (lost).
                out.push((
                    t + ctx.rng.range(1000, LEASE_MS + 2000),
                    Action::CoordinatorUp,
                ));
            }
            "rolling" => out.push((t, Action::Rolling)),
            _ => out.push((t, Action::Herd)),
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Runs one backend: nodes, faults, stop, check. Returns the checker's JSON report.
fn run_backend(
    mut ctx: Ctx<'_>,
    mut coordinator: Coordinator,
) -> Result<serde_json::Value, String> {
    let (upstream, direct_url) = match &coordinator {
        Coordinator::Direct(url) => (None, url.clone()),
        Coordinator::Sql(url) => (Some(authority(url)?), url.clone()),
        Coordinator::Redis(server) => (
            Some(SocketAddr::from(([127, 0, 0, 1], server.port))),
            server.url(),
        ),
    };
    let mut cluster = Cluster {
        bin: ctx.bins.node.clone(),
        dir: ctx.dir.to_path_buf(),
        name: ctx.name.to_owned(),
        nodes: Vec::new(),
        faults: fs::File::create(ctx.dir.join("faults.jsonl"))
            .map_err(|e| format!("faults.jsonl: {e}"))?,
        started: Instant::now(),
    };
    for _ in 0..ctx.nodes {
        let (url, proxy) = match upstream {
            Some(up) => {
                let proxy = Proxy::start(up)?;
                (with_port(&direct_url, proxy.port)?, Some(proxy))
            }
            None => (direct_url.clone(), None),
        };
        cluster.nodes.push(Node {
            url,
            proxy,
            child: None,
            incarnation: 0,
        });
    }
    let has_proxy = upstream.is_some();
    let has_coordinator = !matches!(coordinator, Coordinator::Direct(_));
    let plan = schedule(&mut ctx, has_proxy, has_coordinator);

    if matches!(coordinator, Coordinator::Redis(_)) {
        // The amnesia guard holds acquisitions off while the server's uptime is below the
        // longest lease: let a fresh server age first so the herd start is about the herd.
        thread::sleep(Duration::from_millis(LEASE_MS + 500));
        cluster.started = Instant::now();
    }
    // Many nodes starting at once.
    cluster.log("herd", None, "all nodes start at once");
    for i in 0..ctx.nodes {
        cluster.spawn(i)?;
    }
    let end = Duration::from_secs(ctx.secs);
    for (t, action) in plan {
        let at = Duration::from_millis(t);
        let now = cluster.started.elapsed();
        if at > now {
            thread::sleep(at - now);
        }
        cluster.act(action, &mut coordinator, &direct_url, &ctx)?;
    }
    let now = cluster.started.elapsed();
    if end > now {
        thread::sleep(end - now);
    }
    // Heal everything, then stop every node gracefully (it releases its ID).
    for node in &cluster.nodes {
        if let Some(p) = &node.proxy {
            p.set(Mode::Pass);
        }
    }
    if let Coordinator::Redis(server) = &mut coordinator
        && server.child.is_none()
    {
        server.restart()?;
    }
    for i in 0..cluster.nodes.len() {
        cluster.signal(i, "-CONT");
    }
    for i in 0..cluster.nodes.len() {
        cluster.signal(i, "-TERM");
    }
    for i in 0..cluster.nodes.len() {
        cluster.wait_stopped(i);
    }
    drop(cluster);
    drop(coordinator);
    if matches!(ctx.backend, Backend::Postgres | Backend::Mariadb) {
        // Best effort: leave no tables behind in the shared database.
        let _ = Command::new(&ctx.bins.node)
            .args(["drop", "--store", &direct_url, "--name", ctx.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let json = ctx.dir.join("report.json");
    let out = Command::new(&ctx.bins.check)
        .arg(ctx.dir)
        .arg("--json")
        .arg(&json)
        .output()
        .map_err(|e| format!("chaos-check: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let text = fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    // A failed check shows in the table (the caller fails the run on its figures).
    Ok(report)
}

struct Node {
    url: String,
    proxy: Option<Proxy>,
    child: Option<Child>,
    incarnation: u32,
}

struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    name: String,
    nodes: Vec<Node>,
    faults: fs::File,
    started: Instant,
}

impl Cluster {
    fn log(&mut self, fault: &str, node: Option<usize>, detail: &str) {
        let t = self.started.elapsed().as_millis();
        eprintln!(
            "    chaos {:>6} ms  {fault} {} {detail}",
            t,
            node.map_or(String::new(), |n| format!("node {n}"))
        );
        let line = serde_json::json!({ "t_ms": t, "fault": fault, "node": node, "detail": detail });
        let _ = writeln!(self.faults, "{line}");
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let node = &mut self.nodes[i];
        node.incarnation += 1;
        let stem = format!("node-{i:02}-{:02}", node.incarnation);
        let log = fs::File::create(self.dir.join(format!("{stem}.log")))
            .map_err(|e| format!("{stem}.log: {e}"))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "run",
            "--node",
            &i.to_string(),
            "--store",
            &node.url,
            "--name",
            &self.name,
        ])
        .arg("--out")
        .arg(self.dir.join(format!("{stem}.bin")));
        for (flag, value) in NODE_TIMING {
            cmd.args([flag, &value.to_string()]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", self.bin.display()))?;
        node.child = Some(child);
        Ok(())
    }

    fn signal(&self, i: usize, signal: &str) {
        if let Some(child) = &self.nodes[i].child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Waits up to [`STOP_TIMEOUT`] for node `i` to exit, then kills it.
    fn wait_stopped(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
            eprintln!("    chaos: node {i} did not stop within {STOP_TIMEOUT:?}; killing it");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn act(
        &mut self,
        action: Action,
        coordinator: &mut Coordinator,
        direct_url: &str,
        ctx: &Ctx<'_>,
    ) -> Result<(), String> {
        match action {
            Action::Partition(i, on) => {
                if let Some(p) = &self.nodes[i].proxy {
                    p.set(if on { Mode::Drop } else { Mode::Pass });
                }
                if on {
                    self.log("partition", Some(i), "proxy drops all traffic");
                }
            }
            Action::Latency(i, ms) => {
                if let Some(p) = &self.nodes[i].proxy {
                    p.set(if ms == 0 { Mode::Pass } else { Mode::Delay(ms) });
                }
                if ms > 0 {
                    self.log("latency", Some(i), &format!("{ms} ms per chunk"));
                }
            }
            Action::Freeze(i) => {
                self.signal(i, "-STOP");
                self.log("freeze", Some(i), "SIGSTOP longer than the lease");
            }
            Action::Thaw(i) => self.signal(i, "-CONT"),
            Action::Kill(i) => {
                self.kill(i);
                self.log("kill9", Some(i), "SIGKILL");
            }
            Action::Restart(i) => {
                if self.nodes[i].child.is_none() {
                    self.spawn(i)?;
                }
            }
            Action::Steal => {
                let out = Command::new(&self.bin)
                    .args(["steal", "--store", direct_url, "--name", &self.name])
                    .args(["--ttl-ms", &LEASE_MS.to_string()])
                    .stderr(Stdio::piped())
                    .output()
                    .map_err(|e| format!("steal: {e}"))?;
                let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                if out.status.success() {
                    self.log("steal", None, &format!("id {id} given to a foreign token"));
                } else {
                    eprintln!(
                        "    chaos: steal failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
            Action::CoordinatorDown => match coordinator {
                Coordinator::Redis(server) => {
                    server.kill();
                    self.log("coordinator", None, "server killed (restarts empty)");
                }
                Coordinator::Sql(_) => {
                    for node in &self.nodes {
                        if let Some(p) = &node.proxy {
                            p.set(Mode::Drop);
                        }
                    }
                    self.log("coordinator", None, "every node cut off from the database");
                }
                Coordinator::Direct(_) => {}
            },
            Action::CoordinatorUp => match coordinator {
                Coordinator::Redis(server) => server.restart()?,
                Coordinator::Sql(_) => {
                    for node in &self.nodes {
                        if let Some(p) = &node.proxy {
                            p.set(Mode::Pass);
                        }
                    }
                }
                Coordinator::Direct(_) => {}
            },
            Action::Rolling => {
                self.log(
                    "rolling",
                    None,
                    "every node stopped gracefully and restarted in turn",
                );
                for i in 0..ctx.nodes {
                    self.signal(i, "-CONT");
                    self.signal(i, "-TERM");
                    self.wait_stopped(i);
                    self.spawn(i)?;
                    thread::sleep(Duration::from_millis(200));
                }
            }
            Action::Herd => {
                self.log(
                    "herd",
                    None,
                    "every node killed, then all restarted at once",
                );
                for i in 0..ctx.nodes {
                    self.kill(i);
                }
                for i in 0..ctx.nodes {
                    self.spawn(i)?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.signal(i, "-CONT");
            self.kill(i);
        }
    }
}

/// `host:port` of a database URL (`scheme://[user[:pw]@]host:port/db`).
fn authority(url: &str) -> Result<SocketAddr, String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("no scheme in {url}"))?;
    let host_port = rest.split('/').next().unwrap_or_default();
    let host_port = host_port.rsplit('@').next().unwrap_or_default();
    let (host, port) = host_port
        .rsplit_once(':')
        .ok_or_else(|| format!("no port in {url}"))?;
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("{url}: {e}"))
}

/// `url` with its host and port replaced by `127.0.0.1:port` (the node's proxy).
fn with_port(url: &str, port: u16) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("no scheme in {url}"))?;
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
    Ok(format!("{scheme}://{user}127.0.0.1:{port}{path}"))
}

#[derive(Clone, Copy)]
enum Mode {
    Pass,
    Drop,
    Delay(u64),
}

const DROP: u64 = u64::MAX;

/// A TCP proxy between one node and the coordinator: pass, drop everything (a partition: bytes
/// wait in the kernel buffers, as on a real cut link), or delay every chunk.
struct Proxy {
    port: u16,
    mode: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("proxy: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let proxy = Self {
            port,
            mode: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            streams: Arc::new(Mutex::new(Vec::new())),
        };
        let (mode, stop, streams) = (
            proxy.mode.clone(),
            proxy.stop.clone(),
            proxy.streams.clone(),
        );
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(_) => {
                        thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(1))
                else {
                    continue; // the coordinator is down: the client sees the connection close
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let Ok(mut s) = streams.lock() {
                    s.retain(|t: &TcpStream| t.peer_addr().is_ok());
                    for t in [&client, &server] {
                        if let Ok(t) = t.try_clone() {
                            s.push(t);
                        }
                    }
                }
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let (mode, stop) = (mode.clone(), stop.clone());
                    thread::spawn(move || pump(from, to, &mode, &stop));
                }
            }
        });
        Ok(proxy)
    }

    fn set(&self, mode: Mode) {
        let v = match mode {
            Mode::Pass => 0,
            Mode::Drop => DROP,
            Mode::Delay(ms) => ms.min(DROP - 1),
        };
        self.mode.store(v, Ordering::Relaxed);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, mode: &AtomicU64, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let m = mode.load(Ordering::Relaxed);
        if m == DROP {
            // Read nothing: the sender's bytes stay queued, as on a partitioned link.
            thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if m > 0 {
                    thread::sleep(Duration::from_millis(m));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(streams) = self.streams.lock() {
            for s in streams.iter() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// A Valkey/Redis server of this run's own, on a free port, without persistence: a restart
/// forgets every lease.
struct RedisServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    fn start(bin: PathBuf, dir: &Path) -> Result<Self, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("free port: {e}"))?
            .port();
        let mut server = Self {
            bin,
            dir: dir.join("server"),
            port,
            child: None,
        };
        fs::create_dir_all(&server.dir).map_err(|e| format!("{}: {e}", server.dir.display()))?;
        server.restart()?;
        Ok(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .map_err(|e| format!("server.log: {e}"))?;
        let child = crate::services::redis::spawn_server(&self.bin, self.port, &self.dir, log)
            .map_err(|e| format!("could not start {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < SERVER_START_TIMEOUT {
            if crate::services::redis::ping(self.port) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "{} did not answer on port {} within {SERVER_START_TIMEOUT:?}",
            self.bin.display(),
            self.port
        ))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_udp() -> Result<SocketAddr, String> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| format!("free udp port: {e}"))
}

/// Two nodes with one StatefulSet ordinal and the conflict guard on loopback: the later one
/// must stop within the bound. Returns the checker's line.
fn guard_scenario(bins: &Bins, dir: &Path) -> Result<String, String> {
    const BOUND_MS: u64 = 10_000;
    eprintln!(
        "==> chaos: duplicated StatefulSet ordinal with the conflict guard ({})",
        dir.display()
    );
    let mut cluster = Cluster {
        bin: bins.node.clone(),
        dir: dir.to_path_buf(),
        name: "guard".into(),
        nodes: Vec::new(),
        faults: fs::File::create(dir.join("faults.jsonl"))
            .map_err(|e| format!("faults.jsonl: {e}"))?,
        started: Instant::now(),
    };
    let (first, second) = (free_udp()?, free_udp()?);
    let spawn = |cluster: &mut Cluster, i: usize, bind: SocketAddr, seed: Option<SocketAddr>| {
        let stem = format!("node-{i:02}-01");
        let log = fs::File::create(dir.join(format!("{stem}.log"))).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&bins.node);
        cmd.args([
            "run",
            "--node",
            &i.to_string(),
            "--store",
            "statefulset",
            "--pod",
            "chaos-7",
        ])
        .arg("--out")
        .arg(dir.join(format!("{stem}.bin")))
        .args(["--guard-bind", &bind.to_string()]);
        if let Some(seed) = seed {
            cmd.args(["--guard-seed", &seed.to_string()]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| e.to_string())?;
        cluster.nodes.push(Node {
            url: String::new(),
            proxy: None,
            child: Some(child),
            incarnation: 1,
        });
        Ok::<_, String>(())
    };
    spawn(&mut cluster, 0, first, None)?;
    thread::sleep(Duration::from_secs(2));
    cluster.log(
        "duplicate_ordinal",
        Some(1),
        "second node with ordinal 7 starts",
    );
    spawn(&mut cluster, 1, second, Some(first))?;
    thread::sleep(Duration::from_millis(BOUND_MS + 2_000));
    for i in 0..2 {
        cluster.signal(i, "-TERM");
    }
    for i in 0..2 {
        cluster.wait_stopped(i);
    }
    drop(cluster);
    let out = Command::new(&bins.check)
        .arg(dir)
        .args(["--guard", "--bound-ms", &BOUND_MS.to_string(), "--json"])
        .arg(dir.join("report.json"))
        .output()
        .map_err(|e| format!("chaos-check: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    println!("{line}");
    if out.status.success() {
        Ok(line)
    } else {
        Err(format!(
            "{line}{}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
