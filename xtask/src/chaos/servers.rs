//! Coordinator servers of the run's own, never the shared ones the tests use: Valkey/Redis
//! without persistence (a restart forgets every lease), a PostgreSQL primary with a streaming
//! replica, a MariaDB server, and a single etcd member (a restart keeps its data), each on free
//! loopback ports with its files in a temporary directory (etcd: under the run's directory).
//! Every server is killed on drop, and its data removed.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::ports::server_port;

const START_TIMEOUT: Duration = Duration::from_secs(30);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn append(path: &Path) -> Result<fs::File, String> {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `cmd` to completion within [`COMMAND_TIMEOUT`], killing it after.
fn output(cmd: Command, what: &str) -> Result<Output, String> {
    output_within(cmd, what, COMMAND_TIMEOUT)
}

/// Runs `cmd` to completion within `timeout`, killing it after; its output is collected as
/// it comes.
pub fn output_within(mut cmd: Command, what: &str, timeout: Duration) -> Result<Output, String> {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: no answer within {timeout:?}"));
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

fn output_ok(cmd: Command, what: &str) -> Result<Output, String> {
    let out = output(cmd, what)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `kill -9` of a server and of every process it forked (PostgreSQL's backends): the server
/// is stopped first so it forks no more, its children are killed by parent ID, then the server.
/// Servers stay in the harness's process group, so a Ctrl-C reaches them too (PostgreSQL shuts
/// down on SIGINT; MariaDB ignores it and runs under a shell that kills it).
///
/// A stop takes effect some time after `kill` returns: the children are listed only once the
/// server is seen stopped, and the kill waits until each of them has exited. A backend forked
/// for a reconnect after the list was taken outlived its server, kept its shared memory
/// attached, and PostgreSQL refused to start again on that data ("pre-existing shared memory
/// block is still in use").
fn kill_tree(child: &mut Child) {
    let pid = child.id();
    let signal = |args: &[&str]| {
        let _ = Command::new(args[0])
            .args(&args[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    if let Ok(None) = child.try_wait() {
        let id = pid.to_string();
        signal(&["kill", "-STOP", &id]);
        wait_for(KILL_TIMEOUT, || process_state(pid).is_none_or(|s| s == 'T'));
        signal(&["pkill", "-9", "-P", &id]);
        // Killed children stay zombies (their parent is stopped) but have let go of
        // everything they held.
        wait_for(KILL_TIMEOUT, || live_children(pid) == 0);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Longest a kill waits for a server to stop and for its children to exit.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Polls `done` until it holds or `timeout` passed.
fn wait_for(timeout: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() && started.elapsed() < timeout {
        thread::sleep(Duration::from_millis(10));
    }
}

/// A process's state letter (`R`, `S`, `T`, `Z`, ...) and its parent ID, from `/proc`.
fn process_stat(pid: &str) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": the command may hold spaces and parentheses.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// The state of process `pid`, `None` when it is gone.
fn process_state(pid: u32) -> Option<char> {
    process_stat(&pid.to_string()).map(|(state, _)| state)
}

/// How many children of `parent` have not exited (zombies have).
fn live_children(parent: u32) -> usize {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| process_stat(entry.file_name().to_str()?))
        .filter(|&(state, ppid)| ppid == parent && state != 'Z' && state != 'X')
        .count()
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> Result<Self, String> {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "nononce-chaos-{what}-{}-{stamp}",
            std::process::id()
        ));
        fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self(path))
    }

    /// Gives the directory to `user` (servers that refuse to run as root).
    fn give_to(&self, user: &str) -> Result<(), String> {
        let mut cmd = Command::new("chown");
        cmd.args(["-R", &format!("{user}:{user}")]).arg(&self.0);
        output_ok(cmd, "chown").map(|_| ())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn wait_until(
    what: &str,
    child: &mut Child,
    log: &Path,
    ready: impl Fn() -> bool,
) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < START_TIMEOUT {
        if ready() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{what} exited ({status}) before it answered; see {}",
                log.display()
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{what} did not answer within {START_TIMEOUT:?}; see {}",
        log.display()
    ))
}

/// A Valkey/Redis server of this run's own, on a free port, without persistence: a restart
/// forgets every lease.
pub struct RedisServer {
    bin: PathBuf,
    dir: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start(bin: PathBuf, dir: &Path) -> Result<Self, String> {
        let mut server = Self {
            bin,
            dir: dir.join("server"),
            port: server_port()?,
            child: None,
        };
        fs::create_dir_all(&server.dir).map_err(|e| format!("{}: {e}", server.dir.display()))?;
        server.restart()?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn is_down(&self) -> bool {
        self.child.is_none()
    }

    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let log_path = self.dir.join("server.log");
        let log = append(&log_path)?;
        let child = crate::services::redis::spawn_server(&self.bin, self.port, &self.dir, log)
            .map_err(|e| format!("could not start {}: {e}", self.bin.display()))?;
        let child = self.child.insert(child);
        let port = self.port;
        wait_until(&self.bin.display().to_string(), child, &log_path, || {
            crate::services::redis::ping(port)
        })
    }

    pub fn kill(&mut self) {
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

/// The newest installed PostgreSQL server binaries.
fn pg_bin() -> Result<PathBuf, String> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| {
            format!("PostgreSQL server binaries in /usr/lib/postgresql/<version>/bin: {e} (install postgresql)")
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no initdb under /usr/lib/postgresql/<version>/bin".into())
}

/// One PostgreSQL server process (primary or replica) on its own data directory.
struct PgNode {
    name: &'static str,
    data: PathBuf,
    port: u16,
    child: Option<Child>,
}

/// A private PostgreSQL primary and its streaming replica. PostgreSQL refuses to run as root:
/// as root every server program runs as user `postgres`.
pub struct Postgres {
    bin: PathBuf,
    root: TempDir,
    logs: PathBuf,
    as_postgres: bool,
    primary: PgNode,
    replica: Option<PgNode>,
}

impl Postgres {
    /// initdb, start the primary, take a base backup, start the replica.
    pub fn start(logs: &Path, replica: bool) -> Result<Self, String> {
        let bin = pg_bin()?;
        let root = TempDir::new("pg")?;
        let as_postgres = is_root();
        if as_postgres {
            root.give_to("postgres")?;
        }
        let mut pg = Self {
            primary: PgNode {
                name: "primary",
                data: root.0.join("primary"),
                port: server_port()?,
                child: None,
            },
            replica: None,
            bin,
            root,
            logs: logs.to_path_buf(),
            as_postgres,
        };
        let data = pg.primary.data.display().to_string();
        pg.run_ok(
            "initdb",
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        )?;
        let mut primary = std::mem::replace(
            &mut pg.primary,
            PgNode {
                name: "primary",
                data: PathBuf::new(),
                port: 0,
                child: None,
            },
        );
        pg.spawn(&mut primary)?;
        pg.primary = primary;
        if replica {
            let mut node = PgNode {
                name: "replica",
                data: pg.root.0.join("replica"),
                port: server_port()?,
                child: None,
            };
            let (data, port) = (node.data.display().to_string(), pg.primary.port.to_string());
            pg.run_ok(
                "pg_basebackup",
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-D",
                    &data,
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                ],
            )?;
            pg.spawn(&mut node)?;
            pg.replica = Some(node);
            pg.wait_streaming()?;
        }
        Ok(pg)
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut cmd = Command::new("setpriv");
            cmd.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--clear-groups",
                "--",
            ])
            .arg(program);
            cmd
        } else {
            Command::new(program)
        }
    }

    fn run_ok(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        let mut cmd = self.command(program);
        cmd.args(args);
        output_ok(cmd, program)
    }

    fn spawn(&self, node: &mut PgNode) -> Result<(), String> {
        let log_path = self.logs.join(format!("postgres-{}.log", node.name));
        let log = append(&log_path)?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(&node.data)
            .args(["-p", &node.port.to_string(), "-k"])
            .arg(&self.root.0)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                // A killed process loses nothing the kernel has: fsync guards against power
                // loss, which no fault here is.
                "-c",
                "fsync=off",
                "-c",
                "shared_buffers=32MB",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| format!("could not start postgres: {e}"))?;
        let child = node.child.insert(child);
        let port = node.port;
        let bin = self.bin.clone();
        wait_until(
            &format!("PostgreSQL {}", node.name),
            child,
            &log_path,
            || {
                Command::new(bin.join("pg_isready"))
                    .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                    .status()
                    .is_ok_and(|s| s.success())
            },
        )
    }

    fn psql(&self, port: u16, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        ]);
        output_ok(cmd, "psql").map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    }

    fn wait_streaming(&self) -> Result<(), String> {
        let Some(replica) = &self.replica else {
            return Ok(());
        };
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if self
                .psql(
                    replica.port,
                    "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'",
                )
                .is_ok_and(|n| n == "1")
            {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the PostgreSQL replica did not stream within {START_TIMEOUT:?}"
        ))
    }

    /// The server nodes use now.
    pub fn port(&self) -> u16 {
        self.primary.port
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port())
    }

    pub fn has_replica(&self) -> bool {
        self.replica.is_some()
    }

    pub fn is_down(&self) -> bool {
        self.primary.child.is_none()
    }

    /// `kill -9` of the primary's postmaster and every backend.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.primary.child.take() {
            kill_tree(&mut child);
        }
    }

    /// Starts the killed primary again (crash recovery from its WAL).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let mut primary = std::mem::replace(
            &mut self.primary,
            PgNode {
                name: "primary",
                data: PathBuf::new(),
                port: 0,
                child: None,
            },
        );
        let result = self.spawn(&mut primary);
        self.primary = primary;
        result
    }

    /// The replica stops receiving WAL: from now on it lags behind the primary.
    pub fn lag_replica(&self) -> Result<String, String> {
        let replica = self.replica.as_ref().ok_or("no replica")?;
        self.psql(replica.port, "ALTER SYSTEM SET primary_conninfo = ''")?;
        self.psql(replica.port, "SELECT pg_reload_conf()")?;
        let lsn = self.psql(replica.port, "SELECT pg_last_wal_replay_lsn()")?;
        Ok(lsn)
    }

    /// Kills the primary and promotes the (lagging) replica, which becomes the primary.
    /// Returns the primary's last WAL position and the replica's, for the log.
    pub fn fail_over(&mut self) -> Result<(String, String), String> {
        let primary_lsn = self
            .psql(self.primary.port, "SELECT pg_current_wal_lsn()")
            .unwrap_or_else(|e| format!("unknown ({e})"));
        self.kill();
        let replica = self.replica.take().ok_or("no replica")?;
        let replica_lsn = self.psql(replica.port, "SELECT pg_last_wal_replay_lsn()")?;
        let promoted = self.psql(replica.port, "SELECT pg_promote(true, 30)")?;
        // The old primary's directory stays as it was; the promoted replica is the primary now.
        let old = std::mem::replace(&mut self.primary, replica);
        drop(old);
        if promoted != "t" {
            return Err(format!("pg_promote answered {promoted}"));
        }
        Ok((primary_lsn, replica_lsn))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        for node in std::iter::once(&mut self.primary).chain(self.replica.as_mut()) {
            if let Some(mut child) = node.child.take() {
                kill_tree(&mut child);
            }
        }
    }
}

