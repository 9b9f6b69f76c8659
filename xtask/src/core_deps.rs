//! `lease-core`'s promise to strategy authors, checked: depending on it alone pulls in no async
//! runtime, no telemetry and no futures crate, whatever its features.

/// Crates (and their `-`-suffixed parts, `tokio-macros`, `futures-util`, ...) that a strategy
/// depending only on `lease-core` must not build.
const FORBIDDEN: [&str; 4] = ["tokio", "tracing", "metrics", "futures"];

/// Fails naming every forbidden crate in `lease-core`'s normal dependency tree, with its
/// default features and with all of them.
pub fn check() -> Result<(), String> {
    for features in [None, Some("--all-features")] {
        let tree = tree(features)?;
        let mut found: Vec<&str> = tree
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|name| forbidden(name))
            .collect();
        found.sort_unstable();
        found.dedup();
        if !found.is_empty() {
            return Err(format!(
                "lease-core{} depends on {}: strategies build on lease-core alone, so it must \
                 not pull in tokio, tracing, metrics or futures; move the code that needs them \
                 to lease-manager",
                features.map_or(String::new(), |f| format!(" ({f})")),
                found.join(", ")
            ));
        }
    }
    Ok(())
}

fn forbidden(name: &str) -> bool {
    FORBIDDEN.iter().any(|crate_name| {
        name.strip_prefix(crate_name)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    })
}

/// `cargo tree` of `lease-core`'s normal dependencies, one crate name first on each line.
fn tree(features: Option<&str>) -> Result<String, String> {
    let mut command = crate::cargo();
    command
        .args(["tree", "--locked", "-p", "lease-core", "-e", "normal"])
        .args(["--prefix", "none"])
        .args(features)
        .current_dir(crate::workspace_root());
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

#[cfg(test)]
mod tests {
    use super::forbidden;

    #[test]
    fn names_and_their_parts_are_forbidden_others_not() {
        for name in [
            "tokio",
            "tokio-macros",
            "tracing-core",
            "metrics",
            "futures-util",
        ] {
            assert!(forbidden(name), "{name}");
        }
        for name in ["thiserror", "nonce-core", "tokiox", "lease-core"] {
            assert!(!forbidden(name), "{name}");
        }
    }
}
