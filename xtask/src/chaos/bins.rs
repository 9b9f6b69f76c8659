//! The harness's own programs, which `cargo xtask chaos` builds before a run.

use std::path::{Path, PathBuf};

/// The harness's binaries, built from `crates/nononce-chaos`.
pub struct Bins {
    pub node: PathBuf,
    pub check: PathBuf,
    pub proxy: PathBuf,
}

impl Bins {
    /// The binaries in a cargo output folder (`target/debug`).
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            node: dir.join("chaos-node"),
            check: dir.join("chaos-check"),
            proxy: dir.join("chaos-proxy"),
        }
    }
}
