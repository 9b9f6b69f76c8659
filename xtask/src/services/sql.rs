//! PostgreSQL and MariaDB for `lease-sql`.
//!
//! Each server is used as found when it answers; otherwise it is started if installed, or (as
//! root on Debian) installed from the distribution's packages and started. Then database `test`
//! is created if missing. Servers started here keep running after the run (they are daemons,
//! not children), so the next run finds them. A `NONONCE_TEST_*_URL` set by the caller is passed
//! through untouched: that server is the caller's to manage.

use std::path::Path;
use std::process::Output;
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::running::Running;
use super::{apt_install, run, run_ok, succeeds};

const PG_VAR: &str = "NONONCE_TEST_POSTGRES_URL";
const PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const MYSQL_VAR: &str = "NONONCE_TEST_MYSQL_URL";
const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// How long a server may take to answer after it was started.
const STARTUP: Duration = Duration::from_secs(60);

/// Makes PostgreSQL and MariaDB available to the tests.
pub fn ensure(running: &mut Running) -> Result<(), String> {
    match std::env::var(PG_VAR) {
        Ok(url) => running.set_env(PG_VAR, url),
        Err(_) => {
            postgres()?;
            running.set_env(PG_VAR, PG_URL);
            // The machine's server offers TLS, and sqlx's default `sslmode=prefer` takes it:
            // with the server's one curve (PostgreSQL's `ssl_ecdh_curve`, P-256) against
            // rustls's first key share (X25519) each handshake takes a second round trip, and
            // under a loaded run a few handshakes a run stalled until the test's 5 or 10 s
            // timeout (the server logs `could not accept SSL connection: EOF detected` then).
            // No test is about TLS to PostgreSQL: the tests' connections go without it, unless
            // PGSSLMODE or a URL's `sslmode` says otherwise.
            if std::env::var_os("PGSSLMODE").is_none() {
                running.set_env("PGSSLMODE", "disable");
            }
        }
    }
    match std::env::var(MYSQL_VAR) {
        Ok(url) => running.set_env(MYSQL_VAR, url),
        Err(_) => {
            mariadb()?;
            running.set_env(MYSQL_VAR, MYSQL_URL);
        }
    }
    Ok(())
}

/// Polls `ready` until it holds or [`STARTUP`] passes.
fn wait_until(what: &str, ready: impl Fn() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < STARTUP {
        if ready() {
            return Ok(());
        }
        sleep(Duration::from_millis(250));
    }
    Err(format!(
        "{what} did not answer within {} s of being started: check its log",
        STARTUP.as_secs()
    ))
}

fn psql(database: &str, sql: &str) -> Result<Output, String> {
    run(
        "psql",
        &[
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        ],
    )
}

fn pg_answers() -> bool {
    succeeds("pg_isready", &["-q", "-h", "127.0.0.1", "-p", "5432"])
}

/// The installed cluster versions (`/etc/postgresql/<version>/main`).
fn pg_versions() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/etc/postgresql") else {
        return Vec::new();
    };
    let mut versions: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("main").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    versions
}

