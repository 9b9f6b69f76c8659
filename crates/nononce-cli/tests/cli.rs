//! The real `nononce` binary: round trips and every bad-input case.

use assert_cmd::Command;
use predicates::prelude::*;

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn nononce() -> Command {
    Command::cargo_bin("nononce").unwrap()
}

fn run_ok(args: &[&str]) -> String {
    let out = nononce()
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

fn json(nonce: &str) -> serde_json::Value {
    serde_json::from_str(&run_ok(&["decode", nonce, "--format", "json"])).unwrap()
}

/// Runs `a` (a long gen) and, once it holds its lease, `b`; returns both machine IDs and
/// whether `a` was still running when `b` finished.
fn two_gens_at_once(
    dir: &std::path::Path,
    store: Option<&str>,
) -> (serde_json::Value, serde_json::Value, bool) {
    let mut args = vec!["gen", "-n", "4000000"];
    if let Some(store) = store {
        args.extend(["--store", store]);
    }
    let mut a = std::process::Command::new(assert_cmd::cargo::cargo_bin("nononce"))
        .args(&args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut a_out = std::io::BufReader::new(a.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut a_out, &mut first).unwrap();
    args[2] = "1";
    let b = nononce()
        .args(&args)
        .current_dir(dir)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let still_running = a.try_wait().unwrap().is_none();
    std::io::copy(&mut a_out, &mut std::io::sink()).unwrap();
    assert!(a.wait().unwrap().success());
    (
        json(first.trim())["machine_id"].clone(),
        json(String::from_utf8(b).unwrap().trim())["machine_id"].clone(),
        still_running,
    )
}

#[test]
fn gen_defaults_to_an_embedded_sqlite_store_shared_by_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, concurrent) = two_gens_at_once(dir.path(), None);
    assert!(concurrent, "a was generating while b ran");
    assert_ne!(a, b);
    assert!(dir.path().join("nononce-leases.db").exists());
    let store = format!(
        "sqlite://{}",
        dir.path().join("nononce-leases.db").display()
    );
    let list = run_ok(&["leases", "list", "--store", &store]);
    assert!(list.contains("of 512 free"), "{list}");
}

#[test]
fn leases_on_postgres_and_mariadb() {
    let pg = std::env::var("NONONCE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let my = std::env::var("NONONCE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let dir = tempfile::tempdir().unwrap();
    for base in [pg, my] {
        let table = format!("nononce_cli_{}_{}", std::process::id(), base.len());
        let store = format!("{base}?table={table}");
        nononce()
            .args(["gen", "--store", &store])
            .assert()
            .failure()
            .stderr(predicate::str::contains("migrat"));
        assert!(run_ok(&["leases", "migrate", "--store", &store]).contains("512 rows added"));
        assert!(run_ok(&["leases", "migrate", "--store", &store]).contains("0 rows added"));
        let (a, b, _) = two_gens_at_once(dir.path(), Some(&store));
        assert_ne!(a, b);
        // `a` ended last: its ID is in its release guard (10 s) from just now, whatever the
        // load made `a` take after `b` ended.
        let held = a.as_u64().unwrap().to_string();
        let list = run_ok(&["leases", "list", "--store", &store]);
        assert!(
            list.lines()
                .any(|l| l.split_whitespace().next() == Some(held.as_str())),
            "{list}"
        );
        assert!(
            run_ok(&[
                "leases", "release", "--store", &store, "--id", &held, "--yes"
            ])
            .contains("freed")
        );
        let drop = format!("drop table {table}");
        if base.starts_with("postgres") {
            std::process::Command::new("psql")
                .args([base.as_str(), "-qc", &drop])
                .status()
                .unwrap();
        } else {
            std::process::Command::new("mariadb")
                .args(["-h127.0.0.1", "-uroot", "test", "-e", &drop])
                .status()
                .unwrap();
        }
    }
}

#[test]
fn gen_then_decode_round_trips_every_kind_and_size() {
    for kind in ["counter", "sortable"] {
        for bits in ["64", "96", "128"] {
            let out = run_ok(&[
                "gen",
                "--kind",
                kind,
                "--bits",
                bits,
                "--machine-id",
                "37",
                "-n",
                "5",
            ]);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 5, "{kind} {bits}");
            let mut uniq = lines.clone();
            uniq.dedup();
            assert_eq!(uniq.len(), 5);
            for line in lines {
                let d = json(line);
                assert_eq!(d["bits"].to_string(), bits);
                assert_eq!(d["machine_id"], 37);
                assert!(d["unix_ms"].as_u64().unwrap() > 1_735_689_600_000);
            }
        }
    }
    let b64 = run_ok(&[
        "gen",
        "--bits",
        "96",
        "--machine-id",
        "3",
        "--format",
        "base64url",
    ]);
    assert_eq!(b64.trim().len(), 16);
    let d = run_ok(&[
        "decode",
        "--input",
        "base64url",
        b64.trim(),
        "--format",
        "json",
    ]);
    assert!(d.contains("\"machine_id\":3"), "{d}");
    let int = run_ok(&["gen", "--machine-id", "3", "--format", "int"]);
    assert!(int.trim().parse::<u64>().is_ok());
}

