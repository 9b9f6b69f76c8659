//! The nodes' TCP proxies: one `chaos-proxy` process (crates/nononce-chaos) per backend run,
//! holding one proxy per node, controlled over its stdin. The proxy lives in the chaos crate
//! because a reset needs `SO_LINGER` 0, which std does not offer; its tests are there too.
//!
//! Against a ZooKeeper ensemble each node has one proxy per member (a group of proxies per
//! member, each forwarding to its member), so that a fault can cut one node off from every
//! member or every node off from one member.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::Duration;

const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a proxy does with traffic (see `nononce_chaos::proxy::Mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Stall,
    Reset,
    Delay(u64),
}

impl Mode {
    fn word(self) -> String {
        match self {
            Mode::Pass => "pass".into(),
            Mode::Stall => "stall".into(),
            Mode::Reset => "reset".into(),
            Mode::Delay(ms) => format!("delay:{ms}"),
        }
    }
}

/// One proxy per node to each upstream (a group per upstream); the process is killed on drop.
/// A node's fault (its proxies in every group) and an upstream's (every proxy of its group) may
/// overlap: a proxy does what its node's fault says, or else what its group's says, so that
/// neither's end ends the other early.
pub struct Proxies {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every proxy's port: group `g`'s proxy of node `i` is at `g * nodes + i`.
    ports: Vec<u16>,
    nodes: usize,
    /// Per node, what its fault makes its proxies do (`Pass`: no fault).
    node_modes: Vec<Mode>,
    /// Per group, what its upstream's fault makes its proxies do.
    group_modes: Vec<Mode>,
    /// What each proxy was last told.
    current: Vec<Mode>,
}

impl Proxies {
    /// `nodes` proxies to each of `upstreams`.
    pub fn start(
        bin: &Path,
        upstreams: &[SocketAddr],
        nodes: usize,
        log: &Path,
    ) -> Result<Self, String> {
        let [first, others @ ..] = upstreams else {
            return Err("chaos-proxy: no upstream".into());
        };
        let count = nodes * upstreams.len();
        let upstream = *first;
        let log = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut child = Command::new(bin)
            .args([
                "--upstream",
                &upstream.to_string(),
                "--count",
                &count.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("chaos-proxy: no pipes".into());
        };
        let (tx, lines) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut proxies = Self {
            child,
            stdin,
            lines,
            ports: Vec::new(),
            nodes,
            node_modes: vec![Mode::Pass; nodes],
            group_modes: vec![Mode::Pass; upstreams.len()],
            current: vec![Mode::Pass; count],
        };
        let first = proxies.answer()?;
        proxies.ports = first
            .strip_prefix("ports ")
            .ok_or_else(|| format!("chaos-proxy said {first:?}"))?
            .split_whitespace()
            .map(|p| {
                p.parse()
                    .map_err(|e| format!("chaos-proxy port {p:?}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        if proxies.ports.len() != count {
            return Err(format!(
                "chaos-proxy listens on {} ports, not {count}",
                proxies.ports.len()
            ));
        }
        // Every proxy starts towards the first upstream: the other groups' are pointed at
        // theirs before any node connects.
        for (g, upstream) in others.iter().enumerate() {
            for i in 0..nodes {
                let index = (g + 1) * nodes + i;
                proxies.command(&format!("upstream {index} {upstream}"))?;
            }
        }
        Ok(proxies)
    }

    /// Node `i`'s proxies, one per upstream, in the upstreams' order.
    pub fn node_ports(&self, i: usize) -> Vec<u16> {
        self.ports
            .iter()
            .skip(i)
            .step_by(self.nodes)
            .copied()
            .collect()
    }

    fn answer(&self) -> Result<String, String> {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "chaos-proxy did not answer within {ANSWER_TIMEOUT:?}"
            )),
            Err(RecvTimeoutError::Disconnected) => Err("chaos-proxy exited".into()),
        }
    }

    fn command(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("chaos-proxy: {e}"))?;
        match self.answer()? {
            ok if ok == "ok" => Ok(()),
            other => Err(format!("chaos-proxy: {line}: {other}")),
        }
    }

    /// Sets the mode of node `which`'s proxies (`None`: every proxy, the upstreams' faults
    /// ended).
    pub fn set(&mut self, which: Option<usize>, mode: Mode) -> Result<(), String> {
        match which {
            Some(i) => *self.node_modes.get_mut(i).ok_or("no such node")? = mode,
            None => {
                self.node_modes.fill(mode);
                self.group_modes.fill(Mode::Pass);
            }
        }
        self.apply()
    }

    /// Sets the mode of every proxy to upstream `group` (where no node fault overrides it).
    pub fn set_group(&mut self, group: usize, mode: Mode) -> Result<(), String> {
        *self.group_modes.get_mut(group).ok_or("no such upstream")? = mode;
        self.apply()
    }

    /// Tells every proxy whose mode changed what it does now.
    fn apply(&mut self) -> Result<(), String> {
        for index in 0..self.current.len() {
            let (group, node) = (index / self.nodes, index % self.nodes);
            let mode = effective(self.node_modes[node], self.group_modes[group]);
            if self.current[index] != mode {
                self.command(&format!("mode {index} {}", mode.word()))?;
                self.current[index] = mode;
            }
        }
        Ok(())
    }

    /// Points every proxy at `upstream` (open connections are reset).
    pub fn repoint(&mut self, upstream: SocketAddr) -> Result<(), String> {
        self.command(&format!("upstream all {upstream}"))
    }
}

/// What a proxy does under its node's fault `node` and its upstream's `group`: the node's
/// fault outranks the upstream's, which applies where the node has none.
fn effective(node: Mode, group: Mode) -> Mode {
    match node {
        Mode::Pass => group,
        mode => mode,
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::{Mode, effective};

    #[test]
    fn a_node_fault_outranks_its_upstreams_and_neither_heal_ends_the_other() {
        assert_eq!(effective(Mode::Pass, Mode::Pass), Mode::Pass);
        assert_eq!(effective(Mode::Pass, Mode::Stall), Mode::Stall);
        assert_eq!(effective(Mode::Reset, Mode::Stall), Mode::Reset);
        assert_eq!(effective(Mode::Delay(300), Mode::Pass), Mode::Delay(300));
    }
}
