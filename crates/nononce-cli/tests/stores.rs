//! Store failures as a user meets them: reported at once and once, with their cause and the
//! CLI's own remedy; retries that do happen show a progress line (`--quiet` hides it); no
//! command creates a store it was only asked to read.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// Connection refused: one line naming the cause once; not a timeout, not a retry loop. etcd
/// fails within seconds, saying it cannot connect, with the password hidden.
#[test]
fn a_refused_connection_is_reported_at_once_with_its_cause() {
    for store in [
        "postgres://postgres@127.0.0.1:1/test",
        "mysql://root@127.0.0.1:1/test",
        "redis://127.0.0.1:1",
        "etcd://127.0.0.1:1",
        "etcd://me:s3cret@127.0.0.1:1/p/",
        "zk://127.0.0.1:1/p",
    ] {
        for args in store_commands(store) {
            let started = Instant::now();
            let err = assert_one_line_failure(&run(&args), &format!("{args:?}"));
            let took = started.elapsed();
            assert_eq!(
                err.matches("Connection refused").count(),
                1,
                "{args:?}: {err}"
            );
            for stale in ["timed out", "within", "attempts", "retried", "pool"] {
                assert!(!err.contains(stale), "{args:?}: {err}");
            }
            assert!(err.contains("127.0.0.1:1"), "{args:?}: {err}");
            if store.starts_with("etcd") {
                assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
                assert!(err.contains("cannot connect"), "{args:?}: {err}");
                assert!(!err.contains("s3cret"), "{args:?}: {err}");
            }
        }
    }
}

/// PostgreSQL's messages without the server's source line, each cause once.
#[test]
fn database_errors_are_said_once_without_source_lines() {
    for (store, needle) in [
        (
            "postgres://nobody@127.0.0.1:5432/test".to_owned(),
            "role \"nobody\" does not exist",
        ),
        (format!("{}_no_such_db", pg_url()), "does not exist"),
        (
            "mysql://nobody:wrong@127.0.0.1:3306/test".to_owned(),
            "Access denied",
        ),
    ] {
        for args in store_commands(&store) {
            let err = assert_one_line_failure(&run(&args), &format!("{args:?}"));
            assert_eq!(err.matches(needle).count(), 1, "{args:?}: {err}");
            assert!(!err.contains(" at line "), "{args:?}: {err}");
            assert!(!err.contains("wrong@"), "the password is not echoed: {err}");
        }
    }
}

/// A missing table names `nononce leases migrate`, not a library call.
#[test]
fn a_missing_table_points_to_leases_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_store(dir.path());
    run_ok(&["leases", "migrate", "--store", &sqlite]);
    for base in [pg_url(), mysql_url(), sqlite] {
        let store = format!("{base}?table={}", unique("nononce_cli_missing"));
        for args in [
            &["gen", "--store", store.as_str()][..],
            &["leases", "list", "--store", &store],
            &["leases", "release", "--store", &store, "--id", "1", "--yes"],
        ] {
            if args[0] == "gen" && base.starts_with("sqlite") {
                continue; // gen creates an embedded store's table
            }
            let err = assert_one_line_failure(&run(args), &format!("{args:?}"));
            assert!(
                err.contains(&format!("nononce leases migrate --store '{store}'")),
                "{args:?}: {err}"
            );
            assert!(!err.contains("SqlStrategy"), "{args:?}: {err}");
        }
    }
}

/// URL options: lease-sql's own and the driver's pass, unknown ones are refused, on every store.
#[test]
fn store_url_options() {
    let store = sql_store(&pg_url());
    let extra = format!("{store}&amnesia_guard=off&max_lease_s=600&application_name=nononce");
    assert!(run_ok(&["leases", "list", "--store", &extra]).contains("of 512 free"));
    run_ok(&["gen", "--store", &extra]);
    drop_table(&store);
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_store(dir.path());
    for bad in [
        format!("{sqlite}?foo=1"),
        format!("{}?tabel=x", pg_url()),
        format!("{}?amnesia=off", mysql_url()),
        format!("{}?foo=1", redis8_url()),
        format!("{}?foo=1", etcd_store()),
    ] {
        let err = assert_one_line_failure(&run(&["gen", "--store", &bad]), &bad);
        assert!(err.contains("unknown"), "{bad}: {err}");
    }
    assert!(!dir.path().join("leases.db").exists());
}

