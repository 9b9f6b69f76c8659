//! `cargo-hack`, for the feature-combination steps of `cargo xtask test`.
//!
//! Pinned: the version on the `PATH` is used when it is exactly this one; otherwise it is
//! installed from crates.io with `cargo install --locked` into the git-ignored
//! `.services/cargo-hack` folder (once; later runs find it there).

use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "0.6.46";

/// The folder holding a `cargo-hack` binary of the pinned version, to put first on the `PATH`
/// of the steps that run `cargo hack`.
pub fn ensure() -> Result<PathBuf, String> {
    if let Some(dir) = on_path().filter(|dir| is_pinned(&dir.join("cargo-hack"))) {
        return Ok(dir);
    }
    let root = crate::workspace_root().join(".services/cargo-hack");
    let bin = root.join("bin");
    if is_pinned(&bin.join("cargo-hack")) {
        return Ok(bin);
    }
    eprintln!(
        "xtask: installing cargo-hack {VERSION} into {}",
        root.display()
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "install",
            "cargo-hack",
            "--locked",
            "--version",
            VERSION,
            "--root",
        ])
        .arg(&root)
        // Its own build folder: not the workspace's, whose lock the steps hold.
        .env("CARGO_TARGET_DIR", root.join("build"))
        .status()
        .map_err(|e| format!("could not run cargo install: {e}"))?;
    if !status.success() || !is_pinned(&bin.join("cargo-hack")) {
        return Err(format!(
            "cargo install cargo-hack --version {VERSION} failed ({status})"
        ));
    }
    Ok(bin)
}

/// The `PATH` with `dir` first.
pub fn path_with(dir: &Path) -> Result<String, String> {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&rest));
    std::env::join_paths(paths)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| format!("PATH: {e}"))
}

/// Whether `binary` is `cargo-hack` of the pinned version.
fn is_pinned(binary: &Path) -> bool {
    binary.is_file()
        && Command::new(binary)
            .args(["hack", "--version"])
            .output()
            .is_ok_and(|out| {
                String::from_utf8_lossy(&out.stdout).trim() == format!("cargo-hack {VERSION}")
            })
}

/// The folder of the `cargo-hack` on the `PATH`, if any.
fn on_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).find(|dir| dir.join("cargo-hack").is_file())
    })
}
