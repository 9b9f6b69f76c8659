//! SQL stores opened by URL ([`SqlBackend`]): the dialects this build has, one direct
//! connection to a server that must accept it, a SQLite file that must exist for reads and
//! whose table leasing creates, and the strategy's errors in the words of the `nononce`
//! command.

use std::path::{Path, PathBuf};

use lease_core::backend::duration;
use lease_core::error_chain_with;
use lease_core::{
    Access, Backend, BoxFuture, Explained, MachineId, OpenError, Opened, StoreUrl, Strategy as _,
};

use crate::{Dialect, SqlLeaseError, SqlStrategy};

/// Opens `sqlite://PATH`, `postgres://...` (`postgresql://`) and `mysql://...` (`mariadb://`)
/// stores, as the dialect features build them in, for a program that takes stores by URL.
///
/// A SQLite store is embedded in the node: leasing creates its file and table on first use,
/// reading never does. The URL options are [`SqlStrategy::connect_lazy`]'s.
#[derive(Debug, Clone, Copy, Default)]
pub struct SqlBackend;

impl Backend for SqlBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec![
            #[cfg(feature = "sqlite")]
            "sqlite",
            #[cfg(feature = "postgres")]
            "postgres",
            #[cfg(feature = "postgres")]
            "postgresql",
            #[cfg(feature = "mysql")]
            "mysql",
            #[cfg(feature = "mysql")]
            "mariadb",
        ]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec![
            #[cfg(feature = "sqlite")]
            "sqlite://PATH",
            #[cfg(feature = "postgres")]
            "postgres://...",
            #[cfg(feature = "mysql")]
            "mysql://...",
        ]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            // Nothing is connected yet: an error here is the URL's.
            let strategy =
                SqlStrategy::connect_lazy(store.url()).map_err(|e| store.error(chain(&e)))?;
            if store.access() == Access::Lease && strategy.check_terms(store.terms()).is_err() {
                let min = store.terms().min_ttl.as_secs();
                return Err(store.error(format!(
                    "max_lease_s={} is shorter than the {min} s minimum lease nononce gen accepts: use max_lease_s={min} or more",
                    strategy.max_lease_duration().as_secs()
                )));
            }
            if strategy.dialect() == Dialect::Sqlite {
                let path = sqlite_path(store.url()).ok_or_else(|| store.error(IN_MEMORY))?;
                check_sqlite(&path, store)?;
                if store.access() == Access::Lease {
                    // Embedded: its table is created on first use; servers are migrated by an
                    // operator (`nononce leases migrate`).
                    strategy
                        .migrate()
                        .await
                        .map_err(|e| store.error(describe(&e, store)))?;
                }
            } else {
                probe(store, &strategy).await?;
            }
            Ok(Opened::with_admin(strategy))
        })
    }

    fn explain(
        &self,
        error: &(dyn std::error::Error + 'static),
        store: &StoreUrl,
    ) -> Option<Explained> {
        let e = error.downcast_ref::<SqlLeaseError>()?;
        let shown = store.shown();
        let url = store.redacted();
        let cause = || std::error::Error::source(e).map(chain);
        Some(match e {
            SqlLeaseError::Exhausted { table } => Explained::new(format!(
                "all {} machine ids in lease table `{table}` of {shown} are leased: wait for one to expire, see the holders with `nononce leases list --store '{url}'`, or free a dead node's id with `nononce leases release`",
                MachineId::COUNT
            )),
            SqlLeaseError::WrongSchema { table, .. } => Explained::new(format!(
                "lease table `{table}` in {shown} does not have the expected columns: run `nononce leases migrate --store '{url}'`, which adds floor_ms to a table made by NoNoncense or an older nononce; otherwise point the store URL at the right table (?table=NAME)"
            )),
            SqlLeaseError::MissingTable { table, .. } => Explained::new(format!(
                "table `{table}` does not exist in {shown}: create it with `nononce leases migrate --store '{url}'`"
            )),
            SqlLeaseError::Connection(_) | SqlLeaseError::PermissionDenied { .. }
                if sqlite_path(store.url()).is_some() =>
            {
                let path = sqlite_path(store.url()).unwrap_or_default();
                Explained::new(format!(
                    "cannot use the SQLite file {}: {}: check that the directory {} exists and is writable (SQLite also writes -wal and -shm files beside the database)",
                    path.display(),
                    cause().unwrap_or_else(|| e.to_string()),
                    directory(&path).display()
                ))
            }
            SqlLeaseError::Unavailable(_) => Explained::new(format!(
                "{shown} did not answer or dropped the connection: {}",
                cause().unwrap_or_default()
            )),
            SqlLeaseError::Connection(_) => Explained::new(format!(
                "{shown} refused the connection: {}: check the user, password, database name and tls options in the store URL",
                cause().unwrap_or_default()
            )),
            SqlLeaseError::RowsDeleted {
                table,
                blocked,
                remaining,
            } => Explained::held_off(
                *remaining,
                format!(
                    "{blocked} machine ids had vanished from lease table `{table}` although it had been seeded (TRUNCATE or DELETE while the database stayed up), so running nodes may still use them; they are back, blocked until then. Wait, or free one with `nononce leases release --store '{url}' --id N --yes`: at once, on a floor at the end of its block (64-bit counter and sortable nonces wait for the clock to pass it). Never TRUNCATE or DELETE the lease table while nodes run"
                ),
            ),
            SqlLeaseError::ServerChanged { remaining, .. } => Explained::held_off(
                *remaining,
                format!(
                    "the database server is not the one that granted the leases (failover or restore), so it may lack leases still in use. If the server keeps every acknowledged write (Redis: appendonly yes, appendfsync always; SQL: synchronous replication), add amnesia_guard=off to the store URL; max_lease_s=SECONDS (the longest lease any node of this store holds; nononce gen holds {} s) and max_clock_offset_s=SECONDS (the largest offset of a node's clock from the server's; 3600 by default) shorten the hold-off",
                    store.terms().lease_duration.as_secs()
                ),
            ),
            // Every other error in its own words, the database's by its message alone.
            _ => Explained::new(chain(e)),
        })
    }
}

