//! Servers the integration tests talk to: found running, started, or installed and started.
//!
//! Each backend's module makes its servers available and records the URLs the tests read
//! (`NONONCE_TEST_*` variables). Servers this run started are stopped when [`Running`] drops.

pub mod cargo_hack;
pub mod etcd;
pub mod redis;
mod running;
mod sql;

use std::path::{Path, PathBuf};

pub use running::Running;

/// A scratch folder for this run, in memory (`/dev/shm`) where the machine has one: the shared
/// etcd's data, and the tests' temporary files (`TMPDIR`: SQLite files, the private PostgreSQL,
/// Valkey and etcd servers of the fault tests). Nothing in the suite tests durability across a
/// machine crash (a killed server's writes survive in the page cache either way), and dozens of
/// servers and tests syncing to one disk at once made etcd's writes take half a second.
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
    Ok(running)
}
