//! Lease stores named by URL.
//!
//! Opening a store checks what can be checked at once, so a command fails fast with the real
//! cause: a server store gets one direct connection (a refused connection, a wrong password or
//! a server without `HSETEX` is reported before any lease is asked for, without the pool's or
//! the lease manager's retries); an etcd store's endpoints must accept a TCP connection (the
//! etcd client balances over them and would only time out; members that are down are left out
//! for the command's run) and answer one read of the prefix;
//! a SQLite store's file must exist for commands that only read it, and its directory for those
//! that create it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nononce::BoxStrategy;
use nononce::etcd::{EtcdOptions, EtcdStrategy};
use nononce::lease::{DynStoreAdmin, DynStrategy, Holder, MachineId, StoreAdmin};
use nononce::redis::{AmnesiaGuard, RedisOptions, RedisStrategy};
use nononce::sql::{Dialect, SqlStrategy, sqlx};

use crate::codec::shown;
use crate::lease::{describe, human};

/// The store `gen` uses without `--store`: a SQLite file in the working directory, so two
/// `gen` processes on one host never share a machine ID.
pub const DEFAULT_STORE: &str = "sqlite://nononce-leases.db";

/// The longest wait for the first connection to a server store. Generous: it only bounds a
/// server that accepts TCP connections and then says nothing.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a command does with a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads or edits what is there (`leases list`, `leases release`): never creates a store.
    Read,
    /// Creates or repairs the lease table (`leases migrate`).
    Migrate,
    /// Leases a machine ID (`gen`); an embedded SQLite store is created on first use.
    Lease,
}

/// A store as messages name it.
#[derive(Debug, Clone)]
pub struct StoreInfo {
    /// `store URL`, the URL without its password.
    pub shown: String,
    /// The URL without its password.
    pub url: String,
    /// The database file of a SQLite store.
    pub sqlite: Option<PathBuf>,
    /// The key prefix of an etcd store.
    pub etcd_prefix: Option<String>,
}

/// An opened store: a strategy to lease from and, for dynamic stores, operator commands.
pub struct Store {
    kind: Kind,
    info: StoreInfo,
}

enum Kind {
    /// An environment variable or host list: nothing to list or free.
    Static(BoxStrategy),
    /// A database table, a hash or an etcd prefix: leases and operator commands on one store,
    /// whichever backend keeps it.
    Dynamic {
        store: Box<dyn LeaseStore>,
        /// An embedded SQLite file, whose table `gen` creates on first use.
        embedded: bool,
    },
}

/// A strategy whose store operators list, free and migrate.
trait LeaseStore: DynStrategy + DynStoreAdmin {}

impl<S: DynStrategy + DynStoreAdmin> LeaseStore for S {}

const USAGE: &str = "use sqlite://PATH, postgres://..., mysql://..., redis://HOST:PORT (or rediss://), etcd://HOST:PORT[,HOST:PORT...] (or etcds://), env:VAR or hosts:NAME=ID,NAME=ID,...";

