//! Lease stores named by URL.

use std::time::Duration;

use nononce::BoxStrategy;

use crate::codec::shown;
use nononce::lease::Holder;
use nononce::lease::MachineId;
use nononce::redis::{AmnesiaGuard, RedisOptions, RedisStrategy};
use nononce::sql::SqlStrategy;

/// The store `gen` uses without `--store`: a SQLite file in the working directory, so two
/// `gen` processes on one host never share a machine ID.
pub const DEFAULT_STORE: &str = "sqlite://nononce-leases.db";

/// An opened store: a strategy to lease from and, for dynamic stores, operator views.
pub enum Store {
    /// An environment variable or host list: nothing to list or free.
    Static(BoxStrategy),
    /// Valkey 9 / Redis 8.
    Redis(RedisStrategy),
    /// PostgreSQL, MySQL/MariaDB or SQLite.
    Sql(SqlStrategy),
}

const USAGE: &str = "use sqlite://PATH, postgres://..., mysql://..., redis://HOST:PORT (or rediss://), env:VAR or hosts:NAME,NAME,...";

impl Store {
    /// Opens the store a `--store` URL names.
    pub async fn open(url: &str) -> Result<Self, String> {
        if let Some(variable) = url.strip_prefix("env:") {
            let s = nononce::statefulset::StatefulSetStrategy::from_env(variable)
                .map_err(|e| format!("store {}: {e}", shown(url)))?;
            return Ok(Self::Static(Box::new(s)));
        }
        if let Some(list) = url.strip_prefix("hosts:") {
            let nodes: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let s = nononce::hosts::HostListStrategy::new(&nodes)
                .map_err(|e| format!("store {}: {e}", shown(url)))?;
            return Ok(Self::Static(Box::new(s)));
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            let (base, options) = redis_options(url)?;
            let s = RedisStrategy::connect(&base, options)
                .await
                .map_err(|e| format!("store {}: {e}", shown(url)))?;
            return Ok(Self::Redis(s));
        }
        if ["sqlite:", "postgres:", "postgresql:", "mysql:", "mariadb:"]
            .iter()
            .any(|p| url.starts_with(p))
        {
            let (base, table) = match url.split_once("?table=") {
                Some((base, table)) => (base, Some(table)),
                None => (url, None),
            };
            let mut s = SqlStrategy::connect_lazy(base)
                .map_err(|e| format!("store {}: {e}", shown(url)))?;
            if let Some(table) = table {
                s = s
                    .with_table(table)
                    .map_err(|e| format!("store {}: {e}", shown(url)))?;
            }
            return Ok(Self::Sql(s));
        }
        Err(format!("unknown store \"{}\": {USAGE}", shown(url)))
    }

    /// Creates the lease table of an embedded SQLite store on first use; servers are migrated
    /// by an operator (`nononce leases migrate`).
    pub async fn prepare_embedded(&self) -> Result<(), String> {
        if let Self::Sql(s) = self
            && s.dialect() == nononce::sql::Dialect::Sqlite
        {
            s.migrate().await.map_err(|e| crate::cli::chain(&e))?;
        }
        Ok(())
    }

    /// The strategy to lease with.
    pub fn into_strategy(self) -> BoxStrategy {
        match self {
            Self::Static(s) => s,
            Self::Redis(s) => Box::new(s),
            Self::Sql(s) => Box::new(s),
        }
    }

    /// Who holds which ID.
    pub async fn holders(&self) -> Result<Vec<Holder>, String> {
        match self {
            Self::Static(_) => Err(static_store()),
            Self::Redis(s) => s.holders().await.map_err(|e| crate::cli::chain(&e)),
            Self::Sql(s) => s.holders().await.map_err(|e| crate::cli::chain(&e)),
        }
    }

    /// Frees `id` whoever holds it; whether it was held.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, String> {
        match self {
            Self::Static(_) => Err(static_store()),
            Self::Redis(s) => s.force_release(id).await.map_err(|e| crate::cli::chain(&e)),
            Self::Sql(s) => s.force_release(id).await.map_err(|e| crate::cli::chain(&e)),
        }
    }

    /// Creates or repairs the lease table; a hash needs none.
    pub async fn migrate(&self) -> Result<String, String> {
        match self {
            Self::Static(_) => Err(static_store()),
            Self::Redis(s) => Ok(format!(
                "nothing to migrate: the hash `{}` needs no schema",
                s.options().hash_key()
            )),
            Self::Sql(s) => {
                let added = s.migrate().await.map_err(|e| crate::cli::chain(&e))?;
                Ok(format!("table `{}` ready: {added} rows added", s.table()))
            }
        }
    }
}

fn static_store() -> String {
    "env: and hosts: stores derive the id from the node itself: there is no lease table to inspect"
        .into()
}

/// Splits `?key=..&max_lease_s=..&amnesia_guard=off` off a Redis URL.
fn redis_options(url: &str) -> Result<(String, RedisOptions), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut options = RedisOptions::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        options = match k {
            "key" => options.key(v),
            "max_lease_s" => options.max_lease_duration(Duration::from_secs(
                v.parse()
                    .map_err(|_| format!("max_lease_s=`{v}` is not a number of seconds"))?,
            )),
            "amnesia_guard" => options.amnesia_guard(match v {
                "off" => AmnesiaGuard::Off,
                "hold_off" => AmnesiaGuard::HoldOff,
                _ => return Err(format!("amnesia_guard=`{v}`: use off or hold_off")),
            }),
            _ => {
                return Err(format!(
                    "unknown redis store option `{k}`: use key, max_lease_s or amnesia_guard"
                ));
            }
        };
    }
    options.validate().map_err(|e| crate::cli::chain(&e))?;
    Ok((base.to_owned(), options))
}