fn postgres() -> Result<(), String> {
    let mut installed_here = false;
    if !pg_answers() {
        if pg_versions().is_empty() {
            apt_install(&["postgresql", "postgresql-client"], "PostgreSQL", PG_VAR)?;
            installed_here = true;
        }
        let version = pg_versions().pop().ok_or(
            "PostgreSQL is installed but has no cluster in /etc/postgresql/<version>/main: create one with pg_createcluster",
        )?;
        eprintln!("xtask: starting PostgreSQL {version}");
        let out = run(
            "pg_ctlcluster",
            &["--skip-systemctl-redirect", &version, "main", "start"],
        )?;
        if !out.status.success() && !pg_answers() {
            return Err(format!(
                "could not start PostgreSQL {version}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        wait_until("PostgreSQL", pg_answers)?;
        if installed_here {
            trust_local_tcp()?;
        }
    }
    if !psql("postgres", "SELECT 1").is_ok_and(|o| o.status.success()) {
        return Err(
            "PostgreSQL at 127.0.0.1:5432 does not let user postgres in without a password: add \
             `host all all 127.0.0.1/32 trust` to pg_hba.conf, or set NONONCE_TEST_POSTGRES_URL"
                .into(),
        );
    }
    let exists = psql(
        "postgres",
        "SELECT count(*) FROM pg_database WHERE datname = 'test'",
    )?;
    if String::from_utf8_lossy(&exists.stdout).trim() == "0" {
        let out = psql("postgres", "CREATE DATABASE test")?;
        if !out.status.success() {
            return Err(format!(
                "could not create PostgreSQL database test: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// On a cluster this run installed: let local TCP connections in without a password, as the
/// test URL expects.
fn trust_local_tcp() -> Result<(), String> {
    for version in pg_versions() {
        let hba = format!("/etc/postgresql/{version}/main/pg_hba.conf");
        let current = std::fs::read_to_string(&hba).map_err(|e| format!("read {hba}: {e}"))?;
        let line = "host all all 127.0.0.1/32 trust\n";
        if !current.contains(line.trim_end()) {
            std::fs::write(&hba, format!("{line}{current}"))
                .map_err(|e| format!("write {hba}: {e}"))?;
        }
        run_ok(
            "pg_ctlcluster",
            &["--skip-systemctl-redirect", &version, "main", "reload"],
        )?;
    }
    Ok(())
}

/// The MariaDB client, under either of its names.
fn mysql_client() -> &'static str {
    if succeeds("mariadb", &["--version"]) {
        "mariadb"
    } else {
        "mysql"
    }
}

fn mysql_tcp(sql: &str) -> Result<Output, String> {
    run(
        mysql_client(),
        &["-h", "127.0.0.1", "-P", "3306", "-uroot", "-Nse", sql],
    )
}

fn mariadb_answers() -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], 3306).into(), Duration::from_secs(1))
        .is_ok()
        && mysql_tcp("SELECT 1").is_ok_and(|o| o.status.success())
}

fn mariadb() -> Result<(), String> {
    let daemon = "/usr/sbin/mariadbd";
    if !mariadb_answers() {
        if !Path::new(daemon).exists() {
            apt_install(&["mariadb-server", "mariadb-client"], "MariaDB", MYSQL_VAR)?;
        }
        eprintln!("xtask: starting MariaDB");
        if !Path::new("/run/mysqld").exists() {
            // Normally made by the service manager; the socket and pid file live there.
            std::fs::create_dir_all("/run/mysqld")
                .map_err(|e| format!("mkdir /run/mysqld: {e}"))?;
            let _ = run("chown", &["mysql:mysql", "/run/mysqld"]);
        }
        let out = run(
            "start-stop-daemon",
            &["--start", "--oknodo", "--background", "--exec", daemon],
        )?;
        if !out.status.success() {
            return Err(format!(
                "could not start MariaDB: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let listening = || {
            std::net::TcpStream::connect_timeout(
                &([127, 0, 0, 1], 3306).into(),
                Duration::from_secs(1),
            )
            .is_ok()
        };
        wait_until("MariaDB", listening)?;
        if !mariadb_answers() {
            allow_root_over_tcp()?;
        }
    }
    if !mariadb_answers() {
        return Err(
            "MariaDB at 127.0.0.1:3306 does not let root in without a password over TCP: create \
             'root'@'127.0.0.1' without a password, or set NONONCE_TEST_MYSQL_URL"
                .into(),
        );
    }
    let out = mysql_tcp("CREATE DATABASE IF NOT EXISTS test")?;
    if !out.status.success() {
        return Err(format!(
            "could not create MariaDB database test: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// A fresh Debian MariaDB lets root in only through the socket (unix_socket auth); as the OS
/// root, also allow it over local TCP without a password, as the test URL expects.
fn allow_root_over_tcp() -> Result<(), String> {
    let sql = "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; \
               GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; \
               ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD(''); \
               FLUSH PRIVILEGES";
    run_ok(mysql_client(), &["-uroot", "-e", sql]).map(|_| ())
}