impl Store {
    /// Opens the store a `--store` URL names, for `access`.
    pub async fn open(url: &str, access: Access) -> Result<Self, String> {
        let redacted = shown_url(&redact(url));
        let mut info = StoreInfo {
            shown: format!("store {redacted}"),
            url: redacted,
            sqlite: None,
            etcd_prefix: None,
        };
        let fail = |info: &StoreInfo, e: &(dyn std::error::Error + 'static)| {
            format!("{}: {}", info.shown, describe(e, info))
        };
        let is_static = url.starts_with("env:") || url.starts_with("hosts:");
        if is_static && access != Access::Lease {
            return Err(static_store());
        }
        if let Some(variable) = url.strip_prefix("env:") {
            let s = nononce::statefulset::StatefulSetStrategy::from_env(variable)
                .map_err(|e| fail(&info, &e))?;
            return Ok(Self {
                kind: Kind::Static(Box::new(s)),
                info,
            });
        }
        if let Some(list) = url.strip_prefix("hosts:") {
            let nodes: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let s = nononce::hosts::HostListStrategy::new(&nodes).map_err(|e| fail(&info, &e))?;
            return Ok(Self {
                kind: Kind::Static(Box::new(s)),
                info,
            });
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            let (base, options) = redis_options(url)?;
            let s = RedisStrategy::connect(&base, options)
                .await
                .map_err(|e| fail(&info, &e))?;
            probe_redis(&base, &info).await?;
            return Ok(Self {
                kind: Kind::Dynamic {
                    store: Box::new(s),
                    embedded: false,
                },
                info,
            });
        }
        if url.starts_with("etcd://") || url.starts_with("etcds://") {
            // lease-etcd quotes a password it cannot decode: hidden here as in the URL.
            let options = EtcdOptions::from_url(url).map_err(|e| match password(url) {
                Some(password) => fail(&info, &e).replace(password, "***"),
                None => fail(&info, &e),
            })?;
            info.etcd_prefix = Some(options.prefix().to_owned());
            let s = EtcdStrategy::new(options).map_err(|e| fail(&info, &e))?;
            if access == Access::Lease
                && nononce::Strategy::check_config(&s, &crate::lease::config()).is_err()
            {
                return Err(short_max_lease(&info, etcd_max_lease(url)));
            }
            let s = match etcd_reachable(&s, &info).await? {
                // The client would keep sending part of the requests to a member that is down.
                Some(hosts) => EtcdStrategy::from_url(&etcd_with_hosts(url, &hosts))
                    .map_err(|e| fail(&info, &e))?,
                None => s,
            };
            probe_etcd(&s, &info).await?;
            return Ok(Self {
                kind: Kind::Dynamic {
                    store: Box::new(s),
                    embedded: false,
                },
                info,
            });
        }
        if ["sqlite:", "postgres:", "postgresql:", "mysql:", "mariadb:"]
            .iter()
            .any(|p| url.starts_with(p))
        {
            // Nothing is connected yet: an error here is the URL's.
            let s = SqlStrategy::connect_lazy(url)
                .map_err(|e| format!("{}: {}", info.shown, crate::lease::chain(&e)))?;
            if access == Access::Lease && s.max_lease_duration() < crate::lease::config().min_ttl()
            {
                return Err(short_max_lease(&info, s.max_lease_duration()));
            }
            let embedded = s.dialect() == Dialect::Sqlite;
            if embedded {
                info.sqlite = sqlite_path(url);
                if let Some(path) = &info.sqlite {
                    check_sqlite(path, access, &info)?;
                }
            } else {
                probe_sql(url, s.dialect(), &info).await?;
            }
            return Ok(Self {
                kind: Kind::Dynamic {
                    store: Box::new(s),
                    embedded,
                },
                info,
            });
        }
        Err(format!("unknown store \"{}\": {USAGE}", shown(url)))
    }

    /// How messages name this store.
    pub fn info(&self) -> &StoreInfo {
        &self.info
    }

    /// Creates the lease table of an embedded SQLite store on first use; servers are migrated
    /// by an operator (`nononce leases migrate`).
    pub async fn prepare_embedded(&self) -> Result<(), String> {
        if let Kind::Dynamic {
            store,
            embedded: true,
        } = &self.kind
        {
            store.migrate_boxed().await.map_err(|e| self.fail(&e))?;
        }
        Ok(())
    }

    /// The strategy to lease with.
    pub fn into_strategy(self) -> BoxStrategy {
        match self.kind {
            Kind::Static(s) => s,
            Kind::Dynamic { store, .. } => store,
        }
    }

    /// The operator commands of this store; static stores have none.
    fn admin(&self) -> Result<&dyn DynStoreAdmin, String> {
        match &self.kind {
            Kind::Static(_) => Err(static_store()),
            Kind::Dynamic { store, .. } => Ok(&**store),
        }
    }

    fn fail(&self, e: &(dyn std::error::Error + 'static)) -> String {
        let text = describe(e, &self.info);
        if text.contains(&self.info.shown) {
            text
        } else {
            format!("{}: {text}", self.info.shown)
        }
    }

    /// Who holds which ID.
    pub async fn holders(&self) -> Result<Vec<Holder>, String> {
        self.admin()?
            .holders_boxed()
            .await
            .map_err(|e| self.fail(&e))
    }

    /// Frees `id` whoever holds it; whether it was held.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, String> {
        self.admin()?
            .force_release_boxed(id)
            .await
            .map_err(|e| self.fail(&e))
    }

    /// Creates or repairs the lease table; a hash or an etcd prefix needs none (the store must
    /// answer all the same).
    pub async fn migrate(&self) -> Result<String, String> {
        let migration = self
            .admin()?
            .migrate_boxed()
            .await
            .map_err(|e| self.fail(&e))?;
        Ok(migration.to_string())
    }
}

fn static_store() -> String {
    "env: and hosts: stores derive the id from the node itself: there is no lease table to inspect"
        .into()
}

