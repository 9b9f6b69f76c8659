//! Loopback ports for the servers the suite and chaos start.
//!
//! A port from `bind(127.0.0.1:0)` lies in the kernel's ephemeral range, where every outgoing
//! connection is given its local port. A server that is killed and started again on its port
//! (chaos's coordinator and failover faults) could find it taken meanwhile: by a client's
//! connection, or by a client reconnecting to that very port, which on loopback connects to
//! itself (TCP simultaneous open) and then holds the port. Ports below the ephemeral range are
//! never given to a connection.
//!
//! `lease_testkit::ports` does the same for the crates' tests: xtask depends on no workspace
//! crate, so that it builds in seconds on a fresh clone.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The lowest port handed out: above the well-known services' ports (PostgreSQL, MariaDB,
/// Redis, etcd's 2379/2380).
const FIRST: u32 = 10_000;
/// The kernel's default ephemeral range starts here (`net.ipv4.ip_local_port_range`).
const DEFAULT_EPHEMERAL_LOW: u32 = 32_768;

/// Whether loopback `port` is free to listen on.
pub fn bindable(port: u16) -> bool {
    TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
}

/// A loopback port nothing listens on now, outside the ephemeral range where it can be had, so
/// that a server may stop and start again on it.
pub fn server_port() -> Result<u16, String> {
    // Each call starts where the last one ended, from a place of this process's own, so runs
    // side by side seldom try the same ports.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low();
    if low <= FIRST + 1_000 {
        // A machine whose ephemeral range covers nearly every port: the kernel's choice.
        return TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(|e| format!("free port: {e}"));
    }
    let span = low - FIRST;
    let start = process_offset();
    for _ in 0..span {
        let port = FIRST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).map_err(|e| format!("free port: {e}"))?;
        if bindable(port) {
            return Ok(port);
        }
    }
    Err(format!(
        "free port: every loopback port from {FIRST} to {low} is in use"
    ))
}

/// The low end of the kernel's ephemeral port range.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_LOW)
}

/// A starting place that differs between processes and runs.
fn process_offset() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::process::id().wrapping_mul(2_654_435_761) ^ nanos
}