/// A private MariaDB server with a password-less `root@127.0.0.1` (as
/// `mariadb-install-db --auth-root-authentication-method=normal` makes it) and database `test`.
/// As root the server runs as user `mysql`.
pub struct Mariadb {
    root: TempDir,
    log: PathBuf,
    port: u16,
    as_mysql: bool,
    child: Option<Child>,
}

const MARIADBD: &str = "/usr/sbin/mariadbd";

impl Mariadb {
    pub fn start(logs: &Path) -> Result<Self, String> {
        if !Path::new(MARIADBD).exists() {
            return Err(format!(
                "{MARIADBD} is not installed (install mariadb-server)"
            ));
        }
        let root = TempDir::new("mariadb")?;
        let as_mysql = is_root();
        if as_mysql {
            root.give_to("mysql")?;
        }
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", root.0.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if as_mysql {
            install.arg("--user=mysql");
        }
        output_ok(install, "mariadb-install-db")?;
        let mut server = Self {
            root,
            log: logs.join("mariadb.log"),
            port: server_port()?,
            as_mysql,
            child: None,
        };
        server.restart()?;
        let mut create = server.client();
        create.args(["-e", "CREATE DATABASE IF NOT EXISTS test"]);
        output_ok(create, "mariadb CREATE DATABASE")?;
        Ok(server)
    }

    /// The client, logged in as root over TCP.
    fn client(&self) -> Command {
        let mut cmd = Command::new("mariadb");
        cmd.args([
            "--no-defaults",
            "-h",
            "127.0.0.1",
            "-P",
            &self.port.to_string(),
            "-uroot",
        ]);
        cmd
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    pub fn is_down(&self) -> bool {
        self.child.is_none()
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_tree(&mut child);
        }
    }

    /// Starts (again, after a kill: InnoDB crash recovery) on the same port and files.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let log = append(&self.log)?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let dir = &self.root.0;
        // mariadbd ignores SIGINT: a shell that kills it on SIGINT/SIGTERM stands between, so a
        // Ctrl-C of the harness stops it too. `kill_tree` kills the server through it.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            r#"trap 'kill -9 $server' INT TERM HUP; "$@" & server=$!; wait $server"#,
            "sh",
            MARIADBD,
        ])
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
        .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
        .arg(format!("--port={}", self.port))
        .args([
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
        ]);
        if self.as_mysql {
            cmd.arg("--user=mysql");
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| format!("could not start {MARIADBD}: {e}"))?;
        let child = self.child.insert(child);
        let port = self.port;
        wait_until("MariaDB", child, &self.log, || {
            TcpStream::connect_timeout(&loopback(port), Duration::from_millis(300)).is_ok()
                && Command::new("mariadb")
                    .args([
                        "--no-defaults",
                        "-h",
                        "127.0.0.1",
                        "-P",
                        &port.to_string(),
                        "-uroot",
                        "-Nse",
                        "SELECT 1",
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
        })
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A single-member etcd cluster of this run's own on free loopback ports, its data under the
/// run's directory: a `kill -9` and restart is crash recovery from its WAL, which keeps every
/// committed write (keys, floors and etcd leases; etcd restarts each lease's TTL when its
/// member becomes leader again).
pub struct EtcdServer {
    bin: PathBuf,
    member: crate::services::etcd::Member,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl EtcdServer {
    pub fn start(bin: PathBuf, dir: &Path) -> Result<Self, String> {
        let client_port = server_port()?;
        // Never the client port: each call in a process tries the next port.
        let peer_port = server_port()?;
        let data = dir.join("etcd-data");
        let _ = fs::remove_dir_all(&data);
        fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        let mut server = Self {
            bin,
            member: crate::services::etcd::Member::single("chaos", client_port, peer_port),
            data,
            log: dir.join("etcd.log"),
            child: None,
        };
        server.restart()?;
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.member.client_port
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port())
    }

    pub fn is_down(&self) -> bool {
        self.child.is_none()
    }

    /// `kill -9` (etcd is one process).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the member (again, after a kill: on the same ports and data) and waits until it
    /// reports itself healthy (it has a leader).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let log = append(&self.log)?;
        let child = crate::services::etcd::spawn(
            &self.bin,
            &self.member,
            &self.member.initial_cluster(),
            &self.data,
            log,
        )
        .map_err(|e| format!("could not start {}: {e}", self.bin.display()))?;
        let child = self.child.insert(child);
        let port = self.member.client_port;
        wait_until("etcd", child, &self.log, || {
            crate::services::etcd::healthy(port)
        })
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
        // The WAL preallocates 64 MB: the run's directory keeps only the log.
        let _ = fs::remove_dir_all(&self.data);
    }
}
