//! Loopback ports for the servers a backend's tests start themselves.
//!
//! A port from `bind(127.0.0.1:0)` lies in the kernel's ephemeral range, where every outgoing
//! connection is given its local port. A test that kills its server and starts it again on the
//! same port (a crash, a failover) could find the port taken meanwhile: by a client's
//! connection, or by a client reconnecting to that very port, which on loopback connects to
//! itself (TCP simultaneous open) and then holds it. [`server_port`] hands out ports below the
//! ephemeral range, which no connection is given.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The lowest port handed out: above the well-known services' ports (PostgreSQL, MySQL,
/// Redis, etcd).
const FIRST: u32 = 10_000;
/// Where Linux's default ephemeral range starts (`net.ipv4.ip_local_port_range`).
const DEFAULT_EPHEMERAL_LOW: u32 = 32_768;

/// A loopback TCP port nothing listens on now, outside the ephemeral range where the machine
/// has one, so that a server may stop and start again on it.
///
/// Calls in one process try ports one after another from a place of the process's own, so two
/// servers of one test never get the same port and processes side by side seldom try the same
/// ones. The port is free when it is returned, not reserved: start the server on it at once.
///
/// ```
/// let port = lease_testkit::ports::server_port().unwrap();
/// assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
/// ```
///
/// # Errors
///
/// When no port can be bound on loopback.
pub fn server_port() -> io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low();
    if low <= FIRST + 1_000 {
        // An ephemeral range that covers nearly every port: the kernel's choice.
        return TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()
            .map(|addr| addr.port());
    }
    let span = low - FIRST;
    let start = process_offset();
    for _ in 0..span {
        let port = FIRST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).map_err(io::Error::other)?;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every loopback port from {FIRST} to {low} is in use"),
    ))
}

/// The low end of the kernel's ephemeral port range (Linux), or the usual one.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_lie_below_the_ephemeral_range_and_differ() {
        let low = ephemeral_low();
        let a = server_port().unwrap();
        let b = server_port().unwrap();
        assert_ne!(a, b);
        if low > FIRST + 1_000 {
            for port in [a, b] {
                assert!(
                    (FIRST..low).contains(&u32::from(port)),
                    "{port} not below {low}"
                );
            }
        }
    }
}
