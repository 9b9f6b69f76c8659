//! The real `nononce` binary: round trips and every bad-input case.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use common::*;

/// Runs `a` (a long gen) in `dirs.0` and, once it holds its lease, `b` (1,000 nonces) in
/// `dirs.1`; returns both machine IDs and whether `a` was still running when `b` finished.
/// Fails if `a` printed one of `b`'s nonces.
fn two_gens_at_once(dirs: (&Path, &Path), store: Option<&str>) -> (u64, u64, bool) {
    let mut args = vec!["gen", "-n", "4000000"];
    args.extend(store.iter().flat_map(|store| ["--store", store]));
    let mut a = std_nononce()
        .args(&args)
        .current_dir(dirs.0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut a_out = BufReader::new(a.stdout.take().unwrap());
    let mut first = String::new();
    a_out.read_line(&mut first).unwrap();
    args[2] = "1000";
    let b = nononce().args(&args).current_dir(dirs.1).assert().success();
    let b = String::from_utf8_lossy(&b.get_output().stdout).into_owned();
    let still_running = a.try_wait().unwrap().is_none();
    let b_values: std::collections::HashSet<&str> = b.lines().collect();
    assert_eq!(b_values.len(), 1000, "{b}");
    for line in std::iter::once(Ok(first.trim_end().to_owned())).chain(a_out.lines()) {
        let line = line.unwrap();
        assert!(!b_values.contains(line.as_str()), "both printed {line}");
    }
    assert!(a.wait().unwrap().success());
    let b_first = b.lines().next().unwrap();
    (
        machine_ids(&first)[0],
        machine_ids(b_first)[0],
        still_running,
    )
}

#[test]
fn gen_defaults_to_an_embedded_sqlite_store_shared_by_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, concurrent) = two_gens_at_once((dir.path(), dir.path()), None);
    assert!(concurrent, "a was generating while b ran");
    assert_ne!(a, b);
    assert!(default_store_file().exists());
    let list = run_ok(&["leases", "list", "--store", &default_store()]);
    assert!(list.contains("of 512 free"), "{list}");
}

/// The default store was `./nononce-leases.db`: two gens from two folders both leased machine
/// ID 0 and printed the same nonces. It is the user's, in `XDG_STATE_HOME`, from every folder.
#[test]
fn two_gens_from_two_folders_share_the_default_store() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b, concurrent) = two_gens_at_once((one.path(), two.path()), None);
    assert!(concurrent, "a was generating while b ran");
    assert_ne!(a, b);
    for dir in [&one, &two] {
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "a file in the folder"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let folder = default_store_file().parent().unwrap().metadata().unwrap();
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
    }
}

/// A store in memory lives and dies with its process: every process would get machine ID 0.
#[test]
fn a_sqlite_store_in_memory_is_refused() {
    for store in [
        "sqlite::memory:",
        "sqlite://:memory:",
        "sqlite://",
        "sqlite://x.db?mode=memory",
    ] {
        let err = assert_one_line_failure(&run(&["gen", "--store", store]), store);
        assert!(
            err.contains("in memory lives and dies with one process"),
            "{err}"
        );
    }
}

