//! `cargo xtask`: everything that is not plain cargo.
//!
//! - `cargo xtask test`: the whole check suite CI runs (format, lints, tests, loom, docs,
//!   the no_std proof).
//! - `cargo xtask nostd`: only the no_std proof.
//! - `cargo xtask bench [ARGS]`: `cargo bench -p nonce-core` with extra criterion arguments.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("nostd") => Steps::new().run_all(&nostd_steps()),
        Some("bench") => Steps::new().run_all(&[Step::cargo(
            "benchmarks",
            &[
                &["bench", "-p", "nonce-core", "--bench", "nonces", "--"][..],
                &str_refs(&args[1..]),
            ]
            .concat(),
        )]),
        _ => {
            eprintln!("usage: cargo xtask <test|nostd|bench [criterion args]>");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn str_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

struct Step {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    dir: Option<PathBuf>,
}

impl Step {
    fn cargo(name: &'static str, args: &[&str]) -> Self {
        Self {
            name,
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            dir: None,
        }
    }

    fn env(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    fn dir(mut self, dir: PathBuf) -> Self {
        self.dir = Some(dir);
        self
    }
}

struct Steps {
    passed: usize,
}

impl Steps {
    fn new() -> Self {
        Self { passed: 0 }
    }

    fn run(&mut self, step: &Step) -> Result<(), String> {
        let started = Instant::now();
        eprintln!("==> {}: cargo {}", step.name, step.args.join(" "));
        let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(&step.args)
            .current_dir(step.dir.clone().unwrap_or_else(workspace_root));
        for (k, v) in &step.env {
            cmd.env(k, v);
        }
        let status = cmd
            .status()
            .map_err(|e| format!("{}: could not run cargo: {e}", step.name))?;
        let secs = started.elapsed().as_secs_f64();
        if status.success() {
            self.passed += 1;
            eprintln!("<== {}: ok in {secs:.1} s", step.name);
            Ok(())
        } else {
            Err(format!("{} failed ({status}) after {secs:.1} s", step.name))
        }
    }

    fn run_all(&mut self, steps: &[Step]) -> Result<(), String> {
        for step in steps {
            self.run(step)?;
        }
        Ok(())
    }
}

fn nostd_steps() -> Vec<Step> {
    let root = workspace_root();
    let dir = root.join("xtask/no-std-proof");
    let target = root.join("target/no-std-proof").display().to_string();
    vec![
        Step::cargo("no_std proof, no features", &["build", "--locked"])
            .dir(dir.clone())
            .env("CARGO_TARGET_DIR", target.clone()),
        Step::cargo(
            "no_std proof, every cipher",
            &["build", "--locked", "--features", "ciphers"],
        )
        .dir(dir)
        .env("CARGO_TARGET_DIR", target),
    ]
}

fn test() -> Result<(), String> {
    let root = workspace_root();
    let mut steps = vec![
        Step::cargo("format", &["fmt", "--all", "--check"]),
        Step::cargo(
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
        ),
        Step::cargo(
            "clippy, nonce-core without features",
            &[
                "clippy",
                "-p",
                "nonce-core",
                "--no-default-features",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
        ),
        Step::cargo(
            "tests",
            &["test", "--workspace", "--all-features", "--locked"],
        ),
        Step::cargo(
            "loom",
            &[
                "test",
                "-p",
                "nonce-core",
                "--test",
                "loom",
                "--release",
                "--locked",
            ],
        )
        .env("RUSTFLAGS", "--cfg loom")
        .env(
            "CARGO_TARGET_DIR",
            root.join("target/loom").display().to_string(),
        ),
        Step::cargo(
            "docs",
            &[
                "doc",
                "--workspace",
                "--no-deps",
                "--all-features",
                "--locked",
            ],
        )
        .env("RUSTDOCFLAGS", "-D warnings"),
    ];
    steps.extend(nostd_steps());
    let mut runner = Steps::new();
    let result = runner.run_all(&steps);
    let failed = usize::from(result.is_err());
    println!("xtask: {} passed, {failed} failed", runner.passed);
    result
}
