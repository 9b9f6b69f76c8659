//! `cargo xtask sim [--seeds N] [--seed S] [--nodes N] [ARGS]`: the deterministic fleet
//! simulation of `crates/nononce-sim`, built with the `sim` profile (its own crates optimised,
//! its dependencies not: the workspace's Cargo.toml says why), over `N` seeds from `S` (default
//! 1000 seeds from 1) on every core. `--seed S` alone reruns one seed and prints the events that
//! led to its first violation. A sweep also runs a quarter as many seeds on ZooKeeper, which no
//! seed draws (`--zookeeper-seeds M` sets how many; `--backend` names one backend and runs only
//! it). Every other argument goes to the `nononce-sim` binary (`--backend`,
//! `--clocks`, `--without-floor`, `--without-release-guard`, `--without-amnesia-guard`, `--gap`,
//! `--keep-going`, `--trace`, `--jobs`, `--report DIR`: a timeline per backend,
//! `DIR/sim-<backend>.svg`, of the seed given or each backend's first failing seed, else its
//! first). Fails when any seed fails.

/// `cargo` arguments that build and run the simulation; its own arguments follow.
pub const COMMAND: [&str; 8] = [
    "run",
    "--profile",
    "sim",
    "--locked",
    "-q",
    "-p",
    "nononce-sim",
    "--",
];

pub fn run(args: &[String]) -> Result<(), String> {
    let started = std::time::Instant::now();
    // The simulation runs in the workspace's root: `--report DIR` is taken from where the
    // command was run.
    let mut args = args.to_vec();
    if let Some(i) = args.iter().position(|a| a == "--report")
        && let Some(dir) = args.get_mut(i + 1)
    {
        let absolute = std::path::absolute(&*dir).map_err(|e| format!("--report {dir}: {e}"))?;
        *dir = absolute.display().to_string();
    }
    let status = crate::workspace::cargo()
        .args(COMMAND)
        .args(&args)
        .current_dir(crate::workspace::root())
        .status()
        .map_err(|e| format!("sim: could not run cargo: {e}"))?;
    let secs = started.elapsed().as_secs_f64();
    if status.success() {
        eprintln!("xtask: simulation passed in {secs:.1} s");
        Ok(())
    } else {
        Err(format!(
            "simulation failed ({status}) after {secs:.1} s: rerun a failing seed with \
             `cargo xtask sim --seed N`"
        ))
    }
}
