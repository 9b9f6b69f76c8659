//! `cargo xtask chaos [--long] [--seed N] [--backend NAME]... [--nodes N] [--secs S]
//! [--report DIR]`: runs chaos nodes (`crates/nononce-chaos`) against each coordinator while
//! injecting a seeded schedule of faults, then checks every nonce they recorded. `--report
//! DIR` has the checker draw each backend's run as a timeline, `DIR/chaos-<backend>.svg`
//! (faults.jsonl's lines carry the machine's clock, and each fault that lasts a line when it
//! is healed, for it).
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
//!   data (crash recovery), ZooKeeper every member of its ensemble, with their data; SQLite:
//!   not applicable.
//! - `member`, `leader` (ZooKeeper): one member of the three, or the one that leads at the
//!   time, is killed (`kill -9`) and restarted with its data.
//! - `member_cut`, `member_latency` (ZooKeeper): every node's proxy to one member stalls, or
//!   delays every chunk, for a while (each node has a proxy to each member).
//! - `failover` (PostgreSQL): the streaming replica stops receiving WAL, the primary is killed
//!   more than a lease later, the lagging replica is promoted and every node's proxy repointed.
//! - `rolling`: every node in turn is stopped gracefully (releasing its ID) and restarted.
//! - `epoch`: one node is restarted gracefully with its factories on an epoch 2-5 s earlier or
//!   later than the default, kept by its later processes; `--floors-in-clock-ms` makes the
//!   nodes take floors as clock ms, as before floors knew the epoch.
//! - `rebuild`: SIGUSR2, after each clock step, to the stepped node: it drops its lease
//!   manager without release and resumes the lease from the cache with a new manager and new
//!   factories; `--without-issued-record` leaves the cache's record of what was issued out.
//! - `wipe`: the store loses the run's lease data while the server stays up (`DEL` of the hash
//!   or `FLUSHALL`; `DELETE` or `TRUNCATE` of the table; a delete of the etcd prefix; a
//!   `deleteall` of the ZooKeeper root), markers
//!   included, never initialized again; the last fault of every run. The nodes' guards must
//!   hold acquisitions off (to the end of a short run); `--without-amnesia-guard` turns the
//!   Valkey/Redis and SQL guards off to show what they prevent.
//!
//! Every wait is bounded, every child (nodes, servers, proxies) is stopped on drop, and
//! everything listens on loopback only.

mod actions;
mod args;
mod bins;
mod coordinator;
mod guard;
mod nodes;
mod proxy;
mod rng;
mod run;
mod schedule;
mod servers;

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use args::Backend;
pub use bins::Bins;
use coordinator::Coordinator;
use rng::Rng;
use run::{Ctx, run_backend};
use servers::{EtcdServer, Mariadb, Postgres, ZooKeeperEnsemble, start_redis};

