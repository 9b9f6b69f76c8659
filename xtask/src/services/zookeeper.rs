//! ZooKeeper 3.8 for `lease-zookeeper`.
//!
//! Debian packages it: `zookeeper`, whose `libzookeeper-java` brings the server's jar
//! (`/usr/share/java/zookeeper.jar`, its manifest naming the jars it needs) and SLF4J's, and a
//! JRE. It is installed with apt-get (as root) when the jar or `java` is missing. The server
//! runs without the package's wrapper script, `java -cp CLASSPATH ... QuorumPeerMain CONFIG`
//! as a child of this run, so that a stop (or a test's `kill -9`) reaches the JVM itself. It
//! logs through SLF4J's simple logger to its output, which goes to
//! `.services/logs/zookeeper-PORT.log`: nothing of it is written under `/var/log` or `/etc`.
//!
//! The shared server is standalone, on loopback port 2397 (another free one when a run beside
//! this one holds it), with a fresh data folder in the run's scratch folder, sessions of 1 to 40 s
//! (40 s is what a user's server grants at most with its default tick; the short 500 ms tick and
//! 1 s minimum let the release guards of the tests, sessions of 2 s, end on time), and is
//! stopped when the run ends; it is never shared with another run, whose server would stop with
//! it. `NONONCE_TEST_ZOOKEEPER` set by the caller is passed through untouched (that server is
//! the caller's to manage); `NONONCE_TEST_ZOOKEEPER_CLASSPATH` and `NONONCE_TEST_ZOOKEEPER_JAVA`
//! set by the caller name the server this run starts, and are passed on.
//!
//! Variables for the tests:
//!
//! | variable | value |
//! |---|---|
//! | `NONONCE_TEST_ZOOKEEPER` | `127.0.0.1:2397` (a connect string: comma-separated `host:port`) |
//! | `NONONCE_TEST_ZOOKEEPER_CLASSPATH` | the server's Java classpath, for tests that start (and kill) servers of their own: `java -cp CLASSPATH org.apache.zookeeper.server.quorum.QuorumPeerMain CONFIG` |
//! | `NONONCE_TEST_ZOOKEEPER_JAVA` | the `java` that runs them |

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

const CONNECT_VAR: &str = "NONONCE_TEST_ZOOKEEPER";
pub(crate) const CLASSPATH_VAR: &str = "NONONCE_TEST_ZOOKEEPER_CLASSPATH";
pub(crate) const JAVA_VAR: &str = "NONONCE_TEST_ZOOKEEPER_JAVA";
/// The client port of the shared test server (away from ZooKeeper's default 2181, which a
/// distribution's own service may hold).
const CLIENT_PORT: u16 = 2397;
/// The server's jar from Debian's `libzookeeper-java`; its manifest's `Class-Path` names the
/// jars it needs, all in `/usr/share/java`.
const JAR: &str = "/usr/share/java/zookeeper.jar";
/// SLF4J's simple logger (Debian's `libslf4j-java`, a dependency of the jar's package): the jar
/// names only SLF4J's API, which without a logger on the classpath drops every message.
const LOGGER_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// The server's entry point, for an ensemble member and a standalone server alike (a
/// configuration without `server.N` lines runs standalone).
pub const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// A JVM starts in about a second; a loaded machine's may take several.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Makes ZooKeeper available to the tests: the classpath and `java` for servers of their own,
/// and a shared standalone server.
pub fn ensure(running: &mut Running) -> Result<(), String> {
    let (java, classpath) = ensure_installed()?;
    running.set_env(JAVA_VAR, java.display().to_string());
    running.set_env(CLASSPATH_VAR, classpath.clone());
    if let Ok(connect) = std::env::var(CONNECT_VAR) {
        running.set_env(CONNECT_VAR, connect);
        return Ok(());
    }
    // A server of this run's own, never one found running: another run's server stops when
    // that run ends. The usual port when it is free, another when a run beside this one holds
    // it.
    let port = if bindable(CLIENT_PORT) {
        CLIENT_PORT
    } else {
        server_port()?
    };
    let services = crate::workspace::root().join(".services");
    // In the run's scratch folder, removed when the run ends.
    let dir = running
        .scratch
        .as_ref()
        .map_or_else(|| services.join("zookeeper"), |s| s.join("zookeeper"))
        .join(port.to_string());
    let _ = fs::remove_dir_all(&dir);
    let data = dir.join("data");
    fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let config = dir.join("zoo.cfg");
    fs::write(&config, standalone_config(port, &data))
        .map_err(|e| format!("{}: {e}", config.display()))?;
    let logs = services.join("logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let log = logs.join(format!("zookeeper-{port}.log"));
    running.start(server(&java, &classpath, &config, &dir, port, log).timeout(START_TIMEOUT))?;
    running.set_env(CONNECT_VAR, format!("127.0.0.1:{port}"));
    Ok(())
}

/// `java` and the server's classpath: the callers' (`NONONCE_TEST_ZOOKEEPER_JAVA`,
/// `NONONCE_TEST_ZOOKEEPER_CLASSPATH`), or Debian's, installed when missing.
fn ensure_installed() -> Result<(PathBuf, String), String> {
    let classpath = match std::env::var(CLASSPATH_VAR) {
        Ok(classpath) => classpath,
        Err(_) => {
            if !Path::new(JAR).is_file() || !Path::new(LOGGER_JAR).is_file() {
                apt_install(&["zookeeper"], "ZooKeeper", "").map_err(|e| {
                    format!("{e}; or set {CLASSPATH_VAR} to a ZooKeeper server's Java classpath")
                })?;
            }
            for jar in [JAR, LOGGER_JAR] {
                if !Path::new(jar).is_file() {
                    return Err(format!(
                        "Debian's zookeeper is installed but {jar} is missing: reinstall \
                         zookeeper and libslf4j-java, or set {CLASSPATH_VAR} to a ZooKeeper \
                         server's classpath"
                    ));
                }
            }
            format!("{JAR}:{LOGGER_JAR}")
        }
    };
    let java = match std::env::var_os(JAVA_VAR) {
        Some(java) => PathBuf::from(java),
        None => match which("java") {
            Some(java) => java,
            None => {
                // The zookeeper package depends on a JRE; a classpath of the caller's may not
                // have come with one.
                apt_install(&["default-jre-headless"], "java (to run ZooKeeper)", "")?;
                which("java").ok_or_else(|| {
                    format!(
                        "default-jre-headless is installed but java is not on the PATH: set \
                         {JAVA_VAR} to a java binary"
                    )
                })?
            }
        },
    };
    Ok((java, classpath))
}

/// The shared server's configuration: standalone on loopback `port`, its data in `data`.
fn standalone_config(port: u16, data: &Path) -> String {
    format!(
        "# The shared test server: standalone.\n{}",
        common_config(port, data)
    )
}

/// The configuration of member `myid` (1-based) of an ensemble on loopback: its client `port`
/// and data in `data`, and every member's quorum and election ports in `peers`, member 1
/// first. The chaos runs' own ensembles.
pub(crate) fn member_config(port: u16, data: &Path, peers: &[(u16, u16)]) -> String {
    let mut config = format!(
        "# A member of an ensemble on loopback. A follower has 10 s (20 ticks) to connect and\n\
         # sync and 5 s to answer the leader, so that a JVM stalled on a loaded machine is not\n\
         # dropped; a killed member's connections close at once, whatever the limits.\n\
         initLimit=20\n\
         syncLimit=10\n\
         {}",
        common_config(port, data)
    );
    for (i, (quorum, election)) in peers.iter().enumerate() {
        config.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1));
    }
    config
}

