//! etcd 3.4 for `lease-etcd`, and `protoc` for the `etcd-client` crate's build script.
//!
//! Debian packages both: `etcd-server` (the `etcd` binary) and `protobuf-compiler` with
//! `libprotobuf-dev` (`protoc` and the well-known `.proto` files, which `etcd-client` needs to
//! generate its gRPC code at build time). Each is installed with
//! apt-get (as root) only when its binary is missing; this runs before anything is built, so a
//! fresh machine gets `protoc` before the first `cargo` step. The server runs as a child of this
//! run on loopback ports 2390 and 2391 (other free ones when a run beside this one holds those)
//! with a fresh data directory, and is stopped when the run ends; it is never shared with
//! another run, whose server would stop with it. `NONONCE_TEST_ETCD_ENDPOINTS` set by the caller
//! is passed through untouched (that server is the caller's to manage).
//!
//! Variables for the tests:
//!
//! | variable | value |
//! |---|---|
//! | `NONONCE_TEST_ETCD_ENDPOINTS` | `http://127.0.0.1:2390` (comma-separated endpoints) |
//! | `NONONCE_TEST_ETCD_BIN` | the `etcd` binary, for tests that start (and kill) servers of their own |

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::apt_install;
use super::running::Running;
use crate::launcher::{Server, which};
use crate::ports::{bindable, server_port};

const ENDPOINTS_VAR: &str = "NONONCE_TEST_ETCD_ENDPOINTS";
const BIN_VAR: &str = "NONONCE_TEST_ETCD_BIN";
/// Client and peer ports of the shared test server (away from etcd's default 2379/2380, which
/// a distribution's own etcd service may hold).
const CLIENT_PORT: u16 = 2390;
const PEER_PORT: u16 = 2391;

/// Makes `protoc` and an etcd server available to the tests.
pub fn ensure(running: &mut Running) -> Result<(), String> {
    ensure_protoc()?;
    let binary = ensure_etcd()?;
    running.set_env(BIN_VAR, binary.display().to_string());
    if let Ok(endpoints) = std::env::var(ENDPOINTS_VAR) {
        running.set_env(ENDPOINTS_VAR, endpoints);
        return Ok(());
    }
    // A server of this run's own, never one found running: another run's server stops when
    // that run ends. The usual ports when they are free, others when a run beside this one
    // holds them.
    let (client_port, peer_port) = if bindable(CLIENT_PORT) && bindable(PEER_PORT) {
        (CLIENT_PORT, PEER_PORT)
    } else {
        (server_port()?, server_port()?)
    };
    let services = crate::workspace::root().join(".services");
    // In the run's scratch folder, removed when the run ends.
    let dir = running
        .scratch
        .as_ref()
        .map_or_else(|| services.join("etcd"), |s| s.join("etcd"))
        .join(client_port.to_string());
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let logs = services.join("logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let log = logs.join(format!("etcd-{client_port}.log"));
    let member = Member::single("nononce-test", client_port, peer_port);
    running.start(server(&binary, &member, &dir, log))?;
    running.set_env(ENDPOINTS_VAR, format!("http://127.0.0.1:{client_port}"));
    Ok(())
}

/// `protoc` on the `PATH` (or named by `PROTOC`) with the well-known `.proto` files it
/// imports, installed from Debian's `protobuf-compiler` and `libprotobuf-dev` when missing.
/// Anything that builds `etcd-client` needs it: `cargo xtask test` makes sure of it before its
/// first step (clippy), and [`ensure`] again.
pub fn ensure_protoc() -> Result<(), String> {
    if std::env::var_os("PROTOC").is_some_and(|p| Path::new(&p).is_file()) {
        return Ok(());
    }
    let include = Path::new("/usr/include/google/protobuf/descriptor.proto");
    if which("protoc").is_some()
        && (include.is_file() || std::env::var_os("PROTOC_INCLUDE").is_some())
    {
        return Ok(());
    }
    apt_install(
        &["protobuf-compiler", "libprotobuf-dev"],
        "protoc (needed to build etcd-client)",
        "",
    )?;
    which("protoc")
        .map(|_| ())
        .ok_or_else(|| "protobuf-compiler is installed but protoc is not on the PATH".into())
}

/// The `etcd` binary, installed from Debian's `etcd-server` when missing.
fn ensure_etcd() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(BIN_VAR) {
        return Ok(PathBuf::from(path));
    }
    if let Some(path) = which("etcd") {
        return Ok(path);
    }
    apt_install(&["etcd-server"], "etcd", "")?;
    which("etcd").ok_or_else(|| "etcd-server is installed but etcd is not on the PATH".into())
}

/// One etcd member's name and loopback ports.
#[derive(Debug, Clone)]
pub struct Member {
    /// The member name (`--name`).
    pub name: String,
    /// The client port (gRPC and HTTP).
    pub client_port: u16,
    /// The peer (Raft) port.
    pub peer_port: u16,
}

impl Member {
    /// A member called `name` on loopback `client_port` and `peer_port`.
    pub fn single(name: &str, client_port: u16, peer_port: u16) -> Self {
        Self {
            name: name.to_owned(),
            client_port,
            peer_port,
        }
    }

    /// `--initial-cluster` for a cluster of this member alone.
    pub fn initial_cluster(&self) -> String {
        format!("{}=http://127.0.0.1:{}", self.name, self.peer_port)
    }
}

/// `binary` as `member`, a cluster of its own, its data in `dir`, output to `log`; it is ready
/// once it reports itself healthy (it has a leader).
pub fn server(binary: &Path, member: &Member, dir: &Path, log: PathBuf) -> Server {
    let client = format!("http://127.0.0.1:{}", member.client_port);
    let peer = format!("http://127.0.0.1:{}", member.peer_port);
    let mut cmd = Command::new(binary);
    cmd.args(["--name", &member.name, "--data-dir"])
        .arg(dir)
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &member.initial_cluster()])
        .args(["--initial-cluster-state", "new"])
        .args(["--initial-cluster-token", "nononce-test"])
        .args(["--logger", "zap", "--log-outputs", "stderr"])
        .current_dir(dir);
    Server::new("etcd", &cmd, member.client_port, log, healthy)
}

/// Whether an etcd on loopback `port` reports itself healthy (it has a leader).
pub fn healthy(port: u16) -> bool {
    get(port, "/health").is_some_and(|body| body.contains("\"health\":\"true\""))
}

/// One HTTP/1.0 GET on loopback `port`; the response body.
fn get(port: u16, path: &str) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.to_owned())
}
