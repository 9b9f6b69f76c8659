//! `nononce gen` holds its lease like a good citizen: a signal stops it, releases the ID (which
//! then stays blocked only for the release guard) and exits with the signal's conventional
//! status; a lease is short and renewed, so even `kill -9` leaks it for minutes, not hours.
//! Checked on the store itself, with `leases list --format json`.

use crate::common;

use common::*;

/// Stops a running `gen` with each signal in turn and checks the status and the store; then
/// with `kill -9`, which cannot be caught: the lease expires by itself, after the CLI's short
/// lease.
fn signals_release(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    for (signal, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let running = RunningGen::start(&["--store", store], dir.path());
        let id = running.machine_id();
        let held_before = held(store);
        let (_, left) = *held_before.iter().find(|(i, _)| *i == id).unwrap();
        assert!(left > RELEASE_GUARD_S, "{store}: {held_before:?}");
        let (status, err) = running.signal(signal);
        assert_eq!(status.code(), Some(code), "{store} SIG{signal}: {err}");
        assert!(err.is_empty(), "{store} SIG{signal}: {err}");
        // Released: blocked for the guard at most, never for the rest of a lease.
        for (i, left) in held(store) {
            if i == id {
                assert!(left <= RELEASE_GUARD_S, "{store} SIG{signal}: {id} {left}");
            }
        }
    }
    let running = RunningGen::start(&["--store", store], dir.path());
    let id = running.machine_id();
    let (status, _) = running.signal("KILL");
    assert!(!status.success());
    let held = held(store);
    let (_, left) = *held.iter().find(|(i, _)| *i == id).unwrap();
    assert!(left <= CLI_LEASE_S, "{store}: {left} s left");
}

#[test]
fn signals_release_the_lease_on_every_store() {
    let dir = tempfile::tempdir().unwrap();
    signals_release(&sqlite_store(dir.path()));
    signals_release(&etcd_store());
    for base in [valkey_url(), redis8_url()] {
        signals_release(&redis_store(&base));
    }
    for base in [pg_url(), mysql_url()] {
        let store = sql_store(&base);
        signals_release(&store);
        drop_table(&store);
    }
}

/// A machine ID without a lease: nothing to release, the status is still the signal's.
#[test]
fn signals_stop_gen_without_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let running = RunningGen::start(&["--machine-id", "5"], dir.path());
    let (status, err) = running.signal("INT");
    assert_eq!(status.code(), Some(130), "{err}");
}

/// A signal while `gen` still waits for its lease ends the wait at once, with the signal's
/// status.
#[test]
fn a_signal_ends_the_wait_for_a_lease() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let store = exhausted_sqlite_store(dir.path());
    let mut child = std_nononce()
        .args(["gen", "--store", &store])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut progress = String::new();
    err.read_line(&mut progress).unwrap();
    assert!(progress.starts_with("nononce: waiting"), "{progress}");
    let killed = std::process::Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let rest = std::io::read_to_string(err).unwrap();
    assert_eq!(out.status.code(), Some(143), "{rest}");
    assert!(rest.is_empty(), "{rest}");
    assert!(out.stdout.is_empty());
}

/// An operator frees a running gen's machine ID (`leases release`): at its next renewal (every
/// 30 s) gen says at once, in the command's words, that the ID is no longer its own, and stops
/// with status 1, the last line saying why.
#[test]
fn a_freed_id_stops_gen_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let running = RunningGen::start(&["--store", &store], dir.path());
    let id = running.machine_id();
    assert!(release(&store, id).contains("freed"));
    let (status, err) = running.wait();
    assert_eq!(status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with(&format!(
            "nononce: machine id {id} is no longer this process's: it was freed (`nononce leases release`) or taken over after its lease ran out ("
        )),
        "{err}"
    );
    assert_eq!(
        lines[1],
        "nononce: generation stopped: the machine-id lease was lost or not renewed in time (the line above says why): run gen again to lease a machine id"
    );
}

/// The store stops answering renewals (another process holds SQLite's write lock): each
/// failed renewal is said at once, with the store, the ID, the cause and the time the lease
/// has left; generation goes on, and ends normally on a signal.
#[test]
fn each_failed_renewal_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let running = RunningGen::start(&["--store", &store], dir.path());
    let id = running.machine_id();
    let mut lock = std::process::Command::new("sqlite3")
        .arg(dir.path().join("leases.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sqlite3 (Debian's sqlite3)");
    {
        use std::io::Write;
        let stdin = lock.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "BEGIN EXCLUSIVE; UPDATE no_noncense_leases SET id = id WHERE id = -1;"
        )
        .unwrap();
        stdin.flush().unwrap();
    }
    // The first renewal comes 30 s after the lease: it and the retries after it fail while the
    // lock is held.
    std::thread::sleep(std::time::Duration::from_secs(40));
    drop(lock.stdin.take());
    let _ = lock.kill();
    let _ = lock.wait();
    let (status, err) = running.signal("TERM");
    assert_eq!(status.code(), Some(143), "{err}");
    let warnings: Vec<&str> = err.lines().collect();
    assert!(!warnings.is_empty(), "no warning: {err}");
    for line in warnings {
        assert!(
            line.starts_with(&format!(
                "nononce: warning: renewing the lease of machine id {id} failed: "
            )) && line.contains(&store)
                && line
                    .contains("s, and generation stops before then unless a renewal gets through"),
            "{err}"
        );
    }
}

/// `leases list` says when each lease ends, on this host's clock, and `--free` lists the free
/// IDs, one a line.
#[test]
fn leases_list_gives_times_and_the_free_ids() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let running = RunningGen::start(&["--store", &store], dir.path());
    let id = running.machine_id();
    let list = run_ok(&["leases", "list", "--store", &store, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    let at = v["held"][0]["expires_at"].as_str().unwrap();
    assert!(at.starts_with("20") && at.ends_with('Z'), "{list}");
    let text = run_ok(&["leases", "list", "--store", &store]);
    assert!(
        text.starts_with("  id  token          expires_in  expires_at\n"),
        "{text}"
    );
    assert!(text.contains(at.get(..16).unwrap()), "{text}");
    let free = run_ok(&["leases", "list", "--store", &store, "--free"]);
    let free: Vec<u64> = free.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(free.len(), 511);
    assert!(!free.contains(&id));
    let json = run_ok(&[
        "leases", "list", "--store", &store, "--free", "--format", "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["free_ids"].as_array().unwrap().len(), 511);
    let (status, err) = running.signal("TERM");
    assert_eq!(status.code(), Some(143), "{err}");
}