/// What every server of this run's own is configured with: loopback `port`, data in `data`.
fn common_config(port: u16, data: &Path) -> String {
    format!(
        "# Sessions up to 40 s, as a user's server with its default tick grants, and from 1 s on\n\
         # a short tick: a release guard is a session of the guard's length, and the conformance\n\
         # checks' 2 s guards (chaos: 0.75 s, granted 1 s) must end within their slack.\n\
         tickTime=500\n\
         minSessionTimeout=1000\n\
         maxSessionTimeout=40000\n\
         dataDir={data}\n\
         clientPort={port}\n\
         clientPortAddress=127.0.0.1\n\
         # No HTTP admin server (it would take port 8080); the readiness check and the tests use\n\
         # these four-letter words on the client port.\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,ruok,mntr\n\
         # Every client connects from 127.0.0.1: the default limit of 60 connections per address\n\
         # would refuse a busy run's clients.\n\
         maxClientCnxns=0\n",
        data = data.display()
    )
}

/// `java` running the ZooKeeper server of `classpath` with `config`, in `dir`, output to
/// `log`; ready once it answers `srvr` with its mode on loopback `port`.
pub fn server(
    java: &Path,
    classpath: &str,
    config: &Path,
    dir: &Path,
    port: u16,
    log: PathBuf,
) -> Server {
    let mut cmd = Command::new(java);
    cmd.args(jvm_options())
        .args(["-cp", classpath, MAIN_CLASS])
        .arg(config)
        .current_dir(dir);
    Server::new("zookeeper", &cmd, port, log, serving)
}

/// The JVM's options: a small heap (a test server holds little), no performance-data file in
/// the system's temporary folder, and the simple logger's messages with their time.
fn jvm_options() -> [&'static str; 6] {
    [
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:-UsePerfData",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
    ]
}

/// Whether a ZooKeeper on loopback `port` serves clients: `srvr` names its mode (`standalone`,
/// `leader` or `follower`; a member without a quorum answers that it is not serving).
pub fn serving(port: u16) -> bool {
    four_letter_word(port, "srvr").is_some_and(|reply| reply.contains("\nMode: "))
}

/// What the server on loopback `port` serves as (`srvr`'s `Mode:` line: `standalone`, `leader`
/// or `follower`); `None` when it is down or serves no clients.
pub(crate) fn mode(port: u16) -> Option<String> {
    let reply = four_letter_word(port, "srvr")?;
    let mode = reply.lines().find_map(|line| line.strip_prefix("Mode: "))?;
    Some(mode.trim().to_owned())
}

/// One four-letter-word command on loopback `port`; the server's reply.
fn four_letter_word(port: u16, word: &str) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    // The server closes the connection after its reply.
    let mut reply = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut reply).ok()?;
    Some(String::from_utf8_lossy(&reply).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{member_config, standalone_config};
    use std::path::Path;

    #[test]
    fn an_ensemble_member_is_the_shared_server_with_its_peers_on_loopback() {
        let data = Path::new("data");
        let member = member_config(10_001, data, &[(10_002, 10_003), (10_005, 10_006)]);
        for line in [
            "clientPort=10001",
            "clientPortAddress=127.0.0.1",
            "initLimit=20",
            "server.1=127.0.0.1:10002:10003",
            "server.2=127.0.0.1:10005:10006",
        ] {
            assert!(member.lines().any(|l| l == line), "{line} in\n{member}");
        }
        // Every setting of the shared server's, which has no peers.
        let standalone = standalone_config(10_001, data);
        for line in standalone.lines().filter(|l| !l.starts_with('#')) {
            assert!(member.lines().any(|l| l == line), "{line} in\n{member}");
        }
        assert!(!standalone.contains("server.1"));
    }
}
