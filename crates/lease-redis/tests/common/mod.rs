//! Shared test helpers: server URLs, unique keys with cleanup, and servers of a test's own.
#![allow(dead_code, reason = "each test file uses a different subset")]

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lease_core::{Acquire, ErrorKind, LeaseError, Release, Renew};
use lease_redis::redis::{self, FromRedisValue, aio::MultiplexedConnection};
use lease_redis::{AmnesiaGuard, RedisOptions, RedisStrategy};

/// A plausible timestamp floor: 2030-01-01 in Unix ms.
pub const F: u64 = 1_893_456_000_000;

/// An acquisition of `requested` for a test that is not about floors: the acquirer's clock and
/// its bound both at [`F`].
pub fn acquire(requested: Duration) -> Acquire {
    Acquire::new(requested, F, F)
}

/// A renewal of `requested` for a test that is not about floors, with the bound [`F`].
pub fn renew(requested: Duration) -> Renew {
    Renew::new(requested, F)
}

/// A release with `guard` for a test that is not about floors, recording [`F`].
pub fn release(guard: Duration) -> Release {
    Release::new(guard, F)
}

/// The error of `result`, which must be one of `kind`.
pub fn fails<T: std::fmt::Debug, E: LeaseError>(result: Result<T, E>, kind: ErrorKind) -> E {
    let error = result.expect_err("expected an error");
    assert_eq!(error.kind(), kind, "{error}");
    error
}

pub use lease_testkit::poll;

/// A server under test: a name for messages and its URL.
#[derive(Debug, Clone)]
pub struct Server {
    pub name: &'static str,
    pub url: String,
}

/// The server at the URL in `var`, by default on `port` of this machine.
fn server(name: &'static str, var: &str, port: u16) -> Server {
    let url = std::env::var(var);
    let url = url.unwrap_or_else(|_| format!("redis://127.0.0.1:{port}"));
    Server { name, url }
}

pub fn valkey() -> Server {
    server("valkey 9", "NONONCE_TEST_VALKEY_URL", 6390)
}

pub fn redis8() -> Server {
    server("redis 8", "NONONCE_TEST_REDIS8_URL", 6391)
}

pub fn redis7() -> Server {
    server("redis 7", "NONONCE_TEST_REDIS7_URL", 6379)
}

/// The servers with HSETEX every protocol test runs on.
pub fn servers() -> [Server; 2] {
    [valkey(), redis8()]
}

/// A plain connection for direct commands; panics (a test failure, never a skip) if the
/// server does not answer.
pub async fn raw(server: &Server) -> MultiplexedConnection {
    let client = redis::Client::open(server.url.as_str()).expect("valid test url");
    let connect = client.get_multiplexed_async_connection();
    let failure = match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(mut c)) => match redis::cmd("PING").query_async::<String>(&mut c).await {
            Ok(pong) if pong == "PONG" => return c,
            answer => format!("PING answered {answer:?}"),
        },
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 5 s".to_owned(),
    };
    panic!(
        "{} does not answer at {} ({failure}): run `cargo xtask test`, which starts it",
        server.name, server.url
    )
}

