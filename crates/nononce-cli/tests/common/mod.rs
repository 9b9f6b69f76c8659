//! Helpers shared by the tests of the real `nononce` binary.
//!
//! Servers: PostgreSQL and MariaDB on their usual ports (or `NONONCE_TEST_POSTGRES_URL`,
//! `NONONCE_TEST_MYSQL_URL`), Valkey 9 and Redis 8 as `cargo xtask with-services` starts them
//! (`NONONCE_TEST_VALKEY_URL`, `NONONCE_TEST_REDIS8_URL`), the machine's Redis 7
//! (`NONONCE_TEST_REDIS7_URL`), etcd as `cargo xtask with-services` starts it
//! (`NONONCE_TEST_ETCD_ENDPOINTS`). A server that is not there fails the test that needs it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Output, Stdio};

use assert_cmd::Command;

/// A 32-byte key in hex.
pub const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// The release guard of the CLI's lease timing (the lease-core default margin, 10 s).
pub const RELEASE_GUARD_S: f64 = 10.0;
/// The lease `gen` asks for.
pub const CLI_LEASE_S: f64 = 120.0;

pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("nononce")
}

pub fn nononce() -> Command {
    let mut command = Command::cargo_bin("nononce").unwrap();
    command
        .env("XDG_STATE_HOME", state_home())
        .env_remove("NONONCE_STORE");
    command
}

pub fn std_nononce() -> StdCommand {
    let mut command = StdCommand::new(bin());
    command
        .env("XDG_STATE_HOME", state_home())
        .env_remove("NONONCE_STORE");
    command
}

/// The `XDG_STATE_HOME` of every `nononce` a test runs: a folder of the test's process
/// (nextest runs each test in a process of its own), so that its default store is the test's,
/// never the user's.
pub fn state_home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = std::env::temp_dir().join(format!("nononce-cli-state-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        home
    })
}

/// The store `nononce` uses without `--store` in this test (see [`state_home`]).
pub fn default_store() -> String {
    format!("sqlite://{}", default_store_file().display())
}

/// The file of [`default_store`].
pub fn default_store_file() -> PathBuf {
    state_home().join("nononce/leases.db")
}

