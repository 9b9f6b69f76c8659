//! The nodes' TCP proxies: one `chaos-proxy` process (crates/nononce-chaos) per backend run,
//! holding one proxy per node, controlled over its stdin. The proxy lives in the chaos crate
//! because a reset needs `SO_LINGER` 0, which std does not offer; its tests are there too.

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

/// `count` proxies to one upstream; the process is killed on drop.
pub struct Proxies {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    pub ports: Vec<u16>,
}

impl Proxies {
    pub fn start(
        bin: &Path,
        upstream: SocketAddr,
        count: usize,
        log: &Path,
    ) -> Result<Self, String> {
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
        Ok(proxies)
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

    /// Sets the mode of proxy `which` (`None`: every proxy).
    pub fn set(&mut self, which: Option<usize>, mode: Mode) -> Result<(), String> {
        let target = which.map_or_else(|| "all".to_owned(), |i| i.to_string());
        self.command(&format!("mode {target} {}", mode.word()))
    }

    /// Points every proxy at `upstream` (open connections are reset).
    pub fn repoint(&mut self, upstream: SocketAddr) -> Result<(), String> {
        self.command(&format!("upstream all {upstream}"))
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