/// An error and its sources on one line; a database error by its message alone, without
/// PostgreSQL's source line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    error_chain_with(e, |error| match error.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Database(db)) => Some(db.message().to_owned()),
        _ => None,
    })
}

/// `error` as [`SqlBackend::explain`] says it.
fn describe(error: &SqlLeaseError, store: &StoreUrl) -> String {
    SqlBackend
        .explain(error, store)
        .map_or_else(|| chain(error), |explained| explained.message)
}

/// The directory of a database file (`.` for a bare file name).
fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Why a SQLite store without a file (`sqlite::memory:`, `mode=memory`, an empty path) is
/// refused: each process would lease from a database of its own.
const IN_MEMORY: &str = "a SQLite database in memory lives and dies with one process, so every process would lease machine id 0 from a store of its own: name a file, sqlite://PATH, that every process of this host opens";

/// The database file a SQLite URL names, as sqlx reads it; `None` in memory, for another
/// dialect, or without the `sqlite` feature.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (db, query) = rest.split_once('?').unwrap_or((rest, ""));
    if db.is_empty() || db == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    #[cfg(feature = "sqlite")]
    {
        let options: sqlx::sqlite::SqliteConnectOptions = format!("sqlite:{db}").parse().ok()?;
        Some(options.get_filename().to_path_buf())
    }
    #[cfg(not(feature = "sqlite"))]
    None
}