#[test]
fn encrypted_gen_decrypts_to_this_machine() {
    for (bits, extra) in [("64", "speck"), ("96", "speck"), ("128", "aes")] {
        let flag = format!("--cipher{bits}");
        let e = run_ok(&[
            "gen",
            "--kind",
            "encrypted",
            "--bits",
            bits,
            "--machine-id",
            "44",
            "--base-key-hex",
            KEY,
            &flag,
            extra,
        ]);
        let d = run_ok(&["decrypt", e.trim(), "--base-key-hex", KEY, &flag, extra]);
        assert_eq!(json(d.trim())["machine_id"], 44, "{bits}");
    }
}

#[test]
fn encrypt_decrypt_round_trip_and_known_answer() {
    // AES-256 of the zero block under the key derived with salt `aes` (tests/data of nonce-core).
    let e = run_ok(&[
        "encrypt",
        "00000000000000000000000000000000",
        "--base-key-hex",
        KEY,
    ]);
    let d = run_ok(&["decrypt", e.trim(), "--base-key-hex", KEY]);
    assert_eq!(d.trim(), "00000000000000000000000000000000");
    let known = include_str!("../../nonce-core/tests/data/known_answers.txt")
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "nonce 128 aes256 {KEY} 00000000000000000000000000000000 "
            ))
        })
        .expect("vector present");
    assert_eq!(e.trim(), known.split_whitespace().last().unwrap());
    let e = run_ok(&[
        "encrypt",
        "0123456789abcdef",
        "--base-key-hex",
        KEY,
        "--cipher64",
        "des3",
    ]);
    assert_eq!(
        run_ok(&[
            "decrypt",
            e.trim(),
            "--base-key-hex",
            KEY,
            "--cipher64",
            "des3"
        ])
        .trim(),
        "0123456789abcdef"
    );
}

