//! Output errors: a closed pipe ends the command quietly with status 0 (as `head` expects of
//! its producer), any other write error is one line and status 1; never a panic.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};

use common::*;

/// Runs `args` with stdout a pipe whose reading end is already closed.
fn into_closed_pipe(args: &[&str], dir: &std::path::Path) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std_nononce()
        .args(args)
        .current_dir(dir)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn into_dev_full(args: &[&str], dir: &std::path::Path) -> Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    std_nononce()
        .args(args)
        .current_dir(dir)
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn commands(dir: &std::path::Path) -> Vec<Vec<String>> {
    let store = sqlite_store(dir);
    run_ok(&["leases", "migrate", "--store", &store]);
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        strings(&["gen", "--machine-id", "1", "-n", "100000"]),
        strings(&["gen", "--store", &store, "-n", "100000"]),
        strings(&["decode", "03be4cb500002000"]),
        strings(&["decode", "03be4cb500002000", "--format", "json"]),
        strings(&["encrypt", "03be4cb500002000", "--base-key-hex", KEY]),
        strings(&["decrypt", "03be4cb500002000", "--base-key-hex", KEY]),
        strings(&["leases", "list", "--store", &store]),
        strings(&["leases", "list", "--store", &store, "--format", "json"]),
        strings(&["leases", "migrate", "--store", &store]),
        strings(&["leases", "release", "--store", &store, "--id", "3", "--yes"]),
        strings(&["--help"]),
        strings(&["gen", "--help"]),
        strings(&["--version"]),
    ]
}

#[test]
fn a_closed_pipe_ends_quietly_with_status_0() {
    let dir = tempfile::tempdir().unwrap();
    for args in commands(dir.path()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = into_closed_pipe(&args, dir.path());
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_full_disk_is_one_line_and_status_1() {
    let dir = tempfile::tempdir().unwrap();
    for args in commands(dir.path()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = into_dev_full(&args, dir.path());
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
        assert!(left <= 10.0, "{left}");
    }
}
