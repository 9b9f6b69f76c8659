//! One backend's run: nodes started through their proxies, the schedule's faults, a graceful
//! stop, then the checker over every nonce recorded.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::actions::{act, collect_steals, reserve};
use super::args::Options;
use super::bins::Bins;
use super::coordinator::{Coordinator, zookeeper_clock_offset_s, zookeeper_hold_off_s};
use super::nodes::{Cluster, Node};
use super::proxy::{Mode, Proxies};
use super::rng::Rng;
use super::schedule::{self, Action, LEASE_MS};
use super::servers;

/// Longest the checker may take over one backend's files.
const CHECK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the nodes run after the last fault was healed.
const RECOVERY_MS: u64 = 6_000;

/// What one backend's run is given.
pub struct Ctx<'a> {
    pub bins: &'a Bins,
    pub dir: &'a Path,
    pub name: &'a str,
    pub opts: &'a Options,
    pub rng: Rng,
}

/// Runs one backend: nodes, faults, stop, check. Returns the checker's JSON report.
pub fn run_backend(
    mut ctx: Ctx<'_>,
    mut coordinator: Coordinator,
) -> Result<serde_json::Value, String> {
    let (opts, dir) = (ctx.opts, ctx.dir);
    let mut cluster = Cluster::new(ctx.bins.node.clone(), dir.to_path_buf(), ctx.name.into())?;
    let log = dir.join("proxy.log");
    let upstreams = coordinator.upstreams();
    cluster.proxies = (!upstreams.is_empty())
        .then(|| Proxies::start(&ctx.bins.proxy, &upstreams, opts.nodes, &log))
        .transpose()?;
    let features = coordinator.features();
    let plan = schedule::plan(&mut ctx.rng, opts.nodes, opts.secs, opts.long, features);
    cluster.clocks = plan.clocks;
    cluster.node_flags = [
        (opts.without_amnesia_guard, "--without-amnesia-guard"),
        (opts.floors_in_clock_ms, "--floors-in-clock-ms"),
        (opts.without_issued_record, "--without-issued-record"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    cluster.shared_ids = opts.nodes + opts.spare_ids;
    if opts.within_margin {
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
    cluster.sql_options = coordinator.sql_url_options(
        opts.sql_options.as_deref(),
        cluster.max_clock_offset_ms,
        !opts.without_amnesia_guard,
    );
    let zookeeper_clock_offset_s =
        zookeeper_clock_offset_s(cluster.max_clock_offset_ms, opts.zookeeper_session_hold_off);
    for i in 0..opts.nodes {
        let ports = cluster
            .proxies
            .as_ref()
            .map(|p| p.node_ports(i))
            .unwrap_or_default();
        let url = coordinator.node_url(
            &ports,
            cluster.sql_options.as_deref(),
            zookeeper_clock_offset_s,
        );
        cluster.nodes.push(Node::new(url));
    }

    if matches!(coordinator, Coordinator::Redis(_)) {
        // The amnesia guard holds acquisitions off while the server's uptime is below the
        // longest lease and twice the clock bound: let a fresh server age first so the herd
        // start is about the herd.
        thread::sleep(Duration::from_millis(
            LEASE_MS + 2 * cluster.max_clock_offset_ms + 500,
        ));
    }
    reserve(&mut cluster, &coordinator, true)?;
    cluster.started = Instant::now();
    // Many nodes starting at once.
    cluster.log("herd", None, "all nodes start at once");
    for i in 0..opts.nodes {
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
    // SQLite's hold-off after deleted rows is its longest lease, hours by default (see
    // `coordinator.rs`): a long run is not extended for it.
    // ZooKeeper's is the nodes' session and twice their `max_clock_offset_s`.
    let hold_off = if matches!(coordinator, Coordinator::ZooKeeper(_)) {
        zookeeper_hold_off_s(zookeeper_clock_offset_s) * 1000
    } else {
        LEASE_MS + 2 * cluster.max_clock_offset_ms
    };
    let sqlite = matches!(coordinator, Coordinator::Sqlite(_));
    // The wipe, every store's loss, comes last: the short run ends within its hold-off (the
    // nodes are held off to the end); the long run goes on until IDs changed hands after it.
    let last_loss = plan
        .actions
        .iter()
        .filter(|(_, a)| {
            (forgets && matches!(a, Action::CoordinatorUp | Action::FailoverPromote))
                || (opts.long && !sqlite && matches!(a, Action::Wipe(_)))
        })
        // The server's uptime counts from its start, rounded down a second; then a retry
        // interval, and leases to hand over.
        .map(|(t, _)| t + hold_off + RECOVERY_MS + 2 * LEASE_MS)
        .max()
        .unwrap_or(0);
    let mut end = Duration::from_millis(
        (opts.secs * 1000)
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
        act(&mut cluster, action, &mut coordinator)?;
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
    let json = dir.join("report.json");
    let mut check = Command::new(&ctx.bins.check);
    check.arg(dir).arg("--json").arg(&json);
    if let Some(out) = &opts.report {
        let backend = dir.file_name().unwrap_or_default();
        check.arg("--report").arg(out).arg("--backend").arg(backend);
        check.args(["--caption", &format!("(seed {})", opts.seed)]);
    }
    let out = servers::output_within(check, "chaos-check", CHECK_TIMEOUT)?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let text = fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    // A failed check shows in the table (the caller fails the run on its figures).
    Ok(report)
}
