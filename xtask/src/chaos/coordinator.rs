//! The run's own coordinator (a server of each backend, or a SQLite file): where nodes and
//! direct writes reach it, and killing and restarting it.

use std::net::SocketAddr;

use super::schedule::{Features, LEASE_MS};
use super::servers::{EtcdServer, Mariadb, Postgres, RedisServer, loopback};

/// lease-sql URL options for the nodes: the amnesia guard holds acquisitions off for the
/// longest lease (the nodes' lease) and twice the run's clock bound after the database's
/// identity changes; `extra` is appended (`--sql-options`).
fn sql_options(extra: Option<&str>, max_clock_offset_ms: u64) -> String {
    let mut options = format!(
        "max_lease_s={}&max_clock_offset_s={}",
        LEASE_MS.div_ceil(1000),
        max_clock_offset_ms / 1000
    );
    if let Some(extra) = extra {
        options.push('&');
        options.push_str(extra);
    }
    options
}

/// Options of the nodes' etcd URLs: the amnesia hold-off is the longest lease (the nodes').
fn etcd_options() -> String {
    format!("max_lease_s={}", LEASE_MS.div_ceil(1000))
}

pub enum Coordinator {
    /// A file every node opens directly.
    Sqlite(String),
    /// Our own Valkey/Redis server, reached through the proxies.
    Redis(RedisServer),
    /// Our own PostgreSQL primary (and replica), reached through the proxies.
    Postgres(Postgres),
    /// Our own MariaDB server, reached through the proxies.
    Mariadb(Mariadb),
    /// Our own etcd member, reached through the proxies.
    Etcd(EtcdServer),
}

impl Coordinator {
    /// Where the proxies forward to (none: SQLite).
    pub fn upstream(&self) -> Option<SocketAddr> {
        match self {
            Coordinator::Sqlite(_) => None,
            Coordinator::Redis(s) => Some(loopback(s.port)),
            Coordinator::Postgres(s) => Some(loopback(s.port())),
            Coordinator::Mariadb(s) => Some(loopback(s.port())),
            Coordinator::Etcd(s) => Some(loopback(s.port())),
        }
    }

    /// The store URL for direct writes (the steal fault).
    pub fn direct_url(&self) -> String {
        match self {
            Coordinator::Sqlite(url) => url.clone(),
            Coordinator::Redis(s) => s.url(),
            Coordinator::Postgres(s) => s.url(),
            Coordinator::Mariadb(s) => s.url(),
            Coordinator::Etcd(s) => s.url(),
        }
    }

    /// The store URL a node is given, through its proxy on `port`.
    pub fn node_url(
        &self,
        port: Option<u16>,
        sql_extra: Option<&str>,
        max_clock_offset_ms: u64,
    ) -> String {
        let through = |url: String, port: Option<u16>, options: Option<String>| {
            let url = match port {
                Some(port) => with_port(&url, port),
                None => url,
            };
            match options {
                Some(o) => format!("{url}?{o}"),
                None => url,
            }
        };
        match self {
            Coordinator::Sqlite(url) => url.clone(),
            Coordinator::Redis(s) => through(s.url(), port, None),
            Coordinator::Postgres(s) => through(
                s.url(),
                port,
                Some(sql_options(sql_extra, max_clock_offset_ms)),
            ),
            Coordinator::Mariadb(s) => through(
                s.url(),
                port,
                Some(sql_options(sql_extra, max_clock_offset_ms)),
            ),
            Coordinator::Etcd(s) => through(s.url(), port, Some(etcd_options())),
        }
    }

    pub fn features(&self) -> Features {
        Features {
            proxy: self.upstream().is_some(),
            server: !matches!(self, Coordinator::Sqlite(_)),
            replica: matches!(self, Coordinator::Postgres(s) if s.has_replica()),
        }
    }

    pub fn is_down(&self) -> bool {
        match self {
            Coordinator::Sqlite(_) => false,
            Coordinator::Redis(s) => s.is_down(),
            Coordinator::Postgres(s) => s.is_down(),
            Coordinator::Mariadb(s) => s.is_down(),
            Coordinator::Etcd(s) => s.is_down(),
        }
    }

    pub fn kill(&mut self) -> &'static str {
        match self {
            Coordinator::Sqlite(_) => "",
            Coordinator::Redis(s) => {
                s.kill();
                "server killed (kill -9; restarts empty)"
            }
            Coordinator::Postgres(s) => {
                s.kill();
                "primary killed (kill -9 of the postmaster and every backend; restarts with crash recovery)"
            }
            Coordinator::Mariadb(s) => {
                s.kill();
                "server killed (kill -9; restarts with InnoDB crash recovery)"
            }
            Coordinator::Etcd(s) => {
                s.kill();
                "member killed (kill -9; restarts with its data: keys, floors and etcd leases)"
            }
        }
    }

    pub fn restart(&mut self) -> Result<(), String> {
        match self {
            Coordinator::Sqlite(_) => Ok(()),
            Coordinator::Redis(s) => s.restart(),
            Coordinator::Postgres(s) => s.restart(),
            Coordinator::Mariadb(s) => s.restart(),
            Coordinator::Etcd(s) => s.restart(),
        }
    }
}

/// `url` with its host and port replaced by `127.0.0.1:port` (the node's proxy).
fn with_port(url: &str, port: u16) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let user = auth
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    let path = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    format!("{scheme}://{user}127.0.0.1:{port}{path}")
}

#[cfg(test)]
mod tests {
    use super::with_port;

    #[test]
    fn urls_are_pointed_at_the_proxy() {
        assert_eq!(
            with_port("postgres://postgres@127.0.0.1:5432/postgres", 9),
            "postgres://postgres@127.0.0.1:9/postgres"
        );
        assert_eq!(
            with_port("redis://127.0.0.1:6390", 9),
            "redis://127.0.0.1:9"
        );
        assert_eq!(with_port("etcd://127.0.0.1:2390", 9), "etcd://127.0.0.1:9");
    }
}
