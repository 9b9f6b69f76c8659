//! Python clients of `nononce serve`, from PyPI: `grpcio` (with `grpcio-tools`, which compiles
//! the service's `.proto` for the client at test time) as a gRPC client of another language,
//! and `schemathesis`, which fuzzes the HTTP API against docs/openapi.yaml. Installed with
//! `pip install --target <workspace>/.services/pytools` (git-ignored), pinned.
//!
//! Variables for the tests:
//!
//! | variable | value |
//! |---|---|
//! | `NONONCE_TEST_PYTHONPATH` | the folder holding the packages: run `python3` with it as `PYTHONPATH` |
//! | `NONONCE_TEST_SCHEMATHESIS` | the `schemathesis` script (run it with `python3` and that `PYTHONPATH`) |

use super::running::Running;

/// The packages, pinned.
const PACKAGES: [(&str, &str); 4] = [
    ("grpcio", "1.85.1"),
    ("grpcio-tools", "1.85.1"),
    ("protobuf", "7.36.2"),
    ("schemathesis", "4.32.5"),
];

/// Makes the Python clients available to the tests.
pub fn ensure(running: &mut Running) -> Result<(), String> {
    let dir = crate::workspace::root().join(".services").join("pytools");
    super::pip_install(&dir, &PACKAGES)?;
    let script = dir.join("bin").join("schemathesis");
    if !script.is_file() {
        return Err(format!(
            "{} not found after installing {}",
            script.display(),
            super::pip_specs(&PACKAGES).join(" ")
        ));
    }
    running.set_env("NONONCE_TEST_PYTHONPATH", dir.display().to_string());
    running.set_env("NONONCE_TEST_SCHEMATHESIS", script.display().to_string());
    Ok(())
}
