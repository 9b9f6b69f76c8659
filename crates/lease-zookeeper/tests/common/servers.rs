//! ZooKeeper servers: the shared test server's address, and servers of a test's own (a
//! standalone server or an ensemble on free loopback ports, its data in a temporary folder),
//! killed with `kill -9`, restarted and wiped member by member.
//!
//! `cargo xtask with-services` (and `cargo xtask test`) installs ZooKeeper, starts the shared
//! server and names it, the server's classpath and `java` (`NONONCE_TEST_ZOOKEEPER`,
//! `NONONCE_TEST_ZOOKEEPER_CLASSPATH`, `NONONCE_TEST_ZOOKEEPER_JAVA`). Each member runs as
//! `java -cp CLASSPATH QuorumPeerMain zoo.cfg`, a child of the test: no wrapper script stands
//! between the test and the JVM, so a kill is the server's crash.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const CLASSPATH_VAR: &str = "NONONCE_TEST_ZOOKEEPER_CLASSPATH";
const JAVA_VAR: &str = "NONONCE_TEST_ZOOKEEPER_JAVA";
/// The server's entry point, for a standalone server and an ensemble member alike.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// How long a member may take to serve after its start: a JVM starts in under a second, but on
/// a loaded 2-core machine beside other tests' servers it may take several.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a member may take to answer `srvr`: a server answers in milliseconds, a JVM
/// stalled on a loaded machine in more.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a member may take to answer `srvr` while a test waits for it to serve: a question
/// sent while it starts was at times never answered (2 s of a restart lost waiting for it), and
/// a new question costs nothing.
const POLL_TIMEOUT: Duration = Duration::from_millis(250);
/// How many lines of each member's log a failing test prints.
const LOG_TAIL: usize = 40;
/// The JVM's options: a small heap (a test's server holds little), the client compiler only
/// (a short-lived server starts and warms up faster on less CPU), no performance-data file in
/// the system's temporary folder, and the simple logger's messages with their time.
const JVM_OPTIONS: [&str; 7] = [
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
];

/// The shared test server's connect string (`cargo xtask with-services` starts it).
pub fn shared() -> String {
    std::env::var("NONONCE_TEST_ZOOKEEPER").unwrap_or_else(|_| "127.0.0.1:2397".to_owned())
}

/// What a serving member reports itself as (`srvr`'s `Mode:` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A server without an ensemble.
    Standalone,
    /// The ensemble's leader: every write goes through it.
    Leader,
    /// A member synced with the leader, serving reads and forwarding writes.
    Follower,
}

/// One member: its ports, its folder (`zoo.cfg`, `data/`, `server.log`) and its JVM while it
/// runs.
struct Member {
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Member {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

/// ZooKeeper servers of a test's own: one standalone server, or an ensemble of several
/// members, on free loopback ports, with their data in a folder under the temporary folder.
/// Every member is killed and the folder removed on drop.
pub struct OwnEnsemble {
    members: Vec<Member>,
    root: PathBuf,
    java: PathBuf,
    classpath: String,
}

impl OwnEnsemble {
    /// Starts `size` servers (1: standalone; 3: an ensemble) with a tick of `tick` (whole
    /// milliseconds), granting sessions of 2 to 20 ticks (the server's defaults); returns once
    /// every member serves clients, so an ensemble has elected its leader and its followers
    /// have synced with it.
    pub fn start(size: usize, tick: Duration) -> Self {
        Self::start_with_sessions(size, tick, tick * 2, tick * 20)
    }

    /// [`OwnEnsemble::start`], granting sessions of `min_session` to `max_session` (a client
    /// asking for another timeout is given the nearest of the two).
    pub fn start_with_sessions(
        size: usize,
        tick: Duration,
        min_session: Duration,
        max_session: Duration,
    ) -> Self {
        assert!(size >= 1, "an ensemble needs at least one member");
        assert!(
            tick.as_millis() >= 1 && tick.subsec_nanos().is_multiple_of(1_000_000),
            "ZooKeeper's tick is a whole number of milliseconds, not {tick:?}"
        );
        let root = std::env::temp_dir().join(format!("nononce-zk-{:016x}", rand::random::<u64>()));
        let port = || lease_testkit::ports::server_port().expect("a free loopback port");
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                client_port: port(),
                // A standalone server opens no quorum or election port.
                quorum_port: if size > 1 { port() } else { 0 },
                election_port: if size > 1 { port() } else { 0 },
                dir: root.join(format!("m{i}")),
                child: None,
            })
            .collect();
        let mut ensemble = Self {
            members,
            root,
            java: java(),
            classpath: classpath(),
        };
        for i in 0..size {
            let config = ensemble.config(i, tick, min_session, max_session);
            let member = &ensemble.members[i];
            fs::create_dir_all(member.data()).expect("a member's data folder");
            fs::write(member.dir.join("zoo.cfg"), config).expect("a member's zoo.cfg");
            ensemble.write_myid(i);
        }
        (0..size).for_each(|i| ensemble.spawn(i));
        (0..size).for_each(|i| ensemble.wait_serving(i));
        ensemble
    }

