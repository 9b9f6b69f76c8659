//! Coordinator servers of the run's own, never the shared ones the tests use: Valkey/Redis
//! without persistence (a restart forgets every lease), a PostgreSQL primary with a streaming
//! replica, a MariaDB server, a single etcd member (a restart keeps its data) and a ZooKeeper
//! ensemble of three members (restarts keep their data), each on free loopback ports with its
//! files in a temporary directory (etcd: under the run's directory; ZooKeeper: in the run's
//! scratch folder). Every server is killed on drop, and its data removed.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::launcher::Server;
use crate::ports::server_port;
use crate::services::{etcd, is_root, redis, zookeeper};

const START_TIMEOUT: Duration = Duration::from_secs(30);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
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
    fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
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

/// Runs `cmd` to completion within [`COMMAND_TIMEOUT`]: its output, or its failure.
fn output_ok(cmd: Command, what: &str) -> Result<Output, String> {
    let out = output_within(cmd, what, COMMAND_TIMEOUT)?;
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

/// A Valkey/Redis server of this run's own, on a free port, without persistence: a restart
/// forgets every lease.
pub fn start_redis(bin: PathBuf, dir: &Path) -> Result<Server, String> {
    let dir = dir.join("server");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let name = bin.file_name().map_or_else(
        || bin.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let log = dir.join("server.log");
    redis::server(&name, &bin, server_port()?, &dir, log).start()
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

/// The connection string of user `postgres` to database `postgres` on loopback `port`.
fn pg_conninfo(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname=postgres")
}

/// A PostgreSQL program, as user `postgres` when `as_postgres`.
fn pg_command(bin: &Path, as_postgres: bool, program: &str) -> Command {
    let program = bin.join(program);
    if as_postgres {
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

/// The PostgreSQL server `role` (`primary` or `replica`) on its data directory `root/<role>`,
/// its socket in `root`, its log `postgres-<role>.log` in `logs`.
fn pg_node(
    bin: &Path,
    as_postgres: bool,
    root: &Path,
    role: &str,
    port: u16,
    logs: &Path,
) -> Server {
    let mut cmd = pg_command(bin, as_postgres, "postgres");
    cmd.arg("-D")
        .arg(root.join(role))
        .args(["-p", &port.to_string(), "-k"])
        .arg(root)
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            // A killed process loses nothing the kernel has: fsync guards against power
            // loss, which no fault here is.
            "-c",
            "fsync=off",
            "-c",
            "shared_buffers=32MB",
        ]);
    let isready = bin.join("pg_isready");
    let ready = move |port: u16| {
        Command::new(&isready)
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    };
    let log = logs.join(format!("postgres-{role}.log"));
    Server::new(format!("PostgreSQL {role}"), &cmd, port, log, ready).forks()
}

/// A private PostgreSQL primary and its streaming replica. PostgreSQL refuses to run as root:
/// as root every server program runs as user `postgres`.
pub struct Postgres {
    bin: PathBuf,
    /// The server nodes use now: a kill is `kill -9` of the postmaster and every backend, a
    /// restart crash recovery from its WAL.
    pub primary: Server,
    replica: Option<Server>,
    /// The data directories and sockets. After the servers: fields drop in order, so the
    /// servers are stopped before their files go.
    _files: TempDir,
}

impl Postgres {
    /// initdb, start the primary, take a base backup, start the replica.
    pub fn start(logs: &Path) -> Result<Self, String> {
        let bin = pg_bin()?;
        let root = TempDir::new("pg")?;
        let as_postgres = is_root();
        if as_postgres {
            root.give_to("postgres")?;
        }
        let run_ok = |program: &str, args: &[&str]| {
            let mut cmd = pg_command(&bin, as_postgres, program);
            cmd.args(args);
            output_ok(cmd, program)
        };
        let data = root.0.join("primary").display().to_string();
        run_ok(
            "initdb",
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        )?;
        let primary =
            pg_node(&bin, as_postgres, &root.0, "primary", server_port()?, logs).start()?;
        let data = root.0.join("replica").display().to_string();
        let from = pg_conninfo(primary.port());
        let args = ["-d", &from, "-D", &data, "-R", "-X", "stream", "-c", "fast"];
        run_ok("pg_basebackup", &args)?;
        let replica = pg_node(&bin, as_postgres, &root.0, "replica", server_port()?, logs);
        let pg = Self {
            bin,
            primary,
            replica: Some(replica.start()?),
            _files: root,
        };
        pg.wait_streaming()?;
        Ok(pg)
    }

    fn psql(&self, port: u16, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new(self.bin.join("psql"));
        let to = pg_conninfo(port);
        cmd.args(["-d", &to, "-v", "ON_ERROR_STOP=1", "-Atc", sql]);
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
                    replica.port(),
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

    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.primary.port()
        )
    }

    /// The replica stops receiving WAL: from now on it lags behind the primary.
    pub fn lag_replica(&self) -> Result<String, String> {
        let replica = self.replica.as_ref().ok_or("no replica")?;
        self.psql(replica.port(), "ALTER SYSTEM SET primary_conninfo = ''")?;
        self.psql(replica.port(), "SELECT pg_reload_conf()")?;
        self.psql(replica.port(), "SELECT pg_last_wal_replay_lsn()")
    }

    /// Kills the primary and promotes the (lagging) replica, which becomes the primary.
    /// Returns the primary's last WAL position and the replica's, for the log.
    pub fn fail_over(&mut self) -> Result<(String, String), String> {
        let primary_lsn = self
            .psql(self.primary.port(), "SELECT pg_current_wal_lsn()")
            .unwrap_or_else(|e| format!("unknown ({e})"));
        self.primary.kill();
        let replica = self.replica.take().ok_or("no replica")?;
        let replica_lsn = self.psql(replica.port(), "SELECT pg_last_wal_replay_lsn()")?;
        let promoted = self.psql(replica.port(), "SELECT pg_promote(true, 30)")?;
        // The old primary's directory stays as it was; the promoted replica is the primary now.
        self.primary = replica;
        if promoted != "t" {
            return Err(format!("pg_promote answered {promoted}"));
        }
        Ok((primary_lsn, replica_lsn))
    }
}

/// A private MariaDB server with a password-less `root@127.0.0.1` (as
/// `mariadb-install-db --auth-root-authentication-method=normal` makes it) and database `test`.
/// As root the server runs as user `mysql`.
pub struct Mariadb {
    /// A restart after a kill is InnoDB crash recovery, on the same port and files.
    pub server: Server,
    /// Its data, socket and pid file. After the server: fields drop in order, so the server
    /// is stopped before its files go.
    _files: TempDir,
}

const MARIADBD: &str = "/usr/sbin/mariadbd";

impl Mariadb {
    pub fn start(logs: &Path) -> Result<Self, String> {
        if !Path::new(MARIADBD).exists() {
            return Err(format!(
                "{MARIADBD} is not installed (install mariadb-server)"
            ));
        }
        let files = TempDir::new("mariadb")?;
        let as_mysql = is_root();
        if as_mysql {
            files.give_to("mysql")?;
        }
        let dir = &files.0;
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if as_mysql {
            install.arg("--user=mysql");
        }
        output_ok(install, "mariadb-install-db")?;
        let port = server_port()?;
        // mariadbd ignores SIGINT: a shell that kills it on SIGINT/SIGTERM stands between, so a
        // Ctrl-C of the harness stops it too. A kill of the server (it `forks`) goes through it.
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
        .arg(format!("--port={port}"))
        .args([
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
        ]);
        if as_mysql {
            cmd.arg("--user=mysql");
        }
        let ready = |port: u16| {
            TcpStream::connect_timeout(&loopback(port), Duration::from_millis(300)).is_ok()
                && mariadb_client(port)
                    .args(["-Nse", "SELECT 1"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
        };
        let server = Server::new("MariaDB", &cmd, port, logs.join("mariadb.log"), ready)
            .forks()
            .start()?;
        let mut create = mariadb_client(port);
        create.args(["-e", "CREATE DATABASE IF NOT EXISTS test"]);
        output_ok(create, "mariadb CREATE DATABASE")?;
        Ok(Self {
            server,
            _files: files,
        })
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.server.port())
    }
}

/// The MariaDB client on loopback `port`, logged in as root over TCP.
fn mariadb_client(port: u16) -> Command {
    let mut cmd = Command::new("mariadb");
    let port = format!("--port={port}");
    cmd.args(["--no-defaults", "--host=127.0.0.1", &port, "-uroot"]);
    cmd
}

/// A single-member etcd cluster of this run's own on free loopback ports, its data under the
/// run's directory: a `kill -9` and restart is crash recovery from its WAL, which keeps every
/// committed write (keys, floors and etcd leases; etcd restarts each lease's TTL when its
/// member becomes leader again).
pub struct EtcdServer {
    /// A restart after a kill waits until the member reports itself healthy (it has a leader).
    pub server: Server,
    data: PathBuf,
}

impl EtcdServer {
    pub fn start(bin: PathBuf, dir: &Path) -> Result<Self, String> {
        let client_port = server_port()?;
        // Never the client port: each call in a process tries the next port.
        let peer_port = server_port()?;
        let data = dir.join("etcd-data");
        let _ = fs::remove_dir_all(&data);
        fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        let member = etcd::Member::single("chaos", client_port, peer_port);
        let server = etcd::server(&bin, &member, &data, dir.join("etcd.log")).start()?;
        Ok(Self { server, data })
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.server.port())
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.server.kill();
        // The WAL preallocates 64 MB: the run's directory keeps only the log.
        let _ = fs::remove_dir_all(&self.data);
    }
}

/// How long a ZooKeeper member may take to serve after its start: a JVM starts in about a
/// second, but beside the other backends' servers and nodes on a loaded machine in several, and
/// a member serves only once a quorum has elected a leader and it has synced with it.
const ZOOKEEPER_START_TIMEOUT: Duration = Duration::from_secs(60);

/// A ZooKeeper ensemble of three members of this run's own on free loopback ports (client,
/// quorum and election ports each), as `java -cp CLASSPATH QuorumPeerMain zoo.cfg` children of
/// this process, configured as xtask's shared test server is (`services::zookeeper`): sessions
/// of 1 to 40 s on a 500 ms tick. Their data is in the run's scratch folder; a `kill -9` and
/// restart of a member, of the leader or of every member keeps it (every committed write:
/// znodes, sessions and their ephemeral znodes; a new leader gives every session a fresh
/// timeout). Each member's log is in the run's directory.
pub struct ZooKeeperEnsemble {
    /// Member `i` is `server.<i+1>`; a restart waits until it serves (it is the leader or has
    /// synced with one).
    pub members: Vec<Server>,
    /// The root znode the run's nodes use.
    pub root: String,
    /// The members' configurations and data. After the members: fields drop in order, so the
    /// members are stopped before their files go.
    _files: TempDir,
}

impl ZooKeeperEnsemble {
    /// Starts three members at once (none serves until a quorum is up) and waits until each
    /// serves. `java` and `classpath` run the server (`NONONCE_TEST_ZOOKEEPER_JAVA`,
    /// `NONONCE_TEST_ZOOKEEPER_CLASSPATH`); the data goes under `scratch`, the logs into `logs`.
    pub fn start(
        java: &Path,
        classpath: &str,
        scratch: &Path,
        logs: &Path,
        root: String,
    ) -> Result<Self, String> {
        const SIZE: usize = 3;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = scratch.join(format!(
            "nononce-chaos-zookeeper-{}-{stamp}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let files = TempDir(dir);
        let mut clients = Vec::with_capacity(SIZE);
        let mut peers = Vec::with_capacity(SIZE);
        for _ in 0..SIZE {
            clients.push(server_port()?);
            peers.push((server_port()?, server_port()?));
        }
        let mut pending = Vec::with_capacity(SIZE);
        for (i, &port) in clients.iter().enumerate() {
            let dir = files.0.join(format!("m{}", i + 1));
            let data = dir.join("data");
            fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
            // The member's `server.N`.
            let myid = data.join("myid");
            fs::write(&myid, format!("{}\n", i + 1))
                .map_err(|e| format!("{}: {e}", myid.display()))?;
            let config = dir.join("zoo.cfg");
            fs::write(&config, zookeeper::member_config(port, &data, &peers))
                .map_err(|e| format!("{}: {e}", config.display()))?;
            let log = logs.join(format!("zookeeper-{}.log", i + 1));
            pending.push(
                zookeeper::server(java, classpath, &config, &dir, port, log)
                    .timeout(ZOOKEEPER_START_TIMEOUT),
            );
        }
        // At once: a member serves only once a quorum of them runs.
        let members = thread::scope(|scope| {
            let starts: Vec<_> = pending
                .into_iter()
                .map(|server| scope.spawn(move || server.start()))
                .collect();
            starts
                .into_iter()
                .map(|start| {
                    start
                        .join()
                        .unwrap_or_else(|_| Err("a ZooKeeper member's start panicked".into()))
                })
                .collect::<Result<Vec<Server>, String>>()
        })?;
        Ok(Self {
            members,
            root,
            _files: files,
        })
    }

    /// The members' client addresses, `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn hosts(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect();
        hosts.join(",")
    }

    /// The member that is the leader now, if one is (none during an election).
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            !m.is_down() && zookeeper::mode(m.port()).is_some_and(|mode| mode == "leader")
        })
    }

    /// Waits up to `timeout` for a leader; its index.
    pub fn wait_leader(&self, timeout: Duration) -> Option<usize> {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader() {
                return Some(leader);
            }
            if started.elapsed() >= timeout {
                return None;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts every member that is down again on its data and ports, at once (after the whole
    /// ensemble's kill none serves before a quorum runs), and waits until each serves.
    pub fn restart_down(&mut self) -> Result<(), String> {
        thread::scope(|scope| {
            let restarts: Vec<_> = self
                .members
                .iter_mut()
                .filter(|m| m.is_down())
                .map(|m| scope.spawn(move || m.restart()))
                .collect();
            restarts.into_iter().try_for_each(|restart| {
                restart
                    .join()
                    .unwrap_or_else(|_| Err("a ZooKeeper member's restart panicked".into()))
            })
        })
    }
}
