//! etcd stores (`etcd://host:port[,host:port...][/prefix/]`) on the etcd test server: `gen`
//! leases and releases, `leases list` / `release` / `migrate` see and free the keys, and a dead
//! endpoint, a bad URL or needless credentials fail at once, in one line naming the cause, with
//! the password hidden. Every test has a key prefix of its own.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// `gen` prints its nonces under one leased ID and releases it when done: the ID is then held
/// only by the release guard.
#[test]
fn gen_on_etcd_prints_nonces_and_releases_its_lease() {
    let store = etcd_store();
    let out = run_ok(&["gen", "--store", &store, "-n", "5"]);
    let ids = machine_ids(&out);
    assert_eq!(ids.len(), 5, "{out}");
    assert!(ids.iter().all(|id| *id == ids[0]), "{out}");
    let mut nonces: Vec<&str> = out.lines().collect();
    nonces.dedup();
    assert_eq!(nonces.len(), 5, "{out}");
    for (id, left) in held(&store) {
        assert_eq!(id, ids[0], "only gen's ID is held");
        assert!(left <= RELEASE_GUARD_S, "released: {left} s left");
    }
}

/// Two `gen`s at once get distinct IDs; `leases list` shows the running one, `leases release`
/// frees an ID (with `--yes` only), and `leases migrate` says the prefix is initialized.
#[test]
fn leases_on_etcd_list_release_and_migrate() {
    let store = etcd_store();
    let empty = run_ok(&["leases", "list", "--store", &store]);
    assert!(empty.ends_with("0 held, 512 of 512 free\n"), "{empty}");
    let dir = tempfile::tempdir().unwrap();
    let running = RunningGen::start(&["--store", &store], dir.path());
    let a = running.machine_id();
    let b = machine_ids(&run_ok(&["gen", "--store", &store, "-n", "1"]))[0];
    assert_ne!(a, b);

    let list = run_ok(&["leases", "list", "--store", &store]);
    let row = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some(a.to_string().as_str()))
        .unwrap_or_else(|| panic!("{a} is not listed: {list}"));
    // id, a token prefix, the time left on the running gen's etcd lease, and when that is.
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.len(), 4, "{row}");
    assert!(
        cells[3].starts_with("20") && cells[3].ends_with('Z'),
        "{row}"
    );
    let left: f64 = cells[2].trim_end_matches('s').parse().unwrap();
    assert!(left > RELEASE_GUARD_S && left <= CLI_LEASE_S, "{row}");
    assert!(list.contains(" held, "), "{list}");
    let json_list = held(&store);
    assert!(json_list.iter().any(|(id, _)| *id == a), "{json_list:?}");

    let id = a.to_string();
    let refused = run(&["leases", "release", "--store", &store, "--id", &id]);
    let err = assert_one_line_exit(&refused, "release without --yes", 2);
    assert!(err.contains("--yes"), "{err}");
    assert!(held(&store).iter().any(|(id, _)| *id == a));

    let freed = release(&store, a);
    assert_eq!(freed.trim(), format!("machine id {a} freed"));
    assert!(held(&store).iter().all(|(id, _)| *id != a));
    let again = release(&store, a);
    assert_eq!(again.trim(), format!("machine id {a} was not held"));

    // Again on an initialized prefix: nothing pending to end, a running holder left alone.
    let migrate = run_ok(&["leases", "migrate", "--store", &store]);
    let prefix = store.split_once(&etcd_hosts()).unwrap().1;
    assert_eq!(
        migrate.trim(),
        format!("store initialized: key `{prefix}initialized` is set; acquisitions may start")
    );
    let (status, err) = running.signal("TERM");
    assert_eq!(status.code(), Some(143), "{err}");
}