/// A SQLite file must exist to be read, and its directory to be created.
fn check_sqlite(path: &Path, store: &StoreUrl) -> Result<(), OpenError> {
    if store.access() == Access::Read {
        if !path.exists() {
            return Err(store.error(format!(
                "no SQLite database at {}: check the path (`nononce leases migrate --store '{}'` creates one; gen creates it on first use)",
                path.display(),
                store.redacted()
            )));
        }
        return Ok(());
    }
    if path.exists() {
        return Ok(());
    }
    let dir = directory(path);
    if !dir.is_dir() {
        return Err(store.error(format!(
            "cannot create the SQLite database {}: the directory {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// One direct connection to a database server, without the pool's retries.
async fn probe(store: &StoreUrl, strategy: &SqlStrategy) -> Result<(), OpenError> {
    match tokio::time::timeout(store.connect_timeout(), strategy.transport().connect_once()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(connect_error(&e, store)),
        Err(_) => Err(store.error(format!(
            "no answer within {}: check the host and port, or give it longer with --connect-timeout",
            duration(store.connect_timeout())
        ))),
    }
}

fn connect_error(e: &sqlx::Error, store: &StoreUrl) -> OpenError {
    let shown = store.shown();
    OpenError::new(match e {
        sqlx::Error::Io(io) => format!("{shown}: cannot connect: {io}"),
        sqlx::Error::Database(db) => format!(
            "{shown} refused the connection: {}: check the user, password and database name in the store URL",
            db.message()
        ),
        sqlx::Error::Tls(tls) => format!(
            "{shown}: TLS failed: {}: check the sslmode / ssl-mode option and the certificates",
            chain(&**tls)
        ),
        sqlx::Error::Configuration(c) => format!("{shown}: invalid URL: {c}"),
        // Another kind of server on the port: what it sent is not the dialect's handshake.
        sqlx::Error::Protocol(detail) => {
            let (server, port) = match store.scheme() {
                Some("postgres" | "postgresql") => ("PostgreSQL", 5432),
                _ => ("MySQL or MariaDB", 3306),
            };
            // The detail ends with the client's source location: not the user's concern.
            let detail = detail.split(" (sqlx").next().unwrap_or(detail);
            format!(
                "{shown}: the server does not speak the {server} protocol ({detail}): check the host and port ({server} listens on {port} by default)"
            )
        }
        other => format!("{shown}: cannot connect: {}", chain(other)),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lease_core::LeaseTerms;

    use super::*;

    fn store(url: &str, access: Access) -> StoreUrl {
        let terms = LeaseTerms::new(
            Duration::from_secs(120),
            Duration::from_secs(30),
            Duration::from_secs(10),
        );
        StoreUrl::new(url, url, access, terms)
    }

    #[test]
    fn schemes_are_the_dialects_built_in() {
        let schemes = SqlBackend.schemes();
        assert_eq!(schemes.contains(&"sqlite"), cfg!(feature = "sqlite"));
        assert_eq!(schemes.contains(&"postgresql"), cfg!(feature = "postgres"));
        assert_eq!(schemes.contains(&"mariadb"), cfg!(feature = "mysql"));
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_paths() {
        for (url, path) in [
            ("sqlite://a/b.db", Some("a/b.db")),
            ("sqlite:///a/b.db?mode=rwc", Some("/a/b.db")),
            ("sqlite:x%3Fy.db", Some("x?y.db")),
            ("sqlite::memory:", None),
            ("sqlite://?mode=memory", None),
            ("postgres://h/db", None),
        ] {
            assert_eq!(sqlite_path(url), path.map(PathBuf::from), "{url}");
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn a_sqlite_file_is_never_created_by_a_read() {
        let dir = std::env::temp_dir().join("lease-sql-backend-no-such-dir");
        let file = dir.join("leases.db");
        let url = format!("sqlite://{}", file.display());
        let read = check_sqlite(&file, &store(&url, Access::Read)).unwrap_err();
        assert!(
            read.message.contains("no SQLite database at")
                && read
                    .message
                    .contains(&format!("`nononce leases migrate --store '{url}'`")),
            "{read}"
        );
        let lease = check_sqlite(&file, &store(&url, Access::Lease)).unwrap_err();
        assert_eq!(
            lease.message,
            format!(
                "store {url}: cannot create the SQLite database {}: the directory {} does not exist",
                file.display(),
                dir.display()
            )
        );
    }

    /// Two processes on `sqlite::memory:` each had a store of their own, and both got machine
    /// id 0: refused, whatever the access.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_sqlite_store_in_memory_is_refused() {
        for url in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://",
            "sqlite://?mode=memory",
            "sqlite://leases.db?mode=memory",
        ] {
            for access in [Access::Lease, Access::Migrate, Access::Read] {
                let Err(refused) = SqlBackend.open(&store(url, access)).await else {
                    panic!("{url} opened for {access:?}");
                };
                assert_eq!(
                    refused.message,
                    format!("store {url}: {IN_MEMORY}"),
                    "{url} for {access:?}"
                );
            }
        }
    }

    #[test]
    fn errors_name_the_command_that_fixes_them() {
        let store = store("postgres://h/db?table=t", Access::Read);
        let missing = SqlLeaseError::Exhausted { table: "t".into() };
        let said = SqlBackend.explain(&missing, &store).unwrap();
        assert!(
            said.message.starts_with(
                "all 512 machine ids in lease table `t` of store postgres://h/db?table=t are leased"
            ),
            "{}",
            said.message
        );
        let held = SqlLeaseError::RowsDeleted {
            table: "t".into(),
            blocked: 3,
            remaining: Duration::from_secs(90),
        };
        let said = SqlBackend.explain(&held, &store).unwrap();
        assert_eq!(said.hold_off, Some(Duration::from_secs(90)));
        assert!(
            said.message.contains(
                "`nononce leases release --store 'postgres://h/db?table=t' --id N --yes`"
            ),
            "{}",
            said.message
        );
    }
}
