//! Output errors: a closed pipe ends the command quietly with status 0 (as `head` expects of
//! its producer), any other write error is one line and status 1; never a panic.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};

use common::*;

/// Runs `args` in `dir` with `stdout` as its stdout.
fn into(stdout: impl Into<Stdio>, args: &[&str], dir: &std::path::Path) -> Output {
    std_nononce()
        .args(args)
        .current_dir(dir)
        .stdout(stdout)
        .output()
        .unwrap()
}

/// The commands that write to stdout, on a migrated SQLite `store`.
fn commands(store: &str) -> Vec<Vec<&str>> {
    run_ok(&["leases", "migrate", "--store", store]);
    vec![
        vec!["gen", "--machine-id", "1", "-n", "100000"],
        vec!["gen", "--store", store, "-n", "100000"],
        vec!["decode", "03be4cb500002000"],
        vec!["decode", "03be4cb500002000", "--format", "json"],
        vec!["encrypt", "03be4cb500002000", "--base-key-hex", KEY],
        vec!["decrypt", "03be4cb500002000", "--base-key-hex", KEY],
        vec!["leases", "list", "--store", store],
        vec!["leases", "list", "--store", store, "--format", "json"],
        vec!["leases", "migrate", "--store", store],
        vec!["leases", "release", "--store", store, "--id", "3", "--yes"],
        vec!["--help"],
        vec!["gen", "--help"],
        vec!["--version"],
    ]
}

#[test]
fn a_closed_pipe_ends_quietly_and_a_full_disk_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for args in commands(&sqlite_store(dir.path())) {
        // A pipe whose reading end is already closed: status 0, nothing said.
        let (_, writer) = std::io::pipe().unwrap();
        let out = into(writer, &args, dir.path());
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
        let out = into(full.unwrap(), &args, dir.path());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(
            err, "nononce: cannot write output: No space left on device (os error 28)\n",
            "{args:?}"
        );
    }
}

/// `gen -n 100000000 | head -1`: the reader goes away after one line.
#[test]
fn gen_into_head_ends_quietly_and_releases_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    for args in [
        vec!["gen", "-n", "100000000", "--machine-id", "9"],
        vec!["gen", "-n", "100000000", "--store", &store],
    ] {
        let mut child = std_nononce()
            .args(&args)
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert_eq!(first.trim().len(), 16);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
    // The lease was released, not left to expire.
    for (_, left) in held(&store) {
        assert!(left <= RELEASE_GUARD_S, "{left}");
    }
}