fn short_max_lease(info: &StoreInfo, max: Duration) -> String {
    format!(
        "{}: max_lease_s={} is shorter than the {} s minimum lease nononce gen accepts: use max_lease_s={} or more",
        info.shown,
        max.as_secs(),
        crate::lease::config().min_ttl().as_secs(),
        crate::lease::config().min_ttl().as_secs()
    )
}

/// A URL as quoted in messages: escaped onto one line, cut short only when very long.
fn shown_url(url: &str) -> String {
    let mut out: String = url.chars().take(300).flat_map(char::escape_debug).collect();
    if url.chars().nth(300).is_some() {
        out.push_str("...");
    }
    out
}

/// The password in the user info of `url`, as written.
fn password(url: &str) -> Option<&str> {
    let start = url.find("://")? + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let at = url[start..end].rfind('@').map(|i| start + i)?;
    let colon = url[start..at].find(':').map(|i| start + i)?;
    Some(&url[colon + 1..at]).filter(|p| !p.is_empty())
}

/// `url` with its password (in the user info or a `password=` option) replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let end = out[start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..end].rfind('@').map(|i| start + i)
            && let Some(colon) = out[start..at].find(':').map(|i| start + i)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    if let Some((base, query)) = out.split_once('?') {
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some(("password", _)) => "password=***".to_owned(),
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{base}?{}", query.join("&"));
    }
    out
}

/// The database file a SQLite URL names, as sqlx reads it; `None` in memory.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (db, query) = rest.split_once('?').unwrap_or((rest, ""));
    if db.is_empty() || db == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    let options: sqlx::sqlite::SqliteConnectOptions = format!("sqlite:{db}").parse().ok()?;
    Some(options.get_filename().to_path_buf())
}

fn check_sqlite(path: &Path, access: Access, info: &StoreInfo) -> Result<(), String> {
    if access == Access::Read {
        if !path.exists() {
            return Err(format!(
                "{}: no SQLite database at {}: check the path (`nononce leases migrate --store '{}'` creates one; gen creates it on first use)",
                info.shown,
                path.display(),
                info.url
            ));
        }
        return Ok(());
    }
    if path.exists() {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "{}: cannot create the SQLite database {}: the directory {} does not exist",
            info.shown,
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// The URL the database driver reads: lease-sql's own options taken out.
fn driver_url(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
            !pair.is_empty()
                && ![
                    "table",
                    "max_lease_s",
                    "amnesia_guard",
                    "max_clock_offset_s",
                ]
                .contains(&key)
        })
        .collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// One direct connection to a database server, without the pool's retries.
async fn probe_sql(url: &str, dialect: Dialect, info: &StoreInfo) -> Result<(), String> {
    use sqlx::{ConnectOptions, Connection};
    let url = driver_url(url);
    let attempt = async {
        match dialect {
            Dialect::Postgres => {
                let options: sqlx::postgres::PgConnectOptions = url.parse()?;
                options.connect().await?.close().await
            }
            _ => {
                let options: sqlx::mysql::MySqlConnectOptions =
                    url.replacen("mariadb:", "mysql:", 1).parse()?;
                options.connect().await?.close().await
            }
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(sql_connect_error(&e, info)),
        Err(_) => Err(format!(
            "{}: no answer within {}: check the host and port",
            info.shown,
            human(PROBE_TIMEOUT)
        )),
    }
}

fn sql_connect_error(e: &sqlx::Error, info: &StoreInfo) -> String {
    let shown = &info.shown;
    match e {
        sqlx::Error::Io(io) => format!("{shown}: cannot connect: {io}"),
        sqlx::Error::Database(db) => format!(
            "{shown} refused the connection: {}: check the user, password and database name in the store URL",
            db.message()
        ),
        sqlx::Error::Tls(tls) => format!(
            "{shown}: TLS failed: {}: check the sslmode / ssl-mode option and the certificates",
            crate::lease::chain(&**tls)
        ),
        sqlx::Error::Configuration(c) => format!("{shown}: invalid URL: {c}"),
        other => format!("{shown}: cannot connect: {}", crate::lease::chain(other)),
    }
}

/// One direct connection to a Redis server: it must answer, and know `HSETEX`.
async fn probe_redis(base: &str, info: &StoreInfo) -> Result<(), String> {
    use nononce::redis::redis;
    let shown = &info.shown;
    let fail = |e: &redis::RedisError| {
        if e.is_io_error() || e.is_connection_refusal() {
            format!("{shown}: cannot connect: {}", crate::lease::chain(e))
        } else {
            format!("{shown}: {}", crate::lease::chain(e))
        }
    };
    let client = redis::Client::open(base).map_err(|e| fail(&e))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(PROBE_TIMEOUT))
        .set_response_timeout(Some(PROBE_TIMEOUT));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| fail(&e))?;
    let hsetex: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("HSETEX")
        .query_async(&mut connection)
        .await
        .map_err(|e| fail(&e))?;
    let known = match &hsetex {
        redis::Value::Array(items) => items.first().is_some_and(|i| *i != redis::Value::Nil),
        _ => true,
    };
    if !known {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await
            .unwrap_or_default();
        let version = ["valkey_version:", "redis_version:"]
            .iter()
            .find_map(|k| {
                info.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| format!(" ({} {})", k.trim_end_matches("_version:"), v.trim()))
            })
            .unwrap_or_default();
        return Err(format!(
            "{shown}: the server{version} does not support HSETEX: nononce needs Redis 8.0 or later, or Valkey 9.0 or later"
        ));
    }
    Ok(())
}