/// Runs `args`, asserts success and returns stdout.
pub fn run_ok(args: &[&str]) -> String {
    let out = nononce().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command line of space-separated arguments, asserts success and returns stdout.
pub fn ok(line: &str) -> String {
    run_ok(&line.split_whitespace().collect::<Vec<_>>())
}

/// Runs `args` and returns the output, whatever the status.
pub fn run(args: &[&str]) -> Output {
    nononce().args(args).output().unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A failure the user can act on: status 1, nothing on stdout, one `nononce: ` line.
pub fn assert_one_line_failure(out: &Output, what: &str) -> String {
    assert_one_line_exit(out, what, 1)
}

/// A failure with status `code` (2: a usage error), nothing on stdout, one `nononce: ` line.
pub fn assert_one_line_exit(out: &Output, what: &str, code: i32) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    assert!(
        out.stdout.is_empty(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.starts_with("nononce: "), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    err
}

pub fn json(nonce: &str) -> serde_json::Value {
    serde_json::from_str(&run_ok(&["decode", nonce, "--format", "json"])).unwrap()
}

/// The machine IDs of `gen`'s nonces, one a line.
pub fn machine_ids(out: &str) -> Vec<u64> {
    out.lines()
        .map(|n| json(n)["machine_id"].as_u64().unwrap())
        .collect()
}

/// Every command that opens `store`.
pub fn store_commands(store: &str) -> [Vec<&str>; 4] {
    [
        vec!["gen", "--store", store],
        vec!["leases", "list", "--store", store],
        vec!["leases", "migrate", "--store", store],
        vec!["leases", "release", "--store", store, "--id", "1", "--yes"],
    ]
}

/// `leases release --id ID --yes`: its stdout.
pub fn release(store: &str, id: impl ToString) -> String {
    run_ok(&[
        "leases",
        "release",
        "--store",
        store,
        "--id",
        &id.to_string(),
        "--yes",
    ])
}

/// Whether `leases list` shows a row for `id`.
pub fn listed(list: &str, id: impl ToString) -> bool {
    let id = id.to_string();
    list.lines()
        .any(|l| l.split_whitespace().next() == Some(id.as_str()))
}

pub fn pg_url() -> String {
    std::env::var("NONONCE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub fn mysql_url() -> String {
    std::env::var("NONONCE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

pub fn redis8_url() -> String {
    std::env::var("NONONCE_TEST_REDIS8_URL").unwrap_or_else(|_| "redis://127.0.0.1:6391".into())
}

pub fn valkey_url() -> String {
    std::env::var("NONONCE_TEST_VALKEY_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into())
}

pub fn redis7_url() -> String {
    std::env::var("NONONCE_TEST_REDIS7_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The etcd test server's endpoints as the `host:port,...` of an `etcd://` URL
/// (`NONONCE_TEST_ETCD_ENDPOINTS` holds `http://host:port,...`).
pub fn etcd_hosts() -> String {
    std::env::var("NONONCE_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2390".into())
        .split(',')
        .map(|e| {
            e.trim()
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// An etcd store URL on a prefix of its own, initialized (`leases migrate`) as a new store is.
pub fn etcd_store() -> String {
    let store = format!("etcd://{}/nononce-cli/{}/", etcd_hosts(), unique("t"));
    let migrated = run_ok(&["leases", "migrate", "--store", &store]);
    assert!(migrated.starts_with("store initialized"), "{migrated}");
    store
}

/// The ZooKeeper test server as the `host:port` of a `zk://` URL.
pub fn zookeeper_hosts() -> String {
    std::env::var("NONONCE_TEST_ZOOKEEPER").unwrap_or_else(|_| "127.0.0.1:2397".into())
}

/// A ZooKeeper store URL on a root of its own, initialized (`leases migrate`) as a new store is.
pub fn zookeeper_store() -> String {
    let store = format!("zk://{}/nononce-cli/{}", zookeeper_hosts(), unique("t"));
    let migrated = run_ok(&["leases", "migrate", "--store", &store]);
    assert!(migrated.starts_with("store initialized"), "{migrated}");
    store
}

/// A name no other test run uses: process ID, a counter and the time.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A Redis store URL on a hash of its own, the amnesia guard off (the shared test servers are
/// restarted by other suites).
pub fn redis_store(base: &str) -> String {
    format!(
        "{}/?key={}&amnesia_guard=off",
        base.trim_end_matches('/'),
        unique("nononce_cli")
    )
}

/// A SQL store URL on a fresh, migrated table.
pub fn sql_store(base: &str) -> String {
    let store = format!("{base}?table={}", unique("nononce_cli"));
    run_ok(&["leases", "migrate", "--store", &store]);
    store
}

/// Runs SQL through `psql` or `mariadb`.
pub fn sql(base: &str, statement: &str) {
    let status = if base.starts_with("postgres") {
        StdCommand::new("psql")
            .args([base, "-qc", statement])
            .status()
            .unwrap()
    } else {
        let rest = base.trim_start_matches("mysql://");
        let (user_host, db) = rest.split_once('/').unwrap();
        let (user, host) = user_host.split_once('@').unwrap();
        let (host, port) = host.split_once(':').unwrap_or((host, "3306"));
        StdCommand::new("mariadb")
            .args([
                &format!("-h{host}"),
                &format!("-P{port}"),
                &format!("-u{user}"),
                db,
                "-e",
                statement,
            ])
            .status()
            .unwrap()
    };
    assert!(status.success(), "{statement}");
}

/// Drops a test table, if it is there.
pub fn drop_table(store: &str) {
    let (base, query) = store.split_once('?').unwrap();
    let table = query
        .split('&')
        .find_map(|p| p.strip_prefix("table="))
        .unwrap();
    sql(base, &format!("drop table if exists {table}"));
}

/// A SQLite store in `dir`.
pub fn sqlite_store(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("leases.db").display())
}

/// A migrated SQLite store in `dir` whose every ID is held until the year 9999.
pub fn exhausted_sqlite_store(dir: &Path) -> String {
    let store = sqlite_store(dir);
    run_ok(&["leases", "migrate", "--store", &store]);
    let status = StdCommand::new("sqlite3")
        .arg(dir.join("leases.db"))
        .arg(
            "update no_noncense_leases set token = x'0102', expires_at = '9999-01-01 00:00:00.000'",
        )
        .status()
        .unwrap();
    assert!(status.success());
    store
}

/// `leases list --format json`: the held IDs with their seconds left.
pub fn held(store: &str) -> Vec<(u64, f64)> {
    let out = run_ok(&["leases", "list", "--store", store, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["machine_id"].as_u64().unwrap(),
                h["expires_in_s"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// A `gen` that runs until stopped, once it printed its first nonce (so it holds its lease);
/// the rest of its output is drained by a thread.
pub struct RunningGen {
    pub child: Child,
    pub first: String,
    drain: std::thread::JoinHandle<()>,
}

impl RunningGen {
    pub fn start(args: &[&str], dir: &Path) -> Self {
        let mut child = std_nononce()
            .args(["gen", "-n", "1000000000000"])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        if first.is_empty() {
            panic!("gen {args:?} printed nothing: {}", stderr_of(&mut child));
        }
        let drain = std::thread::spawn(move || {
            std::io::copy(&mut out, &mut std::io::sink()).unwrap();
        });
        Self {
            child,
            first: first.trim().to_owned(),
            drain,
        }
    }

    /// The machine ID of the first nonce.
    pub fn machine_id(&self) -> u64 {
        json(&self.first)["machine_id"].as_u64().unwrap()
    }

    /// Waits for it to end by itself: the exit status and stderr.
    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        self.drain.join().unwrap();
        (status, stderr_of(&mut self.child))
    }

    /// Sends `signal` (a name for `kill -s`) and waits: the exit status and stderr.
    pub fn signal(mut self, signal: &str) -> (std::process::ExitStatus, String) {
        let status = StdCommand::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let status = self.child.wait().unwrap();
        self.drain.join().unwrap();
        (status, stderr_of(&mut self.child))
    }
}

/// What `child` wrote on its piped stderr.
fn stderr_of(child: &mut Child) -> String {
    std::io::read_to_string(child.stderr.take().unwrap()).unwrap()
}
pub mod serve;
