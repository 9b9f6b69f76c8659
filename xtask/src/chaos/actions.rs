//! The schedule's actions on the cluster, the proxies and the coordinator, and the direct
//! writes to the store (`chaos-node reserve`, `steal` and `wipe`).

use std::process::Command;
use std::thread;
use std::time::Duration;

use super::coordinator::Coordinator;
use super::nodes::Cluster;
use super::proxy::Mode;
use super::schedule::{Action, LEASE_MS};
use super::servers::{self, loopback};
use crate::services::zookeeper;

/// Longest a `chaos-node steal` may take (it bounds its own work to 10 s).
const STEAL_TIMEOUT: Duration = Duration::from_secs(20);
/// IDs the nodes share beyond one each: the rest of the 512 are held by a foreign holder, so
/// IDs pass between nodes (and their clocks) all the time.
pub const SPARE_IDS: usize = 4;
/// How long the reservation of the other IDs lasts.
const RESERVE_MS: u64 = 3_600_000;
/// A node just started has not yet installed its SIGUSR1 and SIGUSR2 handlers: wait this long
/// first.
const SIGNAL_READY: Duration = Duration::from_millis(1500);
/// How long the leader's kill waits for the ensemble to have a leader (after an earlier fault it
/// may still be electing one).
const LEADER_WAIT: Duration = Duration::from_secs(10);
/// `nonce_core::DEFAULT_EPOCH_MS`, the epoch the nodes' factories count from unless an `epoch`
/// fault moved it (xtask depends on no workspace crate).
const DEFAULT_EPOCH_MS: u64 = 1_735_689_600_000;

/// The epoch `shift_ms` from the default one.
fn shifted_epoch(shift_ms: i64) -> u64 {
    DEFAULT_EPOCH_MS.saturating_add_signed(shift_ms)
}

/// Waits until node `i` has had time to install its signal handlers.
fn signal_ready(cluster: &Cluster, i: usize) {
    thread::sleep(SIGNAL_READY.saturating_sub(cluster.nodes[i].spawned.elapsed()));
}

