//! The duplicated StatefulSet ordinal with the conflict guard on loopback.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use super::bins::Bins;
use super::nodes::{Cluster, Node};

fn free_udp() -> Result<SocketAddr, String> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| format!("free udp port: {e}"))
}

/// Two nodes with one StatefulSet ordinal and the conflict guard on loopback: the later one
/// must stop within the bound. Returns the checker's line.
pub fn scenario(bins: &Bins, dir: &Path) -> Result<String, String> {
    const BOUND_MS: u64 = 10_000;
    eprintln!(
        "==> chaos: duplicated StatefulSet ordinal with the conflict guard ({})",
        dir.display()
    );
    let mut cluster = Cluster::new(bins.node.clone(), dir.to_path_buf(), "guard".into())?;
    let (first, second) = (free_udp()?, free_udp()?);
    for _ in 0..2 {
        cluster.nodes.push(Node::new("statefulset".into()));
    }
    // Both on pod `chaos-7`, each with its guard at `bind`, finding the first one's at `seed`.
    let guard_args = |bind: SocketAddr, seed: Option<SocketAddr>| {
        let seed = seed.map(|seed| format!("--guard-seed={seed}"));
        let args = ["--pod=chaos-7".to_owned(), format!("--guard-bind={bind}")];
        args.into_iter().chain(seed).collect::<Vec<_>>()
    };
    cluster.spawn_with(0, &guard_args(first, None))?;
    thread::sleep(Duration::from_secs(2));
    cluster.log(
        "duplicate_ordinal",
        Some(1),
        "second node with ordinal 7 starts",
    );
    cluster.spawn_with(1, &guard_args(second, Some(first)))?;
    thread::sleep(Duration::from_millis(BOUND_MS + 2_000));
    cluster.stop_all();
    drop(cluster);
    let out = Command::new(&bins.check)
        .arg(dir)
        .args(["--guard", "--bound-ms", &BOUND_MS.to_string(), "--json"])
        .arg(dir.join("report.json"))
        .output()
        .map_err(|e| format!("chaos-check: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    println!("{line}");
    if out.status.success() {
        Ok(line)
    } else {
        Err(format!(
            "{line}{}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
