//! `lease-core`'s promise to strategy authors, checked: depending on it pulls in the machine ID's
//! own crate and nothing else (no async runtime, no telemetry, no cipher, no proc macro),
//! whatever its features.

/// The whole normal dependency tree `lease-core` may have.
const ALLOWED: [&str; 2] = ["lease-core", "machine-id"];

/// Fails naming every crate in `lease-core`'s normal dependency tree beyond [`ALLOWED`], with
/// its default features and with all of them.
pub fn check() -> Result<(), String> {
    for features in [None, Some("--all-features")] {
        let tree = tree(features)?;
        let mut found: Vec<&str> = tree
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|name| !ALLOWED.contains(name))
            .collect();
        found.sort_unstable();
        found.dedup();
        if !found.is_empty() {
            return Err(format!(
                "lease-core{} depends on {}: strategies build on lease-core alone, so its \
                 dependency tree must stay {}; move the code that needs them to lease-manager \
                 (or, for the machine ID, to machine-id)",
                features.map_or(String::new(), |f| format!(" ({f})")),
                found.join(", "),
                ALLOWED.join(" and ")
            ));
        }
    }
    Ok(())
}

/// `cargo tree` of `lease-core`'s normal dependencies, one crate name first on each line.
fn tree(features: Option<&str>) -> Result<String, String> {
    let mut command = crate::workspace::cargo();
    command
        .args(["tree", "--locked", "-p", "lease-core", "-e", "normal"])
        .args(["--prefix", "none"])
        .args(features)
        .current_dir(crate::workspace::root());
    let output = command
        .output()
        .map_err(|e| format!("could not run cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo tree failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("cargo tree printed non-UTF-8: {e}"))
}