/// The longest lease an etcd URL sets (`max_lease_s`), lease-etcd's 8 h without one.
fn etcd_max_lease(url: &str) -> Duration {
    url.split_once('?')
        .and_then(|(_, query)| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix("max_lease_s="))
        })
        .and_then(|seconds| seconds.parse().ok())
        .map_or(Duration::from_secs(8 * 3600), Duration::from_secs)
}

/// How long the other endpoints of an etcd store may take to accept a TCP connection once one
/// has; those that take longer are left out with those that refuse.
const ETCD_GRACE: Duration = Duration::from_millis(500);

/// The `host:port` of an endpoint (`http://host:port`).
fn etcd_host(endpoint: &str) -> &str {
    endpoint.split_once("://").map_or(endpoint, |(_, a)| a)
}

/// Which endpoints of an etcd store accept a TCP connection: `None` when all do, the hosts
/// that do (in the URL's order) when only some do, and an error naming each one's cause when
/// none does (the etcd client, balancing over them, would only time out).
async fn etcd_reachable(s: &EtcdStrategy, info: &StoreInfo) -> Result<Option<Vec<String>>, String> {
    let shown = &info.shown;
    let hosts: Vec<String> = s
        .options()
        .endpoints()
        .iter()
        .map(|e| etcd_host(e).to_owned())
        .collect();
    let mut attempts = tokio::task::JoinSet::new();
    for (i, host) in hosts.iter().enumerate() {
        let host = host.clone();
        attempts.spawn(async move {
            let connected =
                tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(&host)).await;
            let result = match connected {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {}", human(PROBE_TIMEOUT))),
            };
            (i, result)
        });
    }
    let mut results: Vec<Option<Result<(), String>>> = vec![None; hosts.len()];
    let mut grace: Option<tokio::time::Instant> = None;
    loop {
        let next = match grace {
            Some(until) => match tokio::time::timeout_at(until, attempts.join_next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => attempts.join_next().await,
        };
        let Some(joined) = next else { break };
        if let Ok((i, result)) = joined {
            if result.is_ok() && grace.is_none() {
                grace = Some(tokio::time::Instant::now() + ETCD_GRACE);
            }
            results[i] = Some(result);
        }
    }
    attempts.abort_all();
    let live: Vec<String> = hosts
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r, Some(Ok(()))))
        .map(|(h, _)| h.clone())
        .collect();
    if live.len() == hosts.len() {
        return Ok(None);
    }
    if !live.is_empty() {
        return Ok(Some(live));
    }
    let why = |r: &Option<Result<(), String>>| match r {
        Some(Err(why)) => why.clone(),
        _ => "no answer".to_owned(),
    };
    Err(match results.as_slice() {
        [only] => format!("{shown}: cannot connect: {}", why(only)),
        _ => format!(
            "{shown}: cannot connect to any endpoint: {}",
            hosts
                .iter()
                .zip(&results)
                .map(|(h, r)| format!("{h}: {}", why(r)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })
}

/// An etcd URL with only `hosts` in its host list.
fn etcd_with_hosts(url: &str, hosts: &[String]) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let credentials = authority
        .rsplit_once('@')
        .map_or(String::new(), |(c, _)| format!("{c}@"));
    format!("{scheme}://{credentials}{}{tail}", hosts.join(","))
}

/// An etcd store must answer one read of the prefix, which also checks the credentials and
/// the read permission.
async fn probe_etcd(s: &EtcdStrategy, info: &StoreInfo) -> Result<(), String> {
    let shown = &info.shown;
    match tokio::time::timeout(PROBE_TIMEOUT, StoreAdmin::free_count(s)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => {
            let text = describe(&e, info);
            Err(if text.contains(shown.as_str()) {
                text
            } else {
                format!("{shown}: {text}")
            })
        }
        Err(_) => Err(format!(
            "{shown}: no answer within {}: check that the endpoints are etcd client URLs (port 2379 by default)",
            human(PROBE_TIMEOUT)
        )),
    }
}

/// The value of Redis store option `key` as whole seconds.
fn seconds(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("{key}=`{value}` is not a number of seconds"))
}

