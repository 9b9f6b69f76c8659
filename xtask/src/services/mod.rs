//! Servers the integration tests talk to: found running, started, or installed and started.
//!
//! Each backend's module makes its servers available and records the URLs the tests read
//! (`NONONCE_TEST_*` variables). Servers this run started are stopped when [`Running`] drops.

pub mod cargo_hack;
pub mod etcd;
pub mod python;
pub mod redis;
mod running;
mod sql;
pub mod zookeeper;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use running::Running;

/// A scratch folder for this run, in memory (`/dev/shm`) where the machine has one: the shared
/// etcd's and ZooKeeper's data, and the tests' temporary files (`TMPDIR`: SQLite files, the
/// private PostgreSQL, Valkey, etcd and ZooKeeper servers of the fault tests). Nothing in the
/// suite tests durability across a machine crash (a killed server's writes survive in the page
/// cache either way), and dozens of servers and tests syncing to one disk at once made etcd's
/// writes take half a second.
fn scratch() -> Result<PathBuf, String> {
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        crate::workspace::target_dir().join("tmp")
    };
    let dir = parent.join(format!("nononce-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Makes every server the test suite needs available.
pub fn start() -> Result<Running, String> {
    let mut running = Running::default();
    let scratch = scratch()?;
    running.set_env("TMPDIR", scratch.display().to_string());
    running.scratch = Some(scratch);
    // First: it installs protoc, which building etcd-client needs.
    etcd::ensure(&mut running)?;
    sql::ensure(&mut running)?;
    redis::ensure(&mut running)?;
    zookeeper::ensure(&mut running)?;
    python::ensure(&mut running)?;
    Ok(running)
}

/// `name==version` for each pinned package.
pub fn pip_specs(pins: &[(&str, &str)]) -> Vec<String> {
    pins.iter()
        .map(|(name, version)| format!("{name}=={version}"))
        .collect()
}

/// Installs the pinned PyPI packages into `dir` (`pip install --target`) unless exactly those
/// versions are there already.
pub fn pip_install(dir: &Path, pins: &[(&str, &str)]) -> Result<(), String> {
    // pip names an installed package's metadata folder with underscores for dashes.
    let present = pins.iter().all(|(name, version)| {
        dir.join(format!("{}-{version}.dist-info", name.replace('-', "_")))
            .is_dir()
    });
    if present {
        return Ok(());
    }
    let specs = pip_specs(pins);
    eprintln!(
        "xtask: installing {} into {}",
        specs.join(" "),
        dir.display()
    );
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let python = crate::launcher::which("python3").or_else(|| crate::launcher::which("python"));
    let mut cmd = match python {
        Some(python) => {
            let mut cmd = Command::new(python);
            cmd.args(["-m", "pip"]);
            cmd
        }
        None => Command::new("pip"),
    };
    let status = cmd
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
            "--upgrade",
            "--target",
        ])
        .arg(dir)
        .args(&specs)
        .status()
        .map_err(|e| format!("could not run pip: {e}"))?;
    if !status.success() {
        return Err(format!("pip install {} failed ({status})", specs.join(" ")));
    }
    Ok(())
}

/// Runs a program; `Err` when it cannot be started at all.
pub fn run(program: &str, args: &[&str]) -> Result<Output, String> {
    Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))
}

/// Runs a program and requires success, reporting its stderr otherwise.
pub fn run_ok(program: &str, args: &[&str]) -> Result<Output, String> {
    let out = run(program, args)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub fn succeeds(program: &str, args: &[&str]) -> bool {
    run(program, args).is_ok_and(|out| out.status.success())
}

pub fn is_root() -> bool {
    run("id", &["-u"]).is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Installs Debian packages (as root), refreshing the package lists if the first try fails;
/// `var`, when not empty, is the variable that names a running server instead.
pub fn apt_install(packages: &[&str], what: &str, var: &str) -> Result<(), String> {
    if !is_root() || !Path::new("/usr/bin/apt-get").exists() {
        let or_set = if var.is_empty() {
            String::new()
        } else {
            format!(", or set {var} to a running server")
        };
        return Err(format!(
            "{what} is not installed: install it (Debian: apt-get install {}){or_set}",
            packages.join(" ")
        ));
    }
    eprintln!("xtask: installing {what} ({})", packages.join(" "));
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend_from_slice(packages);
    if succeeds("apt-get", &args) {
        return Ok(());
    }
    run_ok("apt-get", &["update"])?;
    run_ok("apt-get", &args).map(|_| ())
}
