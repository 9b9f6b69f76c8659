//! `nononce lease -- CMD`: one machine ID for a command and every `gen` it runs, given back
//! when it ends; checked on a SQLite store with `leases list --format json`.

use std::collections::HashSet;
use std::process::Stdio;

use crate::common;

use common::*;

/// `nononce lease --store STORE -- sh -c SCRIPT`, with `$NONONCE` the binary under test.
fn lease_sh(store: &str, script: &str) -> std::process::Output {
    std_nononce()
        .args(["lease", "--store", store, "--", "sh", "-c", script])
        .env("NONONCE", bin())
        .output()
        .unwrap()
}

/// `nononce lease --store STORE -- sh -c SCRIPT` running, once SCRIPT printed its first line,
/// `ready`; with the rest of its stdout.
fn started(
    store: &str,
    script: &str,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    let mut child = std_nononce()
        .args(["lease", "--store", store, "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    (child, out)
}

/// The IDs the store holds for more than their release guard: leases not given back.
fn still_leased(store: &str) -> Vec<u64> {
    held(store)
        .into_iter()
        .filter(|(_, left)| *left > RELEASE_GUARD_S)
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn lease_env_prints_the_machine_id_and_frees_it_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let out = nononce()
        .args(["lease", "--store", &store, "--", "env"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let env = String::from_utf8(out.stdout).unwrap();
    assert!(env.lines().any(|l| l == "NONONCE_MACHINE_ID=0"), "{env}");
    let folder = env
        .lines()
        .find_map(|l| l.strip_prefix("NONONCE_LEASE_DIR="))
        .unwrap_or_else(|| panic!("no NONONCE_LEASE_DIR: {env}"));
    assert!(
        !std::path::Path::new(folder).exists(),
        "{folder} left behind"
    );
    // Given back: blocked for the release guard at most.
    assert_eq!(still_leased(&store), Vec::<u64>::new());
    assert!(held(&store).iter().any(|(id, _)| *id == 0));
}

/// 520 one-shot gens in a row (more than the 512 IDs, each of which a gen of its own would
/// lease and then block for the release guard), then gens of every kind and size, two at a
/// time: one machine ID, the lease's, and no value twice.
#[test]
fn gens_under_one_lease_use_its_id_and_never_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let script = r#"
        set -e
        i=0
        while [ $i -lt 520 ]; do "$NONONCE" gen --quiet; i=$((i + 1)); done
        for bits in 64 96 128; do
            for kind in counter sortable; do
                "$NONONCE" gen -n 20000 --bits $bits --kind $kind &
                "$NONONCE" gen -n 20000 --bits $bits --kind $kind &
                wait
                "$NONONCE" gen -n 3 --bits $bits --kind $kind
            done
        done
        "$NONONCE" leases list --store "$STORE" --format json > "$LISTED"
    "#;
    let listed = dir.path().join("listed.json");
    let out = std_nononce()
        .args(["lease", "--store", &store, "--", "sh", "-c", script])
        .env("NONONCE", bin())
        .env("STORE", &store)
        .env("LISTED", &listed)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let nonces = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = nonces.lines().collect();
    assert_eq!(lines.len(), 520 + 6 * 40_003);
    let distinct: HashSet<&str> = lines.iter().copied().collect();
    assert_eq!(distinct.len(), lines.len(), "a nonce was printed twice");
    let mut decode = std_nononce()
        .args(["decode", "-", "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = decode.stdin.take().unwrap();
    let feed = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(nonces.as_bytes()).unwrap();
    });
    let decoded = decode.wait_with_output().unwrap();
    feed.join().unwrap();
    assert!(decoded.status.success());
    let ids: HashSet<u64> = String::from_utf8(decoded.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["machine_id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, HashSet::from([0]));
    // One ID leased in all, while the gens ran; given back after.
    let listed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&listed).unwrap()).unwrap();
    let ids: Vec<u64> = listed["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["machine_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0], "{listed}");
    assert_eq!(still_leased(&store), Vec::<u64>::new());
}

#[test]
fn the_command_s_status_is_nononce_s_and_the_id_is_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    for (script, code) in [("exit 7", 7), ("kill -TERM $$", 143), ("exit 0", 0)] {
        let out = lease_sh(&store, script);
        assert_eq!(out.status.code(), Some(code), "{script}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{script}");
        assert_eq!(still_leased(&store), Vec::<u64>::new(), "{script}");
    }
    let out = nononce()
        .args(["lease", "--store", &store, "--", "no-such-command-here"])
        .output()
        .unwrap();
    let err = assert_one_line_exit(&out, "a command not found", 127);
    assert!(
        err.starts_with("nononce: cannot run `no-such-command-here`: ")
            && err.trim_end().ends_with("check its name and PATH"),
        "{err}"
    );
    assert_eq!(still_leased(&store), Vec::<u64>::new());
}

/// SIGTERM to nononce reaches the command; the ID is given back once it has ended.
#[test]
fn a_signal_is_passed_on_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let (mut child, out) = started(
        &store,
        "echo ready; trap 'echo stopped; exit 5' TERM; while :; do sleep 0.1; done",
    );
    assert_eq!(still_leased(&store), vec![0]);
    let status = common::serve::stop(&mut child, "TERM");
    let rest = std::io::read_to_string(out).unwrap();
    assert_eq!(rest, "stopped\n");
    assert_eq!(status.code(), Some(5));
    assert_eq!(still_leased(&store), Vec::<u64>::new());
}

/// An operator frees the ID (`leases release`): at the next renewal (every 30 s) nononce says
/// so, stops the command and exits 1.
#[test]
fn a_freed_id_stops_the_command_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let (mut child, _out) = started(&store, "echo ready; exec sleep 600");
    assert!(release(&store, 0).contains("freed"));
    let status = child.wait().unwrap();
    let err = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(
        lines[0].starts_with(
            "nononce: machine id 0 is no longer this process's: it was freed (`nononce leases release`) or taken over after its lease ran out ("
        ) && lines[0].ends_with("the command is stopped"),
        "{err}"
    );
    assert!(lines[1].starts_with("nononce: stopping `sh -c echo ready; exec sleep 600`: the lease of machine id 0 can no longer be kept"), "{err}");
    assert_eq!(
        lines[2],
        "nononce: `sh -c echo ready; exec sleep 600` was stopped: machine id 0 was no longer this process's to use"
    );
}

/// gen told of a lease folder that is not one: one line saying what to do.
#[test]
fn gen_under_a_lease_folder_that_is_gone_fails_saying_so() {
    let out = nononce()
        .args(["gen"])
        .env("NONONCE_LEASE_DIR", "/nonexistent/nononce-lease")
        .output()
        .unwrap();
    let err = assert_one_line_failure(&out, "a lease folder that is gone");
    assert!(
        err.contains("NONONCE_LEASE_DIR names no lease of `nononce lease`")
            && err.contains("unset NONONCE_LEASE_DIR"),
        "{err}"
    );
}
