//! The run's own coordinator (a server of each backend, or a SQLite file): where nodes and
//! direct writes reach it, and killing and restarting it.

use std::net::SocketAddr;

use super::schedule::{Features, LEASE_MS};
use super::servers::{EtcdServer, Mariadb, Postgres, ZooKeeperEnsemble, loopback};
use crate::launcher::Server;

/// The session timeout ZooKeeper nodes ask for (`session_timeout_s`), in whole seconds: their
/// leases last three quarters of it (3.75 s, below the 5 s the nodes ask for), so a partition
/// or a freeze of more than a lease outlasts the session too and the ensemble hands the ID on.
pub const ZOOKEEPER_SESSION_S: u64 = 5;

/// The ZooKeeper nodes' `max_clock_offset_s`: the run's clock bound (`max_clock_offset_ms`), so
/// that lease-zookeeper's amnesia hold-off (after a root found without its marker, or an
/// ensemble gone back in time) is the session and twice the bound, as the other stores' is the
/// lease and twice the bound: after the wipe a successor's clock has passed what a forgotten
/// holder issued before it can claim the ID (the floors went with the root). `session_only`:
/// no clock term, the hold-off the session alone (`--zookeeper-session-hold-off`, to see what
/// the clock term prevents).
pub fn zookeeper_clock_offset_s(max_clock_offset_ms: u64, session_only: bool) -> u64 {
    if session_only {
        0
    } else {
        max_clock_offset_ms.div_ceil(1000)
    }
}

/// lease-zookeeper's amnesia hold-off for nodes whose `max_clock_offset_s` is `offset_s`.
pub const fn zookeeper_hold_off_s(offset_s: u64) -> u64 {
    ZOOKEEPER_SESSION_S + 2 * offset_s
}

/// lease-sql URL options for the nodes: the amnesia guard holds acquisitions off for the
/// longest lease (the nodes' lease) and twice the run's clock bound after the database's
/// identity changes or rows vanished from the table (SQLite: for the lease alone); with
/// `guard` false it is off (`amnesia_guard=off`); `extra` is appended (`--sql-options`).
fn sql_options(extra: Option<&str>, max_clock_offset_ms: u64, guard: bool) -> String {
    let mut options = format!(
        "max_lease_s={}&max_clock_offset_s={}",
        LEASE_MS.div_ceil(1000),
        max_clock_offset_ms / 1000
    );
    if !guard {
        options.push_str("&amnesia_guard=off");
    }
    if let Some(extra) = extra {
        options.push('&');
        options.push_str(extra);
    }
    options
}

/// lease-sql URL options for SQLite nodes: none by default, so the hold-off after deleted rows
/// is the default longest lease (hours): on SQLite it leaves the clock offset out (its nodes
/// share one machine's clock), which the harness's skewed node clocks do not; `guard` false
/// turns the guard off, `extra` is appended (`--sql-options max_lease_s=5` shortens it).
fn sqlite_options(extra: Option<&str>, guard: bool) -> Option<String> {
    let options: Vec<&str> = (!guard)
        .then_some("amnesia_guard=off")
        .into_iter()
        .chain(extra)
        .collect();
    (!options.is_empty()).then(|| options.join("&"))
}

pub enum Coordinator {
    /// A file every node opens directly.
    Sqlite(String),
    /// Our own Valkey/Redis server, reached through the proxies.
    Redis(Server),
    /// Our own PostgreSQL primary (and replica), reached through the proxies; boxed, as it
    /// holds two servers.
    Postgres(Box<Postgres>),
    /// Our own MariaDB server, reached through the proxies.
    Mariadb(Mariadb),
    /// Our own etcd member, reached through the proxies.
    Etcd(EtcdServer),
    /// Our own ZooKeeper ensemble, each member reached through a proxy per node.
    ZooKeeper(ZooKeeperEnsemble),
}

impl Coordinator {
    /// The server of the run's own (none: SQLite and ZooKeeper's ensemble, whose members are
    /// in [`Self::servers`]; PostgreSQL's primary).
    fn server(&self) -> Option<&Server> {
        match self {
            Coordinator::Sqlite(_) | Coordinator::ZooKeeper(_) => None,
            Coordinator::Redis(s) => Some(s),
            Coordinator::Postgres(s) => Some(&s.primary),
            Coordinator::Mariadb(s) => Some(&s.server),
            Coordinator::Etcd(s) => Some(&s.server),
        }
    }

    fn server_mut(&mut self) -> Option<&mut Server> {
        match self {
            Coordinator::Sqlite(_) | Coordinator::ZooKeeper(_) => None,
            Coordinator::Redis(s) => Some(s),
            Coordinator::Postgres(s) => Some(&mut s.primary),
            Coordinator::Mariadb(s) => Some(&mut s.server),
            Coordinator::Etcd(s) => Some(&mut s.server),
        }
    }

    /// Every server that serves the nodes: the one server, or the ensemble's members.
    fn servers(&self) -> Vec<&Server> {
        match self {
            Coordinator::ZooKeeper(z) => z.members.iter().collect(),
            _ => self.server().into_iter().collect(),
        }
    }

    /// Where the proxies forward to: one group of proxies per address (none: SQLite).
    pub fn upstreams(&self) -> Vec<SocketAddr> {
        self.servers().iter().map(|s| loopback(s.port())).collect()
    }