/// Splits `?key=..&max_lease_s=..&amnesia_guard=off&max_clock_offset_s=..` off a Redis URL.
fn redis_options(url: &str) -> Result<(String, RedisOptions), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut options = RedisOptions::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        options = match k {
            "key" => options.with_key(v),
            "max_lease_s" => {
                let seconds = seconds(k, v)?;
                let min = crate::lease::config().min_ttl().as_secs();
                if seconds < min {
                    return Err(format!(
                        "max_lease_s={seconds} is shorter than the {min} s minimum lease nononce gen accepts: use max_lease_s={min} or more"
                    ));
                }
                options.with_max_lease_duration(Duration::from_secs(seconds))
            }
            "amnesia_guard" => options.with_amnesia_guard(match v {
                "off" => AmnesiaGuard::Off,
                "hold_off" => AmnesiaGuard::HoldOff,
                _ => return Err(format!("amnesia_guard=`{v}`: use off or hold_off")),
            }),
            "max_clock_offset_s" => {
                options.with_max_clock_offset(Duration::from_secs(seconds(k, v)?))
            }
            _ => {
                return Err(format!(
                    "unknown redis store option `{k}`: use key, max_lease_s, amnesia_guard or max_clock_offset_s"
                ));
            }
        };
    }
    options
        .validate_for(&crate::lease::config())
        .map_err(|e| crate::lease::chain(&e))?;
    Ok((base.to_owned(), options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/app?table=t"),
            "postgres://app:***@db:5432/app?table=t"
        );
        assert_eq!(redact("mysql://root@db/app"), "mysql://root@db/app");
        assert_eq!(
            redact("redis://:pw@cache:6379/0?key=k"),
            "redis://:***@cache:6379/0?key=k"
        );
        assert_eq!(
            redact("postgres://db/app?user=a&password=b"),
            "postgres://db/app?user=a&password=***"
        );
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(
            redact("etcd://me:p%40ss@a:1,b:2/team/?max_lease_s=60"),
            "etcd://me:***@a:1,b:2/team/?max_lease_s=60"
        );
    }

    #[test]
    fn passwords_in_user_info() {
        assert_eq!(password("etcd://me:p%zz@a:1/p/"), Some("p%zz"));
        assert_eq!(password("redis://:pw@cache:6379/0"), Some("pw"));
        assert_eq!(password("etcd://me@a:1"), None);
        assert_eq!(password("etcd://a:1/x@y"), None);
    }

    #[test]
    fn etcd_host_lists() {
        let hosts = |h: &[&str]| h.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            etcd_with_hosts(
                "etcd://me:pw@a:1,b:2,c:3/p/?max_lease_s=60",
                &hosts(&["b:2"])
            ),
            "etcd://me:pw@b:2/p/?max_lease_s=60"
        );
        assert_eq!(
            etcd_with_hosts("etcds://a:1,[::1]:3", &hosts(&["a:1", "[::1]:3"])),
            "etcds://a:1,[::1]:3"
        );
        assert_eq!(
            etcd_with_hosts("etcd://a:1,b:2?max_lease_s=60", &hosts(&["a:1"])),
            "etcd://a:1?max_lease_s=60"
        );
        assert_eq!(
            etcd_max_lease("etcd://a:1/p?max_lease_s=60"),
            Duration::from_secs(60)
        );
        assert_eq!(etcd_max_lease("etcd://a:1"), Duration::from_secs(8 * 3600));
    }

    #[test]
    fn lease_sql_options_are_not_sent_to_the_driver() {
        assert_eq!(
            driver_url("postgres://h/db?table=t&sslmode=disable&amnesia_guard=off&max_lease_s=60"),
            "postgres://h/db?sslmode=disable"
        );
        assert_eq!(driver_url("mysql://h/db?table=t"), "mysql://h/db");
    }

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            sqlite_path("sqlite://a/b.db"),
            Some(PathBuf::from("a/b.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:///a/b.db?mode=rwc"),
            Some(PathBuf::from("/a/b.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:x%3Fy.db"),
            Some(PathBuf::from("x?y.db"))
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("sqlite://?mode=memory"), None);
    }
}
