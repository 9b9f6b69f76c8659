//! Node processes: spawning, signals, bounded stops, the fault log.

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::proxy::Proxies;
use super::schedule::{NODE_TIMING, NodeClocks};

const STOP_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Node {
    /// The store URL the node is given (through its proxy where there is one).
    pub url: String,
    pub child: Option<Child>,
    pub incarnation: u32,
    pub spawned: Instant,
    /// The epoch the node's factories count from (`None`: the default), kept across restarts
    /// once an `epoch` fault set it.
    pub epoch_ms: Option<u64>,
}

impl Node {
    /// A node not started yet, given the store at `url`.
    pub fn new(url: String) -> Self {
        Self {
            url,
            child: None,
            incarnation: 0,
            spawned: Instant::now(),
            epoch_ms: None,
        }
    }
}

/// The nodes of one backend run (or the guard scenario), their proxies and the fault log.
/// Every node still running is killed on drop (the proxies' process too).
pub struct Cluster {
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub name: String,
    pub nodes: Vec<Node>,
    pub clocks: Vec<NodeClocks>,
    /// The largest offset of a node's clock from the store's in this run (whole seconds):
    /// every node's `max_clock_offset`.
    pub max_clock_offset_ms: u64,
    /// Flags every node process is given: the protections the run turns off
    /// (`--without-amnesia-guard`, `--floors-in-clock-ms`, `--without-issued-record`).
    pub node_flags: Vec<&'static str>,
    /// SQL: the nodes' lease-sql URL options, for the reservation's `migrate` too.
    pub sql_options: Option<String>,
    /// The IDs the nodes share, `0..shared_ids`: one each and the spare ones; a foreign holder
    /// keeps the rest.
    pub shared_ids: usize,
    pub proxies: Option<Proxies>,
    /// Faults running in the background (steals), each bounded by its own timeout.
    pub background: Vec<thread::JoinHandle<Result<std::process::Output, String>>>,
    faults: fs::File,
    pub started: Instant,
}

impl Cluster {
    pub fn new(bin: PathBuf, dir: PathBuf, name: String) -> Result<Self, String> {
        let faults =
            fs::File::create(dir.join("faults.jsonl")).map_err(|e| format!("faults.jsonl: {e}"))?;
        Ok(Self {
            bin,
            dir,
            name,
            nodes: Vec::new(),
            clocks: Vec::new(),
            max_clock_offset_ms: 0,
            node_flags: Vec::new(),
            sql_options: None,
            shared_ids: 0,
            proxies: None,
            background: Vec::new(),
            faults,
            started: Instant::now(),
        })
    }

    fn write_log(&mut self, key: &str, name: &str, node: Option<usize>, detail: &str) {
        let t = self.started.elapsed().as_millis();
        eprintln!(
            "    chaos {t:>6} ms  {name} {}{detail}",
            node.map_or(String::new(), |n| format!("node {n} "))
        );
        // The machine's clock, which the nodes' records carry too: the checker's timeline
        // places the faults among the nodes' lease windows with it.
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let line = serde_json::json!({
            "t_ms": t, "unix_ms": unix_ms, key: name, "node": node, "detail": detail
        });
        let _ = writeln!(self.faults, "{line}");
    }

    /// Logs an injected fault (the checker counts these by name).
    pub fn log(&mut self, fault: &str, node: Option<usize>, detail: &str) {
        self.write_log("fault", fault, node, detail);
    }

    /// Logs the end of the fault `fault` on `node` (`None`: the fault on no node), begun by an
    /// earlier [`Cluster::log`]: the timeline draws the fault from one to the other.
    pub fn heal(&mut self, fault: &str, node: Option<usize>) {
        self.write_log("heal", fault, node, "healed");
    }

    /// Logs a step of a fault already counted.
    pub fn note(&mut self, event: &str, node: Option<usize>, detail: &str) {
        self.write_log("event", event, node, detail);
    }

    /// Node `i`'s next process runs on the clock offset of its current one, as a redeployment
    /// on the same machine does (other restarts come back on a planned other offset).
    pub fn keep_clock(&mut self, i: usize) {
        let incarnation = self.nodes[i].incarnation;
        if let Some(clocks) = self.clocks.get_mut(i) {
            let (offset, _) = clocks.get(incarnation);
            let next = usize::try_from(incarnation).unwrap_or(usize::MAX);
            if let Some(planned) = clocks.offsets_ms.get_mut(next) {
                *planned = offset;
            }
        }
    }

    /// Starts node `i` as a new process incarnation with its planned clock.
    pub fn spawn(&mut self, i: usize) -> Result<(), String> {
        self.spawn_with(i, &[])
    }

    pub fn spawn_with(&mut self, i: usize, extra: &[String]) -> Result<(), String> {
        let node = &mut self.nodes[i];
        node.incarnation += 1;
        let incarnation = node.incarnation;
        let stem = format!("node-{i:02}-{incarnation:02}");
        let (offset, step) = self.clocks.get(i).map_or((0, 0), |c| c.get(incarnation));
        let log = fs::File::create(self.dir.join(format!("{stem}.log")))
            .map_err(|e| format!("{stem}.log: {e}"))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(["run", "--node", &i.to_string()])
            .args(["--store", &node.url, "--name", &self.name])
            .arg("--out")
            .arg(self.dir.join(format!("{stem}.bin")))
            .args(["--clock-offset-ms", &offset.to_string()])
            .args(["--clock-step-ms", &step.to_string()])
            .args([
                "--max-clock-offset-ms",
                &self.max_clock_offset_ms.to_string(),
            ])
            .args(extra);
        cmd.args(&self.node_flags);
        if let Some(epoch) = node.epoch_ms {
            cmd.args(["--epoch-ms", &epoch.to_string()]);
        }
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
        node.spawned = Instant::now();
        if offset != 0 {
            self.log(
                "skew",
                Some(i),
                &format!("process {incarnation} runs with its clock {offset:+} ms off"),
            );
        }
        Ok(())
    }

    pub fn signal(&self, i: usize, signal: &str) {
        if let Some(child) = &self.nodes[i].child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Waits up to [`STOP_TIMEOUT`] for node `i` to exit, then kills it.
    pub fn wait_stopped(&mut self, i: usize) {
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

    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Graceful stop of every node: SIGCONT (a frozen one), SIGTERM, bounded wait.
    pub fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.signal(i, "-CONT");
            self.signal(i, "-TERM");
        }
        for i in 0..self.nodes.len() {
            self.wait_stopped(i);
        }
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