/// Nothing listens at any endpoint: each one's cause, in one line (a single dead endpoint is
/// `stores::a_refused_connection_is_reported_at_once_with_its_cause`'s).
#[test]
fn a_dead_etcd_endpoint_fails_fast_naming_the_cause() {
    let err = assert_one_line_failure(
        &run(&[
            "leases",
            "list",
            "--store",
            "etcd://127.0.0.1:1,127.0.0.1:2",
        ]),
        "two dead endpoints",
    );
    assert!(
        err.contains("cannot connect to any endpoint: 127.0.0.1:1: Connection refused (os error 111); 127.0.0.1:2: Connection refused (os error 111)"),
        "{err}"
    );
    let err = assert_one_line_failure(
        &run(&["gen", "--store", "etcd://no-such-host.invalid:2379"]),
        "unknown host",
    );
    assert!(err.contains("no-such-host.invalid"), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
}

/// Members that are down beside a live one: every command works, every time (the etcd client
/// would send part of the requests to the dead ones; the CLI leaves them out).
#[test]
fn one_live_endpoint_is_enough() {
    let store = format!(
        "etcd://127.0.0.1:1,{},127.0.0.1:2/nononce-cli/{}/",
        etcd_hosts(),
        unique("t")
    );
    assert!(run_ok(&["leases", "migrate", "--store", &store]).starts_with("store initialized"));
    let mut ids = Vec::new();
    for _ in 0..5 {
        let out = run(&["gen", "--store", &store, "-n", "2", "--quiet"]);
        assert!(out.status.success(), "{store}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
        let got = machine_ids(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(got.len(), 2);
        ids.push(got[0]);
    }
    let listed: Vec<u64> = held(&store).into_iter().map(|(id, _)| id).collect();
    for id in &ids {
        assert!(listed.contains(id), "{id} in {listed:?}");
    }
    let freed = release(&store, ids[0]);
    assert!(freed.contains("freed"), "{freed}");
    assert!(run_ok(&["leases", "migrate", "--store", &store]).starts_with("store initialized"));
}

/// Malformed URLs are refused before anything is connected, naming the mistake and the form.
#[test]
fn bad_etcd_urls_are_refused_naming_the_mistake() {
    for (url, needle) in [
        ("etcd://etcd-0", "endpoint `etcd-0` has no port"),
        (
            "etcd://etcd-0:port",
            "endpoint `etcd-0:port` is not host:port",
        ),
        ("etcd://:2379", "endpoint `:2379` is not host:port"),
        ("etcd://a:2379,", "endpoint `` has no port"),
        ("etcd://me@a:2379", "credentials must be user:password"),
        ("etcd://me:p%zz@a:2379", "bad %-escape"),
        (
            "etcd://a:2379?table=t",
            "unknown option `table` (known: max_lease_s, max_clock_offset_s)",
        ),
        (
            "etcd://a:2379?max_lease_s=x",
            "max_lease_s=x is not whole seconds",
        ),
    ] {
        for args in store_commands(url) {
            let started = Instant::now();
            let err = assert_one_line_failure(&run(&args), url);
            assert!(started.elapsed() < Duration::from_secs(2), "{url}");
            assert!(err.contains("invalid etcd url"), "{url}: {err}");
            assert!(err.contains(needle), "{url}: {err}");
            assert!(
                err.contains("use etcd://[user:password@]host:port[,host:port...][/prefix/]"),
                "{url}: {err}"
            );
            assert!(!err.contains("p%zz"), "the password is not echoed: {err}");
            if url.contains("p%zz") {
                assert!(err.contains("etcd://me:***@a:2379"), "{err}");
                assert!(err.contains("bad %-escape in `***`"), "{err}");
            }
        }
    }
    // gen's leases are 2 minutes: a shorter longest lease is refused, naming the option.
    let short = format!("{}?max_lease_s=10", etcd_store());
    let err = assert_one_line_failure(&run(&["gen", "--store", &short]), &short);
    assert!(
        err.ends_with(
            "max_lease_s=10 is shorter than the 30 s minimum lease nononce gen accepts: use max_lease_s=30 or more\n"
        ),
        "{err}"
    );
    // Reading needs no lease: the same URL lists.
    assert!(run_ok(&["leases", "list", "--store", &short]).contains("512 of 512 free"));
    let long = format!("{}?max_lease_s=300", etcd_store());
    assert_eq!(
        machine_ids(&run_ok(&["gen", "--store", &long, "-n", "1"])).len(),
        1
    );
}

/// Credentials for a cluster without authentication: refused at once, with the password
/// hidden and what to change.
#[test]
fn credentials_without_authentication_are_refused_with_the_password_hidden() {
    let store = etcd_store().replacen("etcd://", "etcd://me:s3cret@", 1);
    for args in store_commands(&store) {
        let err = assert_one_line_failure(&run(&args), &format!("{args:?}"));
        assert!(err.contains("etcd://me:***@"), "{args:?}: {err}");
        assert!(!err.contains("s3cret"), "{args:?}: {err}");
        assert!(
            err.contains("authentication is not enabled"),
            "{args:?}: {err}"
        );
        assert!(err.contains("remove user:password@"), "{args:?}: {err}");
    }
}