/// Runs the chaos harness; `Err` when a check failed or the harness could not run.
pub fn run(args: &[String]) -> Result<(), String> {
    let opts = args::parse(args)?;
    let root = crate::workspace::root();
    // First: it installs protoc, which building the nodes' etcd client needs.
    let services = crate::services::start()?;
    eprintln!("==> chaos: building nononce-chaos");
    let status = crate::workspace::cargo()
        .args(["build", "-p", "nononce-chaos", "--bins"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building nononce-chaos failed ({status})"));
    }
    let bins = Bins::in_dir(&crate::workspace::target_dir().join("debug"));
    run_with(&opts, &services.env, &bins)
}

/// The short seeded run of `cargo xtask test`, with its servers and binaries: every backend
/// at once, 0 duplicates and 0 out-of-window nonces. Stores that can lose writes (Valkey/Redis
/// restarted empty, the PostgreSQL failover) hold acquisitions off for the lease and twice the
/// run's clock bound, and a run lasts until IDs changed hands after that: with every skew (a
/// 31 s bound) these three take about 450 s instead of about 150 s, so here their clocks stay
/// within the margin (a 2 s bound); the others run with every skew (ZooKeeper's ensemble with
/// them: its run of about 40 s ends well before the others' 150 s). docs/reliability.md has
/// the every-skew run of the same seed (`cargo xtask chaos --seed 1 --backend
/// valkey9,redis8,postgres`). The guard scenario runs once.
pub fn suite(env: &[(String, String)], bins: &Bins) -> Result<(), String> {
    let parse = |line: &str| {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        args::parse(&words)
    };
    let every_skew = parse("--seed 1 --backend sqlite,mariadb,etcd,zookeeper")?;
    let within_margin =
        parse("--seed 1 --within-margin --no-guard --backend valkey9,redis8,postgres")?;
    std::thread::scope(|scope| {
        let other = scope.spawn(|| run_with(&within_margin, env, bins));
        let first = run_with(&every_skew, env, bins);
        let other = other
            .join()
            .map_err(|_| "the chaos run panicked".to_owned())?;
        first.and(other)
    })
}

/// Runs every backend of `opts` at once (each with its own servers, proxies and nodes), then
/// the guard scenario; `env` has the test servers' variables.
fn run_with(opts: &args::Options, env: &[(String, String)], bins: &Bins) -> Result<(), String> {
    let root = crate::workspace::root();
    // A server's program, from the variable `var` (the test servers' first, then ours).
    let bin = |var: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == var)
            .map(|(_, v)| PathBuf::from(v))
            .or_else(|| std::env::var_os(var).map(PathBuf::from))
            .ok_or_else(|| format!("{var} is not set"))
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
    let one = |i: usize, backend: Backend| -> Result<serde_json::Value, String> {
        let dir = run_dir.join(backend.name());
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = format!("chaos_{}_{}_{stamp}", backend.name(), opts.seed);
        let ctx = Ctx {
            bins,
            dir: &dir,
            name: &name,
            opts,
            rng: Rng::new(opts.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        };
        eprintln!("==> chaos: {} ({})", backend.name(), dir.display());
        let coordinator = match backend {
            Backend::Sqlite => Ok(Coordinator::Sqlite(format!(
                "sqlite:{}",
                dir.join("leases.db").display()
            ))),
            Backend::Postgres => {
                Postgres::start(&dir).map(|pg| Coordinator::Postgres(Box::new(pg)))
            }
            Backend::Mariadb => Mariadb::start(&dir).map(Coordinator::Mariadb),
            Backend::Valkey => bin("NONONCE_TEST_VALKEY_BIN")
                .and_then(|bin| start_redis(bin, &dir))
                .map(Coordinator::Redis),
            Backend::Redis8 => bin("NONONCE_TEST_REDIS8_BIN")
                .and_then(|bin| start_redis(bin, &dir))
                .map(Coordinator::Redis),
            Backend::Etcd => bin("NONONCE_TEST_ETCD_BIN")
                .and_then(|bin| EtcdServer::start(bin, &dir))
                .map(Coordinator::Etcd),
            Backend::ZooKeeper => {
                let java = bin(crate::services::zookeeper::JAVA_VAR)?;
                let classpath = bin(crate::services::zookeeper::CLASSPATH_VAR)?;
                // The run's scratch folder (in memory where the machine has one), as the
                // tests' own ZooKeeper servers use.
                let scratch = bin("TMPDIR").unwrap_or_else(|_| std::env::temp_dir());
                ZooKeeperEnsemble::start(
                    &java,
                    &classpath.to_string_lossy(),
                    &scratch,
                    &dir,
                    format!("/{name}"),
                )
                .map(Coordinator::ZooKeeper)
            }
        };
        coordinator.and_then(|c| run_backend(ctx, c))
    };
    // Each backend's run mostly waits (on faults, leases, servers): they run at once, each on
    // its own servers, ports and files.
    let (results, guard) = std::thread::scope(|scope| {
        let runs: Vec<_> = opts
            .backends
            .iter()
            .enumerate()
            .map(|(i, &backend)| {
                let one = &one;
                scope.spawn(move || {
                    let started = Instant::now();
                    let result = one(i, backend);
                    if let Err(e) = &result {
                        eprintln!("<== chaos: {}: {e}", backend.name());
                    }
                    (backend, result, started.elapsed())
                })
            })
            .collect();
        let guard = opts.guard.then(|| {
            let dir = run_dir.join("guard");
            fs::create_dir_all(&dir)
                .map_err(|e| format!("{}: {e}", dir.display()))
                .and_then(|()| guard::scenario(bins, &dir))
        });
        let results: Vec<(Backend, Result<serde_json::Value, String>, Duration)> = runs
            .into_iter()
            .zip(&opts.backends)
            .map(|(run, &backend)| {
                run.join().unwrap_or_else(|_| {
                    (backend, Err("its run panicked".to_owned()), Duration::ZERO)
                })
            })
            .collect();
        (results, guard)
    });

    println!();
    // Headers as wide as the columns of the rows below.
    println!(
        "backend      nonces duplicates out-of-window handovers windows overlaps   time result  faults"
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
                // The error in the run's result too: the step table, printed last, shows it
                // when the log above it is cut.
                failed.push(format!("{} ({e})", backend.name()));
                println!("{:<9} error: {e}", backend.name());
            }
        }
    }
    match guard {
        Some(Ok(line)) => println!("guard     {line}"),
        Some(Err(e)) => {
            failed.push(format!("guard ({e})"));
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
