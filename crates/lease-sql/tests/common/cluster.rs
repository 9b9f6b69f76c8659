//! Private PostgreSQL clusters made for one test from the installed server binaries: a primary,
//! and streaming replicas of it. They listen on loopback ports of their own (and a socket in
//! their own directory), and are stopped and removed on drop. The shared server is never
//! touched.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::TempDir;

/// The newest installed PostgreSQL server binaries.
pub fn pg_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect(
            "PostgreSQL server binaries in /usr/lib/postgresql/<version>/bin (install postgresql)",
        )
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no initdb under /usr/lib/postgresql/<version>/bin")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A server binary, run as user postgres when we are root (PostgreSQL refuses to run as root).
fn command(bin: &Path, program: &str) -> Command {
    let program = bin.join(program);
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs a server binary and requires success.
fn pg(bin: &Path, program: &str, args: &[&str]) {
    let out = command(bin, program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory the server user may own.
fn server_dir() -> TempDir {
    let dir = TempDir::new();
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir.path)
            .status()
            .unwrap();
        assert!(status.success());
    }
    dir
}

/// A private PostgreSQL cluster on a free loopback port, stopped and removed on drop.
pub struct Cluster {
    bin: PathBuf,
    dir: TempDir,
    pub port: u16,
    /// Extra `-c name=value` settings of this server.
    settings: Vec<String>,
}

impl Cluster {
    /// A new primary, started (trust authentication, replication allowed from loopback).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A new primary, started with extra server settings (`"log_statement=all"`).
    pub fn start_with(settings: &[&str]) -> Self {
        let bin = pg_bin();
        let dir = server_dir();
        let data = dir.path.join("data");
        let data = data.to_str().unwrap();
        let init = ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"];
        pg(&bin, "initdb", &init);
        Self::started(bin, dir, settings.iter().map(|s| (*s).to_owned()).collect())
    }

    /// Starts the server of the data directory in `dir`, on a free loopback port.
    fn started(bin: PathBuf, dir: TempDir, settings: Vec<String>) -> Self {
        let port = lease_testkit::ports::server_port().expect("a free loopback port");
        let cluster = Self {
            bin,
            dir,
            port,
            settings,
        };
        cluster.ctl(&["start"]);
        cluster
    }

    /// A streaming replica of `primary` (`pg_basebackup -R`), started as a hot standby.
    pub fn replica_of(primary: &Self) -> Self {
        let dir = server_dir();
        let data = dir.path.join("data");
        let (port, data) = (primary.port.to_string(), data.to_str().unwrap());
        let mut args = vec!["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-D", data];
        args.extend(["-R", "-X", "stream", "-c", "fast", "--no-sync"]);
        pg(&primary.bin, "pg_basebackup", &args);
        Self::started(primary.bin.clone(), dir, Vec::new())
    }

    /// The server's log (`pg_ctl -l`), as written so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path.join("log")).unwrap_or_default()
    }

    fn data(&self) -> String {
        self.dir.path.join("data").to_str().unwrap().to_owned()
    }

    /// Runs `pg_ctl -D <data> -w -o <this cluster's options> -l <log> ACTION...`.
    pub fn ctl(&self, action: &[&str]) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on",
            self.port,
            self.dir.path.display()
        );
        for setting in &self.settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        let log = self.dir.path.join("log").display().to_string();
        let data = self.data();
        let mut args = vec!["-D", &data, "-w", "-o", &options, "-l", &log];
        args.extend_from_slice(action);
        pg(&self.bin, "pg_ctl", &args);
    }

    /// Stops the server at once, as a crash would (`-m immediate`).
    pub fn kill(&self) {
        self.ctl(&["-m", "immediate", "stop"]);
    }

    /// Promotes a standby to a primary and waits until it accepts writes.
    pub fn promote(&self) {
        pg(&self.bin, "pg_ctl", &["-D", &self.data(), "-w", "promote"]);
    }

    /// The URL of database `postgres` as superuser `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Whatever state the server is in; an error only means it is not running.
        let _ = command(&self.bin, "pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .output();
    }
}
