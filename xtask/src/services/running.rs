//! The servers one test run made available, and the variables that tell the tests where.

use std::path::PathBuf;

use crate::launcher::Server;

/// Servers made available for one test run.
#[derive(Default)]
pub struct Running {
    /// Servers started by this run, stopped on drop.
    servers: Vec<Server>,
    /// Variables the tests read to find the servers.
    pub env: Vec<(String, String)>,
    /// This run's scratch folder ([`super::scratch`]), removed on drop.
    pub scratch: Option<PathBuf>,
}

impl Running {
    /// Records a variable for the test processes.
    pub fn set_env(&mut self, key: &str, value: impl Into<String>) {
        self.env.push((key.to_owned(), value.into()));
    }

    /// Starts `server`, which runs until this run ends.
    pub fn start(&mut self, server: Server) -> Result<(), String> {
        let server = server.start()?;
        eprintln!(
            "xtask: {} answers on port {} after {} ms",
            server.name(),
            server.port(),
            server.ready_in().as_millis()
        );
        self.servers.push(server);
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The servers first: the scratch folder holds the files of some.
        self.servers.clear();
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
