//! `cargo xtask fuzz [--cases N]`: every fuzz target, in release mode, for a bounded time.
//!
//! Stable Rust has no libFuzzer, so the targets are property tests (proptest, and a seeded
//! generator where a crate has no proptest), fed arbitrary and structure-aware input:
//!
//! - `nonce-core` `tests/fuzz.rs`: nonce parsing (hex, base64url), decode, cipher names;
//! - `lease-static` `tests/fuzz.rs`: the StatefulSet variable parser, the host-list matcher;
//! - `lease-redis` `wire::fuzz`: the hash field parser and the free-ID scan;
//! - `nononce-cli` `tests/fuzz.rs`: the real binary with random bad arguments.
//!
//! `NONONCE_FUZZ_CASES` sets the case count of every target (the 1 MiB targets run 1/64 of them,
//! the CLI target 1/16, as each case starts a process). A plain `cargo test` runs them too,
//! with 256. (Not `PROPTEST_CASES`: proptest applies it over every target's own count.)

use std::time::Instant;

/// Cases per target unless `--cases N` says otherwise: about a minute on two cores.
const DEFAULT_CASES: u32 = 20_000;

/// The cargo arguments that select exactly the fuzz targets.
const TARGETS: [(&str, &str); 4] = [
    ("nonce-core", "-p nonce-core --test integration -- fuzz::"),
    (
        "lease-static",
        "-p lease-static --test integration -- fuzz::",
    ),
    ("lease-redis", "-p lease-redis --lib -- wire::fuzz::"),
    ("nononce-cli", "-p nononce-cli --test integration -- fuzz::"),
];

fn parse_cases(args: &[String]) -> Result<u32, String> {
    match args {
        [] => Ok(DEFAULT_CASES),
        [flag, n] if flag == "--cases" => n
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("--cases `{n}`: give a positive number of cases")),
        _ => Err("usage: cargo xtask fuzz [--cases N]".into()),
    }
}

/// Runs every fuzz target with `--cases N` (default 20 000) cases each.
pub fn run(args: &[String]) -> Result<(), String> {
    let cases = parse_cases(args)?;
    let root = crate::workspace::root();
    let started = Instant::now();
    for (name, selection) in TARGETS {
        let target_started = Instant::now();
        let mut cmd = crate::workspace::cargo();
        cmd.args(["test", "--release", "--locked"])
            .args(selection.split_whitespace())
            .env("NONONCE_FUZZ_CASES", cases.to_string())
            .env_remove("PROPTEST_CASES")
            .current_dir(&root);
        eprintln!(
            "==> fuzz {name}: NONONCE_FUZZ_CASES={cases} cargo test --release --locked {selection}"
        );
        let status = cmd
            .status()
            .map_err(|e| format!("fuzz {name}: could not run cargo: {e}"))?;
        let secs = target_started.elapsed().as_secs_f64();
        if !status.success() {
            return Err(format!(
                "fuzz {name} failed ({status}) after {secs:.1} s; the failing input is printed above"
            ));
        }
        eprintln!("<== fuzz {name}: ok in {secs:.1} s");
    }
    eprintln!(
        "xtask: fuzz: 4 targets, {cases} cases each, ok in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_argument() {
        assert_eq!(parse_cases(&[]), Ok(DEFAULT_CASES));
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(parse_cases(&args(&["--cases", "50"])), Ok(50));
        assert!(parse_cases(&args(&["--cases", "0"])).is_err());
        assert!(parse_cases(&args(&["--cases", "x"])).is_err());
        assert!(parse_cases(&args(&["--cases"])).is_err());
        assert!(parse_cases(&args(&["--long"])).is_err());
    }
}
