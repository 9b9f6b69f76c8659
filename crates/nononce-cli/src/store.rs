//! Lease stores named by URL.

use nononce::BoxStrategy;

/// Opens the lease strategy a `--store` URL names.
pub fn open(url: &str) -> Result<BoxStrategy, String> {
    if let Some(variable) = url.strip_prefix("env:") {
        let s = nononce::statefulset::StatefulSetStrategy::from_env(variable)
            .map_err(|e| format!("store {url}: {e}"))?;
        return Ok(Box::new(s));
    }
    if let Some(list) = url.strip_prefix("hosts:") {
        let nodes: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let s = nononce::hosts::HostListStrategy::new(&nodes)
            .map_err(|e| format!("store {url}: {e}"))?;
        return Ok(Box::new(s));
    }
    Err(format!(
        "unknown store `{url}`: use env:VAR or hosts:NAME,NAME,..."
    ))
}