#[test]
fn bad_input_gets_one_clear_line_and_a_failure() {
    let cases: &[(&[&str], &str)] = &[
        (&["decode", "xyz"], "malformed nonce"),
        (
            &["decode", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"],
            "malformed nonce",
        ),
        (
            &["encrypt", "0011", "--base-key-hex", KEY],
            "malformed nonce",
        ),
        (
            &["encrypt", "0123456789abcdef", "--base-key-hex", "0011"],
            "at least 32",
        ),
        (
            &["encrypt", "0123456789abcdef", "--base-key-hex", "xyz"],
            "not hex",
        ),
        (
            &["encrypt", "0123456789abcdef00000001", "--base-key-hex", KEY],
            "32 zero bits",
        ),
        (
            &["gen", "--kind", "encrypted", "--machine-id", "1"],
            "need a key",
        ),
        (&["gen", "--machine-id", "512"], "out of range"),
        (
            &["gen", "--store", "postgres://nobody@127.0.0.1:1/none"],
            "nononce: ",
        ),
    ];
    for (args, message) in cases {
        nononce()
            .args(*args)
            .assert()
            .failure()
            .stderr(
                predicate::str::contains(*message).and(predicate::str::starts_with("nononce: ")),
            )
            .stderr(predicate::function(|s: &str| s.lines().count() == 1));
    }
    for args in [
        &["gen", "--bits", "32"][..],
        &[
            "encrypt",
            "00",
            "--base-key-hex",
            KEY,
            "--cipher128",
            "rot13",
        ][..],
    ] {
        nononce()
            .args(args)
            .assert()
            .failure()
            .stderr(predicate::str::contains("use"));
    }
}

#[test]
fn help_has_examples() {
    nononce()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Examples:"));
    nononce()
        .args(["gen", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("Examples:"));
}

#[test]
fn gen_leases_through_static_stores() {
    let out = nononce()
        .args(["gen", "--store", "env:NONONCE_TEST_POD", "-n", "3"])
        .env("NONONCE_TEST_POD", "nonce-worker-12")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    for line in String::from_utf8(out).unwrap().lines() {
        assert_eq!(json(line)["machine_id"], 12);
    }
    nononce()
        .args(["gen", "--store", "env:NONONCE_TEST_POD"])
        .env_remove("NONONCE_TEST_POD")
        .assert()
        .failure()
        .stderr(predicate::str::contains("is not set"));
    nononce()
        .args(["gen", "--store", "hosts:no-such-host.invalid"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("node list"));
    nononce()
        .args(["gen", "--store", "ftp://example"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("unknown store"));
}

fn redis_url() -> String {
    std::env::var("NONONCE_TEST_REDIS8_URL").unwrap_or_else(|_| "redis://127.0.0.1:6391".into())
}

#[test]
fn leases_on_redis_two_concurrent_gens_list_and_release() {
    let key = format!("nononce_cli_test_{}", std::process::id());
    let store = format!(
        "{}/?key={key}&max_lease_s=120&amnesia_guard=off",
        redis_url().trim_end_matches('/')
    );
    // `a` prints its first nonce once it holds a lease, then keeps generating (8192 per ms at
    // most) while `b` runs: two gen processes at once.
    let mut a = std::process::Command::new(assert_cmd::cargo::cargo_bin("nononce"))
        .args(["gen", "--store", &store, "-n", "4000000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut a_out = std::io::BufReader::new(a.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut a_out, &mut first).unwrap();
    let b = nononce()
        .args(["gen", "--store", &store, "-n", "1"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let still_running = a.try_wait().unwrap().is_none();
    std::io::copy(&mut a_out, &mut std::io::sink()).unwrap();
    assert!(a.wait().unwrap().success());
    assert!(still_running, "a was generating while b ran");
    let id_a = json(first.trim())["machine_id"].clone();
    let id_b = json(String::from_utf8(b).unwrap().trim())["machine_id"].clone();
    assert_ne!(id_a, id_b);
    let list = run_ok(&["leases", "list", "--store", &store]);
    assert!(list.contains("of 512 free"), "{list}");
    // `a` ended last: its ID is in its release guard (10 s) from just now, whatever the load
    // made `a` take after `b` ended.
    let held = id_a.as_u64().unwrap().to_string();
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().next() == Some(held.as_str())),
        "{list}"
    );
    nononce()
        .args(["leases", "release", "--store", &store, "--id", &held])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--yes"));
    let out = run_ok(&[
        "leases", "release", "--store", &store, "--id", &held, "--yes",
    ]);
    assert!(out.contains("freed"), "{out}");
    let list = run_ok(&["leases", "list", "--store", &store]);
    assert!(
        !list
            .lines()
            .any(|l| l.split_whitespace().next() == Some(held.as_str())),
        "{list}"
    );
    run_ok(&["leases", "migrate", "--store", &store]);
    nononce()
        .args(["leases", "list", "--store", "redis://127.0.0.1:1"])
        .assert()
        .failure()
        .stderr(predicate::str::starts_with("nononce: "));
    nononce()
        .args(["leases", "list", "--store", "env:POD_NAME"])
        .env("POD_NAME", "web-1")
        .assert()
        .failure()
        .stderr(predicate::str::contains("no lease table"));
}

/// Sixteen characters are hex: a typo is refused, never read as 96-bit base64url.
#[test]
fn a_hex_typo_is_refused_not_decoded_as_base64url() {
    let out = nononce()
        .args(["decode", "03be4cb50000200g"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.starts_with("nononce: malformed nonce \"03be4cb50000200g\""),
        "{err}"
    );
    assert!(err.contains("hex"), "{err}");
    assert!(err.contains("--input base64url"), "{err}");
    // A 96-bit base64url nonce is read when asked for.
    let b64 = run_ok(&[
        "gen",
        "--bits",
        "96",
        "--machine-id",
        "3",
        "--format",
        "base64url",
    ]);
    let out = run_ok(&[
        "decode",
        "--input",
        "base64url",
        b64.trim(),
        "--format",
        "json",
    ]);
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["machine_id"], 3);
    assert_eq!(d["bits"], 96);
}

/// `decode -` reads one nonce a line from stdin, in any output format of `gen`.
#[test]
fn decode_reads_stdin_and_integers() {
    for (format, bits) in [
        ("hex", "64"),
        ("int", "64"),
        ("int", "96"),
        ("int", "128"),
        ("base64url", "128"),
    ] {
        let nonces = run_ok(&[
            "gen",
            "--machine-id",
            "21",
            "-n",
            "3",
            "--format",
            format,
            "--bits",
            bits,
        ]);
        let out = nononce()
            .args(["decode", "-", "--format", "json"])
            .write_stdin(nonces.clone())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), 3, "{format} {bits}");
        for line in &lines {
            let d: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(d["machine_id"], 21, "{format} {bits}: {line}");
            assert_eq!(d["bits"].to_string(), bits, "{format} {bits}: {line}");
        }
        // The same as arguments.
        let first = nonces.lines().next().unwrap();
        let d = run_ok(&["decode", first, "--format", "json", "--bits", bits]);
        assert!(d.contains("\"machine_id\":21"), "{d}");
    }
    // A bad line is named by its number.
    let out = nononce()
        .args(["decode", "-"])
        .write_stdin("0000000000402001\nnope\n")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("nononce: line 2: malformed nonce \"nope\""),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn decode_shows_an_rfc3339_time() {
    nononce()
        .args(["decode", "0000000000402001"])
        .assert()
        .success()
        .stdout("bits=64 timestamp_ms=1 unix_ms=1735689600001 time=2025-01-01T00:00:00.001Z machine_id=1 count=1\n");
    let d = json("03be4cb500002000");
    assert_eq!(d["time"], "2027-01-15T08:00:00.000Z");
}

/// The base key from the command line, an environment variable or a file: the same key, hex.
#[test]
fn keys_from_the_environment_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    let expected = run_ok(&["encrypt", "03be4cb500002000", "--base-key-hex", KEY]);
    let from_env = nononce()
        .args(["encrypt", "03be4cb500002000", "--base-key-env", "NONCE_KEY"])
        .env("NONCE_KEY", KEY)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&from_env.stdout), expected);
    let from_file = run_ok(&[
        "encrypt",
        "03be4cb500002000",
        "--base-key-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(from_file, expected);
    let e = nononce()
        .args([
            "gen",
            "--kind",
            "encrypted",
            "--machine-id",
            "4",
            "--base-key-env",
            "NONCE_KEY",
        ])
        .env("NONCE_KEY", KEY)
        .output()
        .unwrap();
    assert!(e.status.success());
    let d = run_ok(&[
        "decrypt",
        String::from_utf8_lossy(&e.stdout).trim(),
        "--base-key-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(json(d.trim())["machine_id"], 4);
    // Missing sources are named.
    let out = nononce()
        .args([
            "encrypt",
            "03be4cb500002000",
            "--base-key-env",
            "NONONCE_NO_SUCH_VAR",
        ])
        .env_remove("NONONCE_NO_SUCH_VAR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("NONONCE_NO_SUCH_VAR"), "{err}");
    let missing = dir.path().join("missing");
    let out = run_args(&[
        "encrypt",
        "03be4cb500002000",
        "--base-key-file",
        missing.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(missing.to_str().unwrap()));
}

fn run_args(args: &[&str]) -> std::process::Output {
    nononce().args(args).output().unwrap()
}

/// Usage errors are one `nononce:` line too (status 2, as usage errors have).
#[test]
fn usage_errors_are_one_line() {
    for args in [
        &["gen", "--bits", "32"][..],
        &["gen", "--machine-id", "70000"],
        &["gen", "--nope"],
        &["frobnicate"],
        &[],
        &["decode"],
        &[
            "encrypt",
            "03be4cb500002000",
            "--cipher64",
            "rot13",
            "--base-key-hex",
            KEY,
        ],
    ] {
        let out = run_args(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("nononce: "), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}
