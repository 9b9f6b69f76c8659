//! Where things are: the workspace, its target directory, and cargo as xtask runs it.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR`, relative to the workspace, or `target`.
pub fn target_dir() -> PathBuf {
    let root = root();
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |t| root.join(t))
}

/// `cargo`, without the variables `cargo run` set for xtask itself ([`clean_env`]).
pub fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clean_env(&mut cmd);
    cmd
}

/// Removes from `cmd`'s environment what `cargo run` set for xtask itself
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...): build scripts that track them (ring's does) would
/// otherwise run again in every cargo command xtask starts, and everything above them would
/// rebuild, here and again in the developer's next plain `cargo` command.
pub fn clean_env(cmd: &mut Command) {
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || matches!(
                &*key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(&*key);
        }
    }
}