    /// The store URL for direct writes (the steal fault).
    pub fn direct_url(&self) -> String {
        match self {
            Coordinator::Sqlite(url) => url.clone(),
            Coordinator::Redis(s) => format!("redis://127.0.0.1:{}", s.port()),
            Coordinator::Postgres(s) => s.url(),
            Coordinator::Mariadb(s) => s.url(),
            Coordinator::Etcd(s) => s.url(),
            Coordinator::ZooKeeper(z) => format!("zk://{}{}", z.hosts(), z.root),
        }
    }

    /// The store URL a node is given, through its proxies on `ports` (one per upstream), with
    /// the nodes' lease-sql URL options `sql_options` (see [`Self::sql_url_options`]); on
    /// ZooKeeper with the clock bound `zookeeper_clock_offset_s` (see
    /// [`zookeeper_clock_offset_s`]).
    pub fn node_url(
        &self,
        ports: &[u16],
        sql_options: Option<&str>,
        zookeeper_clock_offset_s: u64,
    ) -> String {
        let url = match (self, ports.first()) {
            (Coordinator::ZooKeeper(z), Some(_)) => {
                let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
                format!("zk://{}{}", hosts.join(","), z.root)
            }
            (_, Some(&port)) => with_port(&self.direct_url(), port),
            (_, None) => self.direct_url(),
        };
        let options = match self {
            // The amnesia hold-off is the longest lease (the nodes').
            Coordinator::Etcd(_) => Some(format!("max_lease_s={}", LEASE_MS.div_ceil(1000))),
            Coordinator::ZooKeeper(_) => Some(format!(
                "session_timeout_s={ZOOKEEPER_SESSION_S}&max_session_timeout_s={ZOOKEEPER_SESSION_S}&max_clock_offset_s={zookeeper_clock_offset_s}"
            )),
            _ => sql_options.map(str::to_owned),
        };
        match options {
            Some(o) => format!("{url}?{o}"),
            None => url,
        }
    }

    /// The lease-sql URL options of the nodes (none: not SQL); `guard` false turns the SQL
    /// amnesia guard off (Valkey/Redis nodes take a flag, etcd has no switch).
    pub fn sql_url_options(
        &self,
        sql_extra: Option<&str>,
        max_clock_offset_ms: u64,
        guard: bool,
    ) -> Option<String> {
        match self {
            Coordinator::Sqlite(_) => sqlite_options(sql_extra, guard),
            Coordinator::Postgres(_) | Coordinator::Mariadb(_) => {
                Some(sql_options(sql_extra, max_clock_offset_ms, guard))
            }
            _ => None,
        }
    }

    pub fn features(&self) -> Features {
        Features {
            proxy: !self.upstreams().is_empty(),
            server: !matches!(self, Coordinator::Sqlite(_)),
            replica: matches!(self, Coordinator::Postgres(_)),
            ensemble: matches!(self, Coordinator::ZooKeeper(_)),
        }
    }

    /// Whether a server (an ensemble's member) is down.
    pub fn is_down(&self) -> bool {
        self.servers().into_iter().any(Server::is_down)
    }

    /// Kills every server (every member of an ensemble) with `kill -9`.
    pub fn kill(&mut self) -> &'static str {
        if let Some(server) = self.server_mut() {
            server.kill();
        }
        if let Coordinator::ZooKeeper(z) = self {
            z.members.iter_mut().for_each(Server::kill);
        }
        match self {
            Coordinator::Sqlite(_) => "",
            Coordinator::Redis(_) => "server killed (kill -9; restarts empty)",
            Coordinator::Postgres(_) => {
                "primary killed (kill -9 of the postmaster and every backend; restarts with crash recovery)"
            }
            Coordinator::Mariadb(_) => {
                "server killed (kill -9; restarts with InnoDB crash recovery)"
            }
            Coordinator::Etcd(_) => {
                "member killed (kill -9; restarts with its data: keys, floors and etcd leases)"
            }
            Coordinator::ZooKeeper(_) => {
                "every member killed (kill -9; restarts with its data: znodes, sessions and their ephemeral znodes; the new leader gives every session a fresh timeout)"
            }
        }
    }

    /// Starts the server again (every member of an ensemble that is down) on its data.
    pub fn restart(&mut self) -> Result<(), String> {
        if let Coordinator::ZooKeeper(z) = self {
            return z.restart_down();
        }
        self.server_mut().map_or(Ok(()), Server::restart)
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
    use super::{
        sql_options, sqlite_options, with_port, zookeeper_clock_offset_s, zookeeper_hold_off_s,
    };

    #[test]
    fn the_zookeeper_hold_off_covers_twice_the_clock_bound_unless_told() {
        let hold_off = |bound_ms, session_only| {
            zookeeper_hold_off_s(zookeeper_clock_offset_s(bound_ms, session_only))
        };
        // The session, 5 s, and twice the 31 s bound of the short run with every skew.
        assert_eq!(hold_off(31_000, false), 67);
        // Whole seconds, rounded up.
        assert_eq!(hold_off(1_500, false), 9);
        assert_eq!(hold_off(31_000, true), 5);
    }

    #[test]
    fn the_amnesia_guard_is_on_unless_turned_off() {
        let on = sql_options(None, 31_000, true);
        assert_eq!(on, "max_lease_s=5&max_clock_offset_s=31");
        assert_eq!(sqlite_options(None, true), None);
        assert_eq!(
            sqlite_options(Some("max_lease_s=5"), false).as_deref(),
            Some("amnesia_guard=off&max_lease_s=5")
        );
        let off = sql_options(Some("x=1"), 2_000, false);
        assert_eq!(
            off,
            "max_lease_s=5&max_clock_offset_s=2&amnesia_guard=off&x=1"
        );
    }

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