#[test]
fn sqlite_paths_are_named_and_never_created_by_reads() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no/such/dir");
    let store = format!("sqlite://{}/leases.db", missing_dir.display());
    for args in [
        &["gen", "--store", store.as_str()][..],
        &["leases", "migrate", "--store", &store],
    ] {
        let err = assert_one_line_failure(&run(args), &format!("{args:?}"));
        assert!(
            err.contains(&missing_dir.display().to_string()),
            "{args:?}: {err}"
        );
        assert!(!err.contains("password"), "{args:?}: {err}");
    }
    // /sys refuses new files even to root.
    let err = assert_one_line_failure(
        &run(&["gen", "--store", "sqlite:///sys/nononce-leases.db"]),
        "unwritable",
    );
    assert!(err.contains("/sys"), "{err}");
    assert!(!err.contains("password"), "{err}");
    // Reading a mistyped path fails, naming it, and leaves nothing behind.
    let typo = dir.path().join("typo.db");
    let store = format!("sqlite://{}", typo.display());
    for args in [
        &["leases", "list", "--store", store.as_str()][..],
        &["leases", "release", "--store", &store, "--id", "2", "--yes"],
    ] {
        let err = assert_one_line_failure(&run(args), &format!("{args:?}"));
        assert!(err.contains(&typo.display().to_string()), "{err}");
        assert!(err.contains("nononce leases migrate"), "{err}");
        assert!(
            std::fs::read_dir(dir.path()).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("typo"))
        );
    }
}

/// Redis 7 has no HSETEX: said first, whatever the amnesia guard would say.
#[test]
fn a_server_without_hsetex_is_named_as_such() {
    let store = redis7_url();
    for args in store_commands(&store) {
        let err = assert_one_line_failure(&run(&args), &format!("{args:?}"));
        assert!(err.contains("HSETEX"), "{args:?}: {err}");
        assert!(err.contains("Redis 8"), "{args:?}: {err}");
        assert!(!err.contains("amnesia"), "{args:?}: {err}");
    }
}

/// A hold-off longer than `gen` waits is said at once, with how long and the options that
/// change it; no progress line, no retry loop.
#[test]
fn a_long_amnesia_hold_off_is_said_at_once_with_its_options() {
    for base in [valkey_url(), redis8_url()] {
        // A longest lease of a year: every server here has been up for less.
        let store = format!(
            "{}/?key={}&max_lease_s=31536000",
            base.trim_end_matches('/'),
            unique("nononce_cli")
        );
        let err = assert_one_line_failure(&run(&["gen", "--store", &store]), &store);
        for needle in ["amnesia_guard=off", "max_lease_s=", " more"] {
            assert!(err.contains(needle), "{store}: {err}");
        }
        assert!(!err.contains("within"), "{store}: {err}");
    }
}

/// Waiting for a lease shows one progress line on stderr; `--quiet` hides it.
#[test]
fn waiting_for_a_lease_shows_progress_unless_quiet() {
    let store = sql_store(&pg_url());
    let (base, query) = store.split_once('?').unwrap();
    let table = query.trim_start_matches("table=");
    for quiet in [false, true] {
        // Every ID held by someone else, one of them for 5 more seconds: long enough that a
        // first attempt whose connection timed out on a loaded machine is followed by one that
        // finds every ID leased (seen: the pool's timeout, then ID 77 free, and no leased line
        // while it was held for 2 s).
        sql(
            base,
            &format!(
                "update {table} set token = '\\x0102'::bytea, expires_at = (now() at time zone 'utc') + case when id = 77 then interval '5 seconds' else interval '1 hour' end"
            ),
        );
        let mut args = vec!["gen", "--store", &store];
        if quiet {
            args.push("--quiet");
        }
        let out = run(&args);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        assert_eq!(
            json(String::from_utf8_lossy(&out.stdout).trim())["machine_id"],
            77
        );
        if quiet {
            assert!(err.is_empty(), "{err}");
        } else {
            // One progress line per reason: the IDs all leased and, on a loaded machine, a
            // transient one on the way (a connection that timed out; a claim race when the
            // first attempt came after ID 77 had come free, seen once: then no "leased" line).
            assert!(!err.is_empty(), "no progress line");
            assert!(
                err.lines()
                    .all(|line| line.starts_with("nononce: waiting up to 10 s for a machine id: ")),
                "{err}"
            );
        }
    }
    drop_table(&store);
}

/// Every ID held, for longer than `gen` waits: the progress line, then the failure naming how
/// long it waited and why.
#[test]
fn an_exhausted_store_fails_after_the_wait_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let store = exhausted_sqlite_store(dir.path());
    let out = run(&["gen", "--store", &store]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("nononce: waiting"), "{err}");
    assert!(
        lines[1].starts_with("nononce: no machine id within 10 s"),
        "{err}"
    );
    assert!(lines[1].contains("leased"), "{err}");
    let quiet = run(&["gen", "--store", &store, "-q"]);
    assert_one_line_failure(&quiet, "quiet");
}
