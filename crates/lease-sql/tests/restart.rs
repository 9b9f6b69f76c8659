//! A lease survives a database restart within its validity: the holder's renewals fail with
//! `Retry` (never `Lost`) while the server is down, and succeed with the same token after.
//!
//! PostgreSQL runs as a private cluster made for this test (the shared server is never
//! restarted), from the installed server binaries; SQLite is "restarted" by closing every
//! connection to the file and opening it again.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Pool, TempDir};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_sql::SqlStrategy;

const TTL: Duration = Duration::from_secs(60);

/// The newest installed PostgreSQL server binaries.
fn pg_bin() -> PathBuf {
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

/// Runs a server binary, as user postgres when we are root (PostgreSQL refuses to run as root).
fn pg(bin: &Path, program: &str, args: &[&str]) {
    let program = bin.join(program);
    let out = if is_root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&program)
            .args(args)
            .output()
    } else {
        Command::new(&program).args(args).output()
    }
    .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private PostgreSQL cluster on a free port, stopped and removed on drop.
struct Cluster {
    bin: PathBuf,
    dir: TempDir,
    port: u16,
}

impl Cluster {
    fn start() -> Self {
        let bin = pg_bin();
        let dir = TempDir::new();
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir.path)
                .status()
                .unwrap();
            assert!(status.success());
        }
        let data = dir.path.join("data");
        let data = data.to_str().unwrap();
        pg(
            &bin,
            "initdb",
            &["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self { bin, dir, port };
        cluster.ctl(&["start"]);
        cluster
    }

    fn data(&self) -> String {
        self.dir.path.join("data").to_str().unwrap().to_owned()
    }

    fn ctl(&self, action: &[&str]) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on",
            self.port,
            self.dir.path.display()
        );
        let log = self.dir.path.join("log").display().to_string();
        let data = self.data();
        let mut args = vec!["-D", &data, "-w", "-o", &options, "-l", &log];
        args.extend_from_slice(action);
        pg(&self.bin, "pg_ctl", &args);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let program = self.bin.join("pg_ctl");
        let args = ["-D", &data, "-m", "immediate", "stop"];
        let _ = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .output()
        } else {
            Command::new(&program).args(args).output()
        };
    }
}

/// Renews until the server answers again: every failure meanwhile must be uncertain (`Retry`),
/// never `Lost`.
async fn renew_through_outage(s: &SqlStrategy, lease: &lease_sql::SqlLease) -> usize {
    let start = Instant::now();
    let mut retries = 0;
    loop {
        match s.renew(lease, TTL).await {
            Ok(renewal) => {
                assert_eq!(renewal.lease, *lease);
                return retries;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
                retries += 1;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "server never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_survives_a_server_restart() {
    let cluster = Cluster::start();
    let s = SqlStrategy::connect_lazy(&cluster.url()).unwrap();
    assert_eq!(s.migrate().await.unwrap(), 512);
    let grant = s.acquire(TTL).await.unwrap();
    cluster.ctl(&["-m", "fast", "stop"]);
    // Down: the holder cannot tell whether its lease still stands.
    let e = s.renew(&grant.lease, TTL).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    cluster.ctl(&["start"]);
    renew_through_outage(&s, &grant.lease).await;
    // The new server state still has our token on the row, and nobody else can take the ID.
    let other = s.acquire(TTL).await.unwrap();
    assert_ne!(other.machine_id, grant.machine_id);
    let holders = s.holders().await.unwrap();
    assert_eq!(holders.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_survives_closing_and_reopening_the_file() {
    let dir = TempDir::new();
    let path = dir.path.join("leases.db");
    let pool = Pool::sqlite(&path, 2).await;
    let s = pool.strategy("no_noncense_leases");
    s.migrate().await.unwrap();
    let grant = s.acquire(TTL).await.unwrap();
    pool.close().await;
    let e = s.renew(&grant.lease, TTL).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "a closed pool: {e:?}");
    let reopened = Pool::sqlite(&path, 2).await.strategy("no_noncense_leases");
    let renewed = reopened.renew(&grant.lease, TTL).await.unwrap();
    assert_eq!(renewed.lease, grant.lease);
    assert_ne!(
        reopened.acquire(TTL).await.unwrap().machine_id,
        grant.machine_id
    );
}