/// Runs `command` (its name and arguments) on `connection`; a refusal fails the test.
pub async fn run<T: FromRedisValue>(c: &mut MultiplexedConnection, command: &[&str]) -> T {
    let answer = redis::cmd(command[0])
        .arg(&command[1..])
        .query_async(c)
        .await;
    answer.unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

/// A unique hash key, deleted when dropped.
pub struct Key {
    pub name: String,
    url: String,
}

impl Key {
    pub fn new(server: &Server) -> Self {
        let name = format!("nononce_test_{:016x}", rand::random::<u64>());
        Self {
            name,
            url: server.url.clone(),
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Ok(client) = redis::Client::open(self.url.as_str())
            && let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_secs(2))
        {
            let _: Result<i64, _> = redis::cmd("DEL").arg(&self.name).query(&mut connection);
        }
    }
}

/// Options for protocol tests: the given key, amnesia guard off (tested on its own).
pub fn options(key: &Key) -> RedisOptions {
    RedisOptions::new()
        .with_key(key.name.clone())
        .with_amnesia_guard(AmnesiaGuard::Off)
}

/// A strategy on `server` using `key`, with the amnesia guard off.
pub async fn strategy(server: &Server, key: &Key) -> RedisStrategy {
    // Fail clearly if the server is not there.
    drop(raw(server).await);
    connect(server, options(key)).await
}

/// A strategy on `server` with `options`.
pub async fn connect(server: &Server, options: RedisOptions) -> RedisStrategy {
    let strategy = RedisStrategy::connect(&server.url, options).await;
    strategy.expect("connect")
}

/// Writes ID fields `ids` as held by a foreign owner (no TTL; the key is deleted at the end).
pub async fn occupy(c: &mut MultiplexedConnection, key: &Key, ids: impl Iterator<Item = u16>) {
    let ids: Vec<String> = ids.map(|id| id.to_string()).collect();
    let mut command = vec!["HSET", key.name.as_str()];
    command.extend(ids.iter().flat_map(|id| [id.as_str(), "foreign-token"]));
    if command.len() > 2 {
        run::<i64>(c, &command).await;
    }
}

/// Asserts that each of `fields` expires within `ms`.
pub async fn ttls_within(
    c: &mut MultiplexedConnection,
    key: &Key,
    fields: &[String],
    ms: RangeInclusive<i64>,
) {
    for field in fields {
        let ttl = hpttl(c, key, field).await;
        assert!(ms.contains(&ttl), "{field}: {ttl} ms left, not {ms:?}");
    }
}

/// Remaining TTL of one hash field in ms (-2: no field, -1: no TTL).
pub async fn hpttl(c: &mut MultiplexedConnection, key: &Key, field: &str) -> i64 {
    run::<Vec<i64>>(c, &["HPTTL", &key.name, "FIELDS", "1", field]).await[0]
}

pub async fn hget(c: &mut MultiplexedConnection, key: &Key, field: &str) -> Option<String> {
    run(c, &["HGET", &key.name, field]).await
}

/// The hash's field names, sorted.
pub async fn hkeys(c: &mut MultiplexedConnection, key: &Key) -> Vec<String> {
    let mut fields: Vec<String> = run(c, &["HKEYS", &key.name]).await;
    fields.sort();
    fields
}

/// Waits until `server` has been up for more than `least` (by its `uptime_in_seconds`, whole
/// seconds), so that only the guard under test can hold an acquisition off.
pub async fn wait_for_uptime(server: &Server, least: Duration) {
    let mut connection = raw(server).await;
    loop {
        let info: String = run(&mut connection, &["INFO", "server"]).await;
        let uptime: u64 = info
            .lines()
            .find_map(|line| line.strip_prefix("uptime_in_seconds:"))
            .and_then(|s| s.trim().parse().ok())
            .expect("uptime_in_seconds");
        if Duration::from_secs(uptime) > least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Which server binary a test starts itself.
#[derive(Debug, Clone, Copy)]
pub enum Binary {
    Valkey,
    Redis8,
}

impl Binary {
    fn path(self) -> PathBuf {
        let (var, name) = match self {
            Self::Valkey => ("NONONCE_TEST_VALKEY_BIN", "valkey-server"),
            Self::Redis8 => ("NONONCE_TEST_REDIS8_BIN", "redis-server"),
        };
        if let Ok(path) = std::env::var(var) {
            return PathBuf::from(path);
        }
        let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.services/py");
        find_file(&py, name).unwrap_or_else(|| {
            panic!(
                "{name} not found: set {var} or run `cargo xtask test`, which installs it under {}",
                py.display()
            )
        })
    }
}

/// The file `name` in `dir` or in a directory below it.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    let mut dirs = paths.iter().filter(|p| p.is_dir());
    let found = paths
        .iter()
        .find(|p| p.is_file() && p.ends_with(name))
        .cloned();
    found.or_else(|| dirs.find_map(|p| find_file(p, name)))
}

/// A server process of this test's own (persistence off), stopped on drop.
pub struct OwnServer {
    pub binary: Binary,
    pub port: u16,
    extra: Vec<String>,
    /// The process and its directory.
    running: Option<(Child, PathBuf)>,
}

impl OwnServer {
    pub fn start(binary: Binary, extra: &[&str]) -> Self {
        let mut server = Self {
            binary,
            port: lease_testkit::ports::server_port().expect("a free loopback port"),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            running: None,
        };
        server.spawn();
        server
    }

    pub fn server(&self) -> Server {
        Server {
            name: "own server",
            url: format!("redis://127.0.0.1:{}", self.port),
        }
    }

    fn spawn(&mut self) {
        // A directory of its own: nothing to load at start, nothing shared with other servers.
        let random = rand::random::<u64>();
        let dir = std::env::temp_dir().join(format!("nononce-test-{}-{random:x}", self.port));
        std::fs::create_dir_all(&dir).expect("server directory");
        let child = Command::new(self.binary.path())
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(&self.extra)
            .arg("--dir")
            .arg(&dir)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start own server");
        let (child, _) = self.running.insert((child, dir));
        // Until it answers, or fails: a server that exits (port taken, bad argument) ends the
        // wait; there is no time limit.
        let url = format!("redis://127.0.0.1:{}", self.port);
        let ping = || {
            let client = redis::Client::open(url.as_str())?;
            let mut c = client.get_connection_with_timeout(Duration::from_millis(200))?;
            redis::cmd("PING").query::<String>(&mut c)
        };
        while ping().is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let (binary, port) = (self.binary, self.port);
                panic!("own {binary:?} server on port {port} exited before answering ({status})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (nothing is persisted).
    pub fn kill(&mut self) {
        if let Some((mut child, dir)) = self.running.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Kills and starts it again on the same port: an empty server.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
    }
}