    /// `127.0.0.1:PORT,...`: every member's client address, for a client of the whole ensemble.
    pub fn connect_string(&self) -> String {
        let addresses: Vec<String> = (0..self.members.len()).map(|i| self.address(i)).collect();
        addresses.join(",")
    }

    /// Member `i`'s client address, for a client of that member alone.
    pub fn address(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// What member `i` serves as, `None` when it is down or serves no clients (a member
    /// without a quorum, or one still starting or syncing).
    pub fn mode(&self, i: usize) -> Option<Mode> {
        self.mode_within(i, ANSWER_TIMEOUT)
    }

    /// The member writes go through: the ensemble's leader, or the standalone server; `None`
    /// while no member is one (an election under way, a quorum lost).
    pub fn leader(&self) -> Option<usize> {
        self.leader_within(ANSWER_TIMEOUT)
    }

    /// [`OwnEnsemble::mode`], waiting `timeout` for the answer.
    fn mode_within(&self, i: usize, timeout: Duration) -> Option<Mode> {
        let member = &self.members[i];
        member.child.as_ref()?;
        let reply = four_letter_word(member.client_port, "srvr", timeout)?;
        let mode = reply.lines().find_map(|line| line.strip_prefix("Mode: "))?;
        match mode.trim() {
            "standalone" => Some(Mode::Standalone),
            "leader" => Some(Mode::Leader),
            "follower" => Some(Mode::Follower),
            _ => None,
        }
    }

    /// [`OwnEnsemble::leader`], waiting `timeout` for each member's answer.
    fn leader_within(&self, timeout: Duration) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            matches!(
                self.mode_within(i, timeout),
                Some(Mode::Leader | Mode::Standalone)
            )
        })
    }

    /// Waits until a member is [`OwnEnsemble::leader`] (after the leader's kill: until the
    /// others elected one), and returns it.
    pub fn wait_leader(&self) -> usize {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader_within(POLL_TIMEOUT) {
                return leader;
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "no ZooKeeper member became leader within {} s\n{}",
                START_TIMEOUT.as_secs(),
                self.log_tails()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills member `i` (`SIGKILL`: a crash) and waits until it exited; its data stays.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data and ports (killing it first if it runs), and waits
    /// until it serves: an ensemble's member has joined the leader and synced with it.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_serving(i);
    }

    /// Kills every member (a crash of the whole ensemble), starts them all again on their data,
    /// and waits until each serves: an ensemble serves only once a quorum is back.
    pub fn restart_all(&mut self) {
        (0..self.members.len()).for_each(|i| self.kill(i));
        (0..self.members.len()).for_each(|i| self.spawn(i));
        (0..self.members.len()).for_each(|i| self.wait_serving(i));
    }

    /// Kills member `i`, deletes its data and starts it again on the same ports: a standalone
    /// server that forgot everything, or an ensemble member that must copy everything from the
    /// leader before it serves.
    pub fn wipe_and_restart(&mut self, i: usize) {
        self.kill(i);
        let data = self.members[i].data();
        fs::remove_dir_all(&data).unwrap_or_else(|e| panic!("deleting {}: {e}", data.display()));
        fs::create_dir_all(&data).expect("a member's data folder");
        self.write_myid(i);
        self.spawn(i);
        self.wait_serving(i);
    }

    /// Member `i`'s `zoo.cfg`.
    fn config(
        &self,
        i: usize,
        tick: Duration,
        min_session: Duration,
        max_session: Duration,
    ) -> String {
        let member = &self.members[i];
        let tick_ms = tick.as_millis();
        // The follower's limits are counted in ticks: at least 10 s to connect and sync and 5 s
        // to answer the leader, so that a JVM stalled on a loaded machine (a collection, the
        // compiler) is not dropped from the ensemble mid-test. A killed member's connections
        // close at once, so its kill is seen at once whatever the limits; only a member that
        // stops answering without closing them (frozen) is dropped after them.
        let init_limit = 10.max(10_000u128.div_ceil(tick_ms));
        let sync_limit = 5.max(5_000u128.div_ceil(tick_ms));
        // No HTTP admin server (every member would take port 8080): `srvr` on the client port
        // tells whether a member serves. Every client connects from 127.0.0.1, so no limit of
        // connections per address (the default is 60).
        let mut config = format!(
            "tickTime={tick_ms}\n\
             initLimit={init_limit}\n\
             syncLimit={sync_limit}\n\
             minSessionTimeout={}\n\
             maxSessionTimeout={}\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=srvr,ruok,mntr\n\
             maxClientCnxns=0\n",
            min_session.as_millis(),
            max_session.as_millis(),
            member.data().display(),
            member.client_port,
        );
        if self.members.len() > 1 {
            for (id, peer) in self.members.iter().enumerate() {
                config.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    id + 1,
                    peer.quorum_port,
                    peer.election_port
                ));
            }
        }
        config
    }

    /// An ensemble member's `myid` (its `server.N`), in its data folder.
    fn write_myid(&self, i: usize) {
        if self.members.len() > 1 {
            let myid = self.members[i].data().join("myid");
            fs::write(&myid, format!("{}\n", i + 1)).expect("a member's myid");
        }
    }

    /// Starts member `i`'s JVM, its output appended to its log.
    fn spawn(&mut self, i: usize) {
        let member = &self.members[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(member.log())
            .expect("a member's log file");
        let child = Command::new(&self.java)
            .args(JVM_OPTIONS)
            .args(["-cp", &self.classpath, MAIN_CLASS])
            .arg(member.dir.join("zoo.cfg"))
            .current_dir(&member.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a member's log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start ZooKeeper with {} ({e}): set {JAVA_VAR} to a java binary, or \
                     run the tests under `cargo xtask with-services`, which installs one",
                    self.java.display()
                )
            });
        self.members[i].child = Some(child);
    }

    /// Waits until member `i` serves clients; panics with its log's end if it exits or takes
    /// longer than [`START_TIMEOUT`].
    fn wait_serving(&mut self, i: usize) {
        let started = Instant::now();
        while self.mode_within(i, POLL_TIMEOUT).is_none() {
            let address = self.address(i);
            let child = self.members[i]
                .child
                .as_mut()
                .expect("the member was started");
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "own ZooKeeper member {i} ({address}) exited ({status}) before serving\n{}",
                    self.log_tails()
                );
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "own ZooKeeper member {i} ({address}) did not serve within {} s\n{}",
                START_TIMEOUT.as_secs(),
                self.log_tails()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The end of every member's log, for a failure's message.
    fn log_tails(&self) -> String {
        let mut tails = String::new();
        for (i, member) in self.members.iter().enumerate() {
            let log = fs::read_to_string(member.log()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
            tails.push_str(&format!(
                "--- member {i} ({}), the end of its log:\n{}\n",
                self.address(i),
                tail.join("\n")
            ));
        }
        tails
    }
}

impl Drop for OwnEnsemble {
    fn drop(&mut self) {
        if thread::panicking() {
            // The logs go with the folder: a failing test shows how its servers ended.
            eprintln!("{}", self.log_tails());
        }
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The server's classpath (`NONONCE_TEST_ZOOKEEPER_CLASSPATH`); panics (a failure, never a
/// skip) when it is not set.
fn classpath() -> String {
    std::env::var(CLASSPATH_VAR).unwrap_or_else(|_| {
        panic!(
            "{CLASSPATH_VAR} is not set: run the tests under `cargo xtask with-services` \
             (`cargo xtask with-services cargo nextest run -p lease-zookeeper`), which installs \
             ZooKeeper and sets it, or set it to a ZooKeeper server's Java classpath"
        )
    })
}

/// `java`: `NONONCE_TEST_ZOOKEEPER_JAVA`, or the one on the `PATH`; panics when there is none.
fn java() -> PathBuf {
    if let Some(java) = std::env::var_os(JAVA_VAR) {
        return PathBuf::from(java);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("java"))
                .find(|path| path.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "java not found: set {JAVA_VAR}, or run the tests under `cargo xtask \
                 with-services`, which installs ZooKeeper and a Java runtime"
            )
        })
}

/// One four-letter-word command on loopback `port`; the server's reply, `None` when nothing
/// answers.
fn four_letter_word(port: u16, word: &str, timeout: Duration) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    // The server closes the connection after its reply.
    let mut reply = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut reply).ok()?;
    Some(String::from_utf8_lossy(&reply).into_owned())
}