/// Logs the steals that finished (all of them with `wait`: each is bounded by its timeout).
pub fn collect_steals(cluster: &mut Cluster, wait: bool) {
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

/// Leaves only the IDs the nodes share (`0..shared_ids`) to them (`chaos-node reserve`),
/// initializing the store first when `initialize` (a store no node has used yet).
pub fn reserve(
    cluster: &mut Cluster,
    coordinator: &Coordinator,
    initialize: bool,
) -> Result<(), String> {
    let keep = cluster.shared_ids;
    let mut cmd = store_command(cluster, "reserve", coordinator);
    let (keep_arg, ttl) = (keep.to_string(), RESERVE_MS.to_string());
    cmd.args(["--keep", &keep_arg, "--ttl-ms", &ttl]);
    if initialize {
        cmd.arg("--initialize");
    }
    if let Some(options) = &cluster.sql_options {
        cmd.args(["--sql-options", options]);
    }
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

/// `chaos-node <verb>` on the run's store, as an operator's direct connection.
fn store_command(cluster: &Cluster, verb: &str, coordinator: &Coordinator) -> Command {
    let (mut cmd, url) = (Command::new(&cluster.bin), coordinator.direct_url());
    cmd.args([verb, "--store", &url, "--name", &cluster.name]);
    cmd
}

/// The `chaos-node wipe` command: `wide` picks `FLUSHALL` over `DEL` of the hash and `TRUNCATE`
/// over `DELETE` (SQLite and etcd have one form each).
fn wipe_command(cluster: &Cluster, coordinator: &Coordinator, wide: bool) -> Command {
    let mut cmd = store_command(cluster, "wipe", coordinator);
    if wide {
        cmd.arg("--all");
    }
    cmd
}

/// The store loses the run's lease data while the server stays up, its initialization
/// marker with it; never initialized again. The reservation of the IDs beyond the nodes' share
/// is written again (it went too), without `--initialize`: the nodes keep sharing a few IDs,
/// so with the guard off one that takes an ID after the wipe likely takes one that a running
/// node still generates with.
fn wipe(cluster: &mut Cluster, coordinator: &Coordinator, wide: bool) -> Result<(), String> {
    let cmd = wipe_command(cluster, coordinator, wide);
    let out = servers::output_within(cmd, "wipe", STEAL_TIMEOUT)?;
    if !out.status.success() {
        // Not a harness failure: the store may not answer; the run goes on without the loss.
        cluster.note(
            "wipe_failed",
            None,
            String::from_utf8_lossy(&out.stderr).trim(),
        );
        return Ok(());
    }
    let what = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    cluster.log(
        "wipe",
        None,
        &format!("the store lost the run's lease data, its marker too, while up ({what})"),
    );
    reserve(cluster, coordinator, false)
}

/// Node `i`'s proxy in `mode`, logged as the fault `fault`; `None`: passing traffic again.
fn set_proxy(
    cluster: &mut Cluster,
    i: usize,
    mode: Option<Mode>,
    fault: &str,
    detail: &str,
) -> Result<(), String> {
    let on = mode.is_some();
    if let Some(p) = &mut cluster.proxies {
        p.set(Some(i), mode.unwrap_or(Mode::Pass))?;
    }
    if on {
        cluster.log(fault, Some(i), detail);
    } else {
        cluster.heal(fault, Some(i));
    }
    Ok(())
}

#[allow(clippy::too_many_lines)] // one match over every action
pub fn act(
    cluster: &mut Cluster,
    action: Action,
    coordinator: &mut Coordinator,
) -> Result<(), String> {
    match action {
        Action::Partition(i, on) => {
            let detail = "proxy stalls all traffic both ways";
            set_proxy(cluster, i, on.then_some(Mode::Stall), "partition", detail)?;
        }
        Action::Reset(i, on) => {
            let detail = "proxy resets every connection (RST), new ones too, until healed";
            set_proxy(cluster, i, on.then_some(Mode::Reset), "reset", detail)?;
        }
        Action::Latency(i, ms) => {
            let detail = format!("{ms} ms per chunk");
            set_proxy(
                cluster,
                i,
                (ms > 0).then_some(Mode::Delay(ms)),
                "latency",
                &detail,
            )?;
        }
        Action::Freeze(i) => {
            cluster.signal(i, "-STOP");
            cluster.log("freeze", Some(i), "SIGSTOP longer than the lease");
        }
        Action::Thaw(i) => {
            cluster.signal(i, "-CONT");
            cluster.heal("freeze", Some(i));
        }
        Action::Kill(i) => {
            cluster.kill(i);
            cluster.log("kill9", Some(i), "SIGKILL");
        }
        Action::Restart(i) => {
            if cluster.nodes[i].child.is_none() {
                cluster.spawn(i)?;
                cluster.heal("kill9", Some(i));
            }
        }
        Action::ClockStep(i) => {
            if cluster.nodes[i].child.is_none() {
                cluster.note("clock_step_skipped", Some(i), "node not running");
                return Ok(());
            }
            signal_ready(cluster, i);
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
            let mut cmd = store_command(cluster, "steal", coordinator);
            cmd.args(["--ttl-ms", &LEASE_MS.to_string()]);
            cluster.background.push(thread::spawn(move || {
                servers::output_within(cmd, "steal", STEAL_TIMEOUT)
            }));
        }
        Action::Wipe(wide) => wipe(cluster, coordinator, wide)?,
        Action::Epoch(i, shift) => {
            // A graceful restart (the lease released) with the factories on another epoch,
            // as a redeployment with a changed setting on the same machine: the new process
            // keeps the machine's clock, and the node's later processes keep the epoch.
            cluster.signal(i, "-CONT");
            cluster.signal(i, "-TERM");
            cluster.wait_stopped(i);
            let epoch = shifted_epoch(shift);
            cluster.nodes[i].epoch_ms = Some(epoch);
            cluster.keep_clock(i);
            cluster.spawn(i)?;
            cluster.log(
                "epoch",
                Some(i),
                &format!(
                    "restarted gracefully with its factories on epoch {epoch} ({shift:+} ms from the default)"
                ),
            );
        }
        Action::Rebuild(i) => {
            if cluster.nodes[i].child.is_none() {
                cluster.note("rebuild_skipped", Some(i), "node not running");
                return Ok(());
            }
            signal_ready(cluster, i);
            cluster.signal(i, "-USR2");
            cluster.log(
                "rebuild",
                Some(i),
                "SIGUSR2: the lease manager dropped without release, a new one with new factories resumes the lease from its cache",
            );
        }
        Action::MemberDown(m) => {
            if let Coordinator::ZooKeeper(z) = coordinator {
                let port = z.members[m].port();
                let mode = zookeeper::mode(port).unwrap_or_else(|| "not serving".into());
                z.members[m].kill();
                cluster.log(
                    "member",
                    None,
                    &format!(
                        "member {} ({mode}, port {port}) killed (kill -9; restarts with its data)",
                        m + 1
                    ),
                );
            }
        }
        Action::LeaderDown => {
            if let Coordinator::ZooKeeper(z) = coordinator {
                let Some(leader) = z.wait_leader(LEADER_WAIT) else {
                    cluster.note(
                        "leader_skipped",
                        None,
                        &format!("no member was the leader within {LEADER_WAIT:?}"),
                    );
                    return Ok(());
                };
                let port = z.members[leader].port();
                z.members[leader].kill();
                cluster.log(
                    "leader",
                    None,
                    &format!(
                        "the leader, member {} (port {port}), killed (kill -9; the others elect a new one; restarts with its data)",
                        leader + 1
                    ),
                );
            }
        }
        Action::MemberCut(m, on) => {
            if let Some(p) = &mut cluster.proxies {
                p.set_group(m, if on { Mode::Stall } else { Mode::Pass })?;
            }
            if on {
                let detail = format!(
                    "every node's proxy to member {} stalls all traffic both ways",
                    m + 1
                );
                cluster.log("member_cut", None, &detail);
            } else {
                cluster.heal("member_cut", None);
            }
        }
        Action::MemberLatency(m, ms) => {
            if let Some(p) = &mut cluster.proxies {
                let mode = if ms > 0 { Mode::Delay(ms) } else { Mode::Pass };
                p.set_group(m, mode)?;
            }
            if ms > 0 {
                let detail = format!(
                    "every node's proxy to member {} delays each chunk by {ms} ms",
                    m + 1
                );
                cluster.log("member_latency", None, &detail);
            } else {
                cluster.heal("member_latency", None);
            }
        }
        Action::CoordinatorDown => {
            let detail = coordinator.kill();
            cluster.log("coordinator", None, detail);
        }
        Action::CoordinatorUp => {
            coordinator.restart()?;
            cluster.note("coordinator_up", None, "server answers again");
            // Whichever was down: the whole coordinator, one member or the leader.
            for fault in ["coordinator", "member", "leader"] {
                cluster.heal(fault, None);
            }
            if matches!(coordinator, Coordinator::Redis(_)) {
                // It came back empty: the foreign holder's IDs too. Not initialized again: the
                // nodes' guard must find the loss.
                reserve(cluster, coordinator, false)?;
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
                let upstream = loopback(pg.primary.port());
                if let Some(p) = &mut cluster.proxies {
                    p.repoint(upstream)?;
                }
                cluster.heal("failover", None);
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
            for i in 0..cluster.nodes.len() {
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
            for i in 0..cluster.nodes.len() {
                cluster.kill(i);
            }
            for i in 0..cluster.nodes.len() {
                cluster.spawn(i)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &std::process::Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_wipe_goes_to_the_store_directly_in_the_planned_form() {
        let dir = std::env::temp_dir().join(format!("xtask-chaos-wipe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = "chaos_sqlite_1_2".to_owned();
        let cluster = Cluster::new("chaos-node".into(), dir.clone(), name).unwrap();
        let store = Coordinator::Sqlite("sqlite:leases.db".into());
        let narrow = wipe_command(&cluster, &store, false);
        let wide = wipe_command(&cluster, &store, true);
        drop(cluster);
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(
            args(&narrow),
            [
                "wipe",
                "--store",
                "sqlite:leases.db",
                "--name",
                "chaos_sqlite_1_2"
            ]
        );
        assert_eq!(args(&wide).last().map(String::as_str), Some("--all"));
        // Never an initialization: the wipe command has no such flag to pass.
        assert!(!args(&wide).iter().any(|a| a == "--initialize"));
    }

    #[test]
    fn an_epoch_shift_moves_the_default_epoch_both_ways() {
        assert_eq!(shifted_epoch(0), DEFAULT_EPOCH_MS);
        assert_eq!(shifted_epoch(5_000), 1_735_689_605_000);
        assert_eq!(shifted_epoch(-2_500), 1_735_689_597_500);
    }
}
