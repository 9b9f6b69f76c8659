//! Servers the integration tests talk to: found running, started, or installed and started.
//!
//! Each backend's module makes its servers available and records the URLs the tests read
//! (`NONONCE_TEST_*` variables). Servers this run started are stopped when [`Running`] drops.

pub mod cargo_hack;
pub mod etcd;
pub mod redis;
mod sql;

use std::process::Child;

/// Servers made available for one test run.
#[derive(Default)]
pub struct Running {
    /// Processes started by this run, stopped on drop.
    pub children: Vec<(String, Child)>,
    /// Variables the tests read to find the servers.
    pub env: Vec<(String, String)>,
}

impl Running {
    /// Records a variable for the test processes.
    pub fn set_env(&mut self, key: &str, value: impl Into<String>) {
        self.env.push((key.to_owned(), value.into()));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for (name, child) in &mut self.children {
            if let Err(e) = child.kill() {
                eprintln!("xtask: could not stop {name}: {e}");
            }
            let _ = child.wait();
        }
    }
}

/// Makes every server the test suite needs available.
pub fn start() -> Result<Running, String> {
    let mut running = Running::default();
    // First: it installs protoc, which building etcd-client needs.
    etcd::ensure(&mut running)?;
    sql::ensure(&mut running)?;
    redis::ensure(&mut running)?;
    Ok(running)
}
