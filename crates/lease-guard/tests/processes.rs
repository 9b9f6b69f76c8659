//! Several OS processes on loopback, two of them with the same StatefulSet ordinal.
//!
//! This binary is its own child: run with `GUARD_NODE_POD_NAME` set it is one node (a static
//! StatefulSet strategy under a lease manager, a factory, and a conflict guard wired to the
//! manager the way the facade does it); without it, it starts three such nodes and checks them.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use lease_guard::{Announce, ConflictGuard, GuardConfig, PeerOutcome, Resolution};
use lease_manager::{LeaseConfig, LeaseManager, LeaseState};
use lease_static::StatefulSetStrategy;
use nonce_core::{BootClock, Factory, FactoryConfig};

/// No wait lasts longer, so a failure cannot hang the suite.
const WAIT: Duration = Duration::from_secs(10);
/// A child ends by itself after this, even if its parent vanished without closing stdin.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

fn main() {
    if let Ok(pod) = std::env::var("GUARD_NODE_POD_NAME") {
        child(&pod);
        return;
    }
    // The runners' questions in libtest's words (this binary has no harness of its own): the
    // list of its one test, and a run filtered to other names runs nothing.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("processes: test");
        }
        return;
    }
    let exact = args.iter().any(|a| a == "--exact");
    let selects = |f: &String| f == "processes" || (!exact && "processes".contains(f.as_str()));
    let mut filters = args.iter().filter(|a| !a.starts_with('-')).peekable();
    if filters.peek().is_some() && !filters.any(selects) {
        println!(
            "\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.00s\n"
        );
        return;
    }
    // A log read for "test result:" lines counts this test like the others; a failure panics
    // before.
    println!("\nrunning 1 test");
    let started = Instant::now();
    parent();
    println!("test processes ... ok");
    println!(
        "\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------- the node

fn child(pod: &str) {
    let seeds = std::env::var("GUARD_NODE_SEEDS").unwrap_or_default();
    let seeds: Vec<_> = seeds
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("seed address"))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let strategy = StatefulSetStrategy::from_value("POD_NAME", pod, 0).unwrap();
        let clock = BootClock::new();
        let factory = Arc::new(Factory::new(clock, FactoryConfig::new()).unwrap());
        // A static strategy grants its first lease a margin after it is asked (nothing tells it
        // when a predecessor with its ordinal stopped): a short margin keeps start-up quick.
        let config = LeaseConfig::default().with_margin(Duration::from_millis(200));
        let manager = LeaseManager::builder(strategy)
            .with_config(config)
            .with_clock(clock)
            .with_target(factory.clone())
            .start()
            .await
            .unwrap();

        // The facade's wiring: a conflict signals lease loss to the manager, and the guard
        // announces whatever ID the manager holds.
        let (lost, mut conflicts) = tokio::sync::mpsc::unbounded_channel();
        let config = GuardConfig::new("127.0.0.1:0".parse().unwrap())
            .with_seeds(seeds)
            .with_answer_timeout(Duration::from_millis(100))
            .with_rejoin_interval(Duration::from_millis(200));
        let guard = ConflictGuard::start(config, Announce::new(manager.machine_id()), move |c| {
            let _ = lost.send(c);
        })
        .await
        .unwrap();
        guard.follow(manager.watch_state());
        let mut checks = guard.subscribe();

        // Commands from the parent, one per line; end of input means stop.
        let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin().lines();
            stdin.map_while(Result::ok).try_for_each(|l| lines_tx.send(l))
        });

        say(&format!("READY {}", guard.local_addr()));
        let (mut local, mut remote, mut matches) = (0, 0, 0);
        let stop = tokio::time::sleep(CHILD_LIFETIME);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                Some(conflict) = conflicts.recv() => {
                    manager.lease_lost(conflict.to_string());
                    say(&format!("CONFLICT {}", conflict.remote_addr));
                }
                Ok(check) = checks.recv() => match check.outcome {
                    PeerOutcome::Conflict(Resolution::Local) => local += 1,
                    PeerOutcome::Conflict(Resolution::Remote) => remote += 1,
                    PeerOutcome::Match => matches += 1,
                    PeerOutcome::NoLocalId => {}
                },
                line = lines.recv() => match line.as_deref() {
                    Some("status") => say(&format!(
                        "STATUS generates={} halted={} local={local} remote={remote} matches={matches}",
                        factory.counter64().is_ok(),
                        manager.state() == LeaseState::Halted,
                    )),
                    Some(_) => {}
                    None => break,
                },
                () = &mut stop => break,
            }
        }
        guard.shutdown().await;
        manager.shutdown().await;
    });
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

// ---------------------------------------------------------------- the harness

struct Node {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    addr: String,
}

impl Node {
    fn spawn(name: &'static str, pod: &str, seeds: &[&Node]) -> Self {
        let seeds: Vec<&str> = seeds.iter().map(|n| n.addr.as_str()).collect();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("GUARD_NODE_POD_NAME", pod)
            .env("GUARD_NODE_SEEDS", seeds.join(","))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(stdout).lines();
        std::thread::spawn(move || stdout.map_while(Result::ok).try_for_each(|l| tx.send(l)));
        let mut node = Self {
            name,
            child,
            stdin,
            lines,
            addr: String::new(),
        };
        node.addr = node.expect("READY ");
        node
    }

    /// The rest of the next line starting with `prefix`, skipping others.
    fn expect(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "{}: no line starting with {prefix:?} within {WAIT:?}",
                    self.name
                )
            });
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    fn status(&mut self) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "status").unwrap();
        stdin.flush().unwrap();
        self.expect("STATUS ")
    }

    /// Polls the status until `done` holds; the last status is returned.
    fn until(&mut self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{}: timed out waiting for {what}; last status: {status}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Closes stdin and waits for a clean exit.
    fn stop(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{}: exited with {status}", self.name);
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{}: did not stop within {WAIT:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // After a failure: never leave a child behind.
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .split(' ')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {status:?}"))
}

fn count(status: &str, name: &str) -> u32 {
    field(status, name).parse().unwrap()
}

/// The status of the node that yielded its ID: halted, not generating, one conflict resolved
/// against itself.
const YIELDED: &str = "generates=false halted=true local=1 ";
/// The status of a node that kept its ID and never yielded.
const KEPT: &str = "generates=true halted=false local=0 ";

fn parent() {
    // The original pod 7, then a replacement for it started while the original still runs
    // (a force-deleted pod), joining through an unrelated pod 3.
    let mut original = Node::spawn("nonce-worker-7 (original)", "nonce-worker-7", &[]);
    let mut other = Node::spawn("nonce-worker-3", "nonce-worker-3", &[&original]);
    other.until("a check of the original", |s| count(s, "matches") >= 1);
    let mut duplicate = Node::spawn("nonce-worker-7 (replacement)", "nonce-worker-7", &[&other]);

    assert_eq!(duplicate.expect("CONFLICT "), original.addr);
    let status = duplicate.until("the lease manager to halt", |s| {
        field(s, "halted") == "true"
    });
    assert!(status.starts_with(YIELDED), "{status}");

    let status = original.until("the original to see the conflict", |s| {
        count(s, "remote") >= 1
    });
    assert!(status.starts_with(KEPT), "{status}");

    let status = other.until("pod 3 to check both", |s| count(s, "matches") >= 2);
    assert!(status.starts_with(&format!("{KEPT}remote=0 ")), "{status}");

    // Only the replacement ever yielded.
    let status = original.status();
    assert!(status.starts_with(KEPT), "{status}");

    for node in [duplicate, other, original] {
        node.stop();
    }
}