/// `--store-env VAR` and `NONONCE_STORE`: the URL (and its password) out of `ps`; an unset or
/// empty variable is refused, never replaced by the default store.
#[test]
fn the_store_url_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env.db");
    let url = format!("sqlite://{}", file.display());
    let out = nononce()
        .args(["gen", "--store-env", "LEASES_URL"])
        .env("LEASES_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(file.exists());
    assert!(!default_store_file().exists());
    let out = nononce()
        .args(["leases", "list", "--format", "json"])
        .env("NONONCE_STORE", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // --store wins over NONONCE_STORE.
    let other = format!("sqlite://{}", dir.path().join("other.db").display());
    let out = nononce()
        .args(["gen", "--store", &other])
        .env("NONONCE_STORE", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("other.db").exists());
    let err = assert_one_line_exit(
        &nononce()
            .args(["gen", "--store-env", "NO_SUCH_VAR_X"])
            .env_remove("NO_SUCH_VAR_X")
            .output()
            .unwrap(),
        "unset",
        2,
    );
    assert_eq!(
        err.trim_end(),
        "nononce: --store-env NO_SUCH_VAR_X: the environment variable NO_SUCH_VAR_X is not set: export NO_SUCH_VAR_X=URL, or give --store URL"
    );
    let err = assert_one_line_exit(
        &nononce()
            .args(["gen"])
            .env("NONONCE_STORE", "")
            .output()
            .unwrap(),
        "empty",
        2,
    );
    assert_eq!(
        err.trim_end(),
        "nononce: NONONCE_STORE: the environment variable NONONCE_STORE is empty: set it to the store URL, or unset it to use the default store"
    );
    assert!(!default_store_file().exists());
    let out = run(&["gen", "--store", &url, "--store-env", "LEASES_URL"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn leases_on_postgres_and_mariadb() {
    let dir = tempfile::tempdir().unwrap();
    for base in [pg_url(), mysql_url()] {
        let store = format!("{base}?table={}", unique("nononce_cli"));
        assert!(run_ok(&["leases", "migrate", "--store", &store]).contains("512 rows added"));
        assert!(run_ok(&["leases", "migrate", "--store", &store]).contains("0 rows added"));
        let (a, b, _) = two_gens_at_once((dir.path(), dir.path()), Some(&store));
        assert_ne!(a, b);
        // `a` ended last: its ID is in its release guard (10 s) from just now, whatever the
        // load made `a` take after `b` ended.
        let list = run_ok(&["leases", "list", "--store", &store]);
        assert!(listed(&list, a), "{list}");
        assert!(release(&store, a).contains("freed"));
        drop_table(&store);
    }
}

#[test]
fn gen_then_decode_round_trips_every_kind_and_size() {
    for kind in ["counter", "sortable"] {
        for bits in ["64", "96", "128"] {
            let out = ok(&format!(
                "gen --kind {kind} --bits {bits} --machine-id 37 -n 5"
            ));
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
    let int = run_ok(&["gen", "--machine-id", "3", "--format", "int"]);
    assert!(int.trim().parse::<u64>().is_ok());
}

#[test]
fn encrypted_gen_decrypts_to_this_machine() {
    for (bits, extra) in [("64", "speck"), ("96", "speck"), ("128", "aes")] {
        let flag = format!("--cipher{bits}");
        let e = ok(&format!(
            "gen --kind encrypted --bits {bits} --machine-id 44 --base-key-hex {KEY} {flag} {extra}"
        ));
        let d = run_ok(&["decrypt", e.trim(), "--base-key-hex", KEY, &flag, extra]);
        assert_eq!(json(d.trim())["machine_id"], 44, "{bits}");
    }
}

#[test]
fn encrypt_decrypt_round_trip_and_known_answer() {
    // AES-256 of the zero block under the key derived with salt `aes` (tests/data of nonce-core).
    let e = ok(&format!(
        "encrypt 00000000000000000000000000000000 --base-key-hex {KEY}"
    ));
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
    let e = ok(&format!(
        "encrypt 0123456789abcdef --base-key-hex {KEY} --cipher64 des3"
    ));
    let d = ok(&format!("decrypt {e} --base-key-hex {KEY} --cipher64 des3"));
    assert_eq!(d.trim(), "0123456789abcdef");
}

/// Bad input gets one `nononce: ` line saying what is wrong and nothing on stdout: status 1, or
/// 2 for usage errors (clap's), as usage errors have. (`KEY` stands for a valid key.)
#[test]
fn bad_input_gets_one_clear_line_and_a_failure() {
    for (line, code, message) in [
        ("decode xyz", 1, "malformed nonce"),
        (
            "decode zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
            1,
            "malformed nonce",
        ),
        ("encrypt 0011 --base-key-hex KEY", 1, "malformed nonce"),
        (
            "encrypt 0123456789abcdef --base-key-hex 0011",
            2,
            "at least 32",
        ),
        ("encrypt 0123456789abcdef --base-key-hex xyz", 2, "not hex"),
        (
            "encrypt 0123456789abcdef00000001 --base-key-hex KEY",
            1,
            "32 zero bits",
        ),
        ("gen --kind encrypted --machine-id 1", 2, "need a key"),
        ("gen --machine-id 512", 2, "out of range"),
        ("gen --bits 32", 2, "use"),
        ("encrypt 00 --base-key-hex KEY --cipher128 rot13", 2, "use"),
        (
            "encrypt 03be4cb500002000 --cipher64 rot13 --base-key-hex KEY",
            2,
            "",
        ),
        ("gen --machine-id 70000", 2, ""),
        ("gen --nope", 2, ""),
        ("frobnicate", 2, ""),
        ("", 2, ""),
        ("decode", 2, ""),
    ] {
        let line = line.replace("KEY", KEY);
        let out = run(&line.split_whitespace().collect::<Vec<_>>());
        let err = assert_one_line_exit(&out, &line, code);
        assert!(err.contains(message), "{line}: {err}");
    }
}

#[test]
fn help_has_examples() {
    for args in [&["--help"][..], &["gen", "--help"]] {
        assert!(run_ok(args).contains("Examples:"));
    }
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
    assert_eq!(machine_ids(&String::from_utf8(out).unwrap()), [12; 3]);
    for (store, needle, code) in [
        ("hosts:no-such-host.invalid", "node list", 1),
        ("ftp://example", "unknown store", 2),
    ] {
        let err = assert_one_line_exit(&run(&["gen", "--store", store]), store, code);
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn leases_on_redis_two_concurrent_gens_list_and_release() {
    let store = format!("{}&max_lease_s=120", redis_store(&redis8_url()));
    let dir = tempfile::tempdir().unwrap();
    let (id_a, id_b, still_running) = two_gens_at_once((dir.path(), dir.path()), Some(&store));
    assert!(still_running, "a was generating while b ran");
    assert_ne!(id_a, id_b);
    let list = run_ok(&["leases", "list", "--store", &store]);
    assert!(list.contains("of 512 free"), "{list}");
    // `a` ended last: its ID is in its release guard (10 s) from just now, whatever the load
    // made `a` take after `b` ended.
    assert!(listed(&list, id_a), "{list}");
    let out = release(&store, id_a);
    assert!(out.contains("freed"), "{out}");
    let list = run_ok(&["leases", "list", "--store", &store]);
    assert!(!listed(&list, id_a), "{list}");
    run_ok(&["leases", "migrate", "--store", &store]);
}

/// A hex typo that is valid base64url reads as a nonce of the 2140s: refused, never decoded.
#[test]
fn a_hex_typo_is_refused_not_decoded_as_base64url() {
    let err = assert_one_line_failure(&run(&["decode", "03be4cb50000200g"]), "typo");
    assert!(
        err.starts_with("nononce: malformed nonce \"03be4cb50000200g\""),
        "{err}"
    );
    assert!(err.contains("no nonce of that time is made yet"), "{err}");
    assert!(err.contains("--input base64url"), "{err}");
    // A 96-bit base64url nonce is read when asked for.
    let b64 = ok("gen --bits 96 --machine-id 3 --format base64url");
    let out = ok(&format!("decode --input base64url {b64} --format json"));
    assert_eq!(b64.trim().len(), 16);
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
        let nonces = ok(&format!(
            "gen --machine-id 21 -n 3 --format {format} --bits {bits}"
        ));
        let out = nononce()
            .args(["decode", "-", "--format", "json"])
            .write_stdin(nonces.clone())
            .assert()
            .success();
        let out = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{format} {bits}");
        for line in lines {
            let d: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(d["machine_id"], 21, "{format} {bits}: {line}");
            assert_eq!(d["bits"].to_string(), bits, "{format} {bits}: {line}");
        }
        // The same as arguments.
        let first = nonces.lines().next().unwrap();
        let d = ok(&format!("decode {first} --format json --bits {bits}"));
        assert!(d.contains("\"machine_id\":21"), "{d}");
    }
    // A bad line is named by its number.
    let out = nononce()
        .args(["decode", "-"])
        .write_stdin("03be4cb500002000\nnope\n")
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
        .args(["decode", "0000000000402001", "--input", "hex"])
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
    let file = file.display();
    let from_file = ok(&format!("encrypt 03be4cb500002000 --base-key-file {file}"));
    assert_eq!(from_file, expected);
    let e = nononce()
        .args("gen --kind encrypted --machine-id 4 --base-key-env NONCE_KEY".split(' '))
        .env("NONCE_KEY", KEY)
        .assert()
        .success();
    let e = String::from_utf8_lossy(&e.get_output().stdout);
    let d = ok(&format!("decrypt {e} --base-key-file {file}"));
    assert_eq!(json(d.trim())["machine_id"], 4);
    // Missing sources are named.
    let out = nononce()
        .args("encrypt 03be4cb500002000 --base-key-env NONONCE_NO_SUCH_VAR".split(' '))
        .env_remove("NONONCE_NO_SUCH_VAR")
        .output()
        .unwrap();
    let err = assert_one_line_exit(&out, "no such variable", 2);
    assert!(err.contains("NONONCE_NO_SUCH_VAR"), "{err}");
    let missing = dir.path().join("missing").display().to_string();
    let out = run(&["encrypt", "03be4cb500002000", "--base-key-file", &missing]);
    assert!(stderr(&out).contains(&missing));
}

/// `gen -n 0` makes nothing and leases nothing: no machine ID is held, nor blocked for its
/// release guard after.
#[test]
fn gen_of_no_nonces_leases_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    assert_eq!(run_ok(&["gen", "-n", "0", "--store", &store]), "");
    assert!(!dir.path().join("leases.db").exists());
    assert_eq!(run_ok(&["gen", "-n", "0"]), "");
    assert!(!default_store_file().exists());
}

/// Completion scripts that the shell reads without an error, naming every command, and a
/// manual page that `man` renders.
#[test]
fn completions_and_the_manual_page() {
    let script = run_ok(&["completions", "bash"]);
    for command in [
        "gen", "decode", "bounds", "encrypt", "decrypt", "leases", "lease",
    ] {
        assert!(script.contains(command), "{command}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nononce.bash");
    std::fs::write(&file, &script).unwrap();
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", stderr(&checked));
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(!run_ok(&["completions", shell]).is_empty(), "{shell}");
    }
    let page = run_ok(&["man"]);
    assert!(page.contains(".TH nononce 1"), "{page}");
    assert!(page.contains("lease"), "{page}");
    let err = assert_one_line_exit(&run(&["completions", "tcsh"]), "an unknown shell", 2);
    assert!(err.contains("possible values: bash"), "{err}");
}
