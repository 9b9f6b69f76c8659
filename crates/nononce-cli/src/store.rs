//! Lease stores named by URL, each opened by the backend registered for its scheme
//! (`backends.rs`), and their errors said in one line.
//!
//! Opening a store checks what can be checked at once, so a command fails fast with the real
//! cause (a server that refuses the connection, a wrong password, a missing SQLite file): each
//! backend does it its own way, within the command's `--connect-timeout` (10 s unless given:
//! generous, as it only bounds a server that accepts a TCP connection and then says nothing,
//! or a TLS handshake with a server that speaks none). Passwords are hidden from every
//! message here, whatever the scheme.

use std::sync::LazyLock;
use std::time::Duration;

use nononce::BoxStrategy;
use nononce::lease::backend::duration;
use nononce::lease::{
    Access, Backend, BoxStoreAdmin, DynError, DynStoreAdmin, Holder, LeaseTerms, MachineId,
    StoreUrl, error_chain,
};

use crate::codec::{escaped, shown};
use crate::output::Exit;
use crate::store_arg::ChosenStore;

/// The backends of this build, looked up by scheme.
static BACKENDS: LazyLock<Vec<Box<dyn Backend>>> = LazyLock::new(crate::backends::registered);

/// A store as messages name it, and how its errors are said.
#[derive(Clone)]
pub struct StoreInfo {
    backend: &'static dyn Backend,
    url: StoreUrl,
    /// See [`ChosenStore::instead_of_url`].
    instead_of_url: Option<String>,
}

/// An error of a store, said.
pub struct Said {
    /// One line naming the store.
    pub text: String,
    /// How long the store still holds new leases off, when that is what the error says.
    pub hold_off: Option<Duration>,
}

impl StoreInfo {
    /// `store URL`, the URL without its password.
    pub fn shown(&self) -> &str {
        self.url.shown()
    }

    /// `text` with each command to paste naming the store as the user did: a URL that came from
    /// a variable is not written out (its password would show as `***`, which cannot work).
    fn pasteable(&self, text: String) -> String {
        pasteable(text, self.url.redacted(), self.instead_of_url.as_deref())
    }

    /// `error` (a strategy's or an admin's) in one line naming the store: the backend's own
    /// words when it has them, the error and its sources otherwise.
    pub fn describe(&self, error: &(dyn std::error::Error + 'static)) -> Said {
        let said = self.describe_raw(error);
        Said {
            text: self.pasteable(said.text),
            hold_off: said.hold_off,
        }
    }

    fn describe_raw(&self, error: &(dyn std::error::Error + 'static)) -> Said {
        let mut error = error;
        while let Some(erased) = error.downcast_ref::<DynError>() {
            error = erased.inner();
        }
        let Some(explained) = self.backend.explain(error, &self.url) else {
            return Said {
                text: self.url.naming(one_line(&error_chain(error))),
                hold_off: None,
            };
        };
        let text = match explained.hold_off {
            Some(remaining) => format!(
                "{} holds new leases off for {} more: {}",
                self.shown(),
                duration(remaining),
                explained.message
            ),
            None => self.url.naming(explained.message),
        };
        Said {
            text,
            hold_off: explained.hold_off,
        }
    }
}

/// An opened store: a strategy to lease from and, for stores that keep leases, operator
/// commands.
pub struct Store {
    strategy: BoxStrategy,
    admin: Option<BoxStoreAdmin>,
    info: StoreInfo,
}

impl Store {
    /// Opens the store a command chose, for `access`, to lease on `terms`.
    pub async fn open(
        chosen: &ChosenStore,
        access: Access,
        terms: LeaseTerms,
    ) -> Result<Self, Exit> {
        let url = chosen.url.as_str();
        let all: &'static [Box<dyn Backend>] = &BACKENDS;
        let scheme = url.split_once(':').map(|(scheme, _)| scheme);
        let Some(backend) = all
            .iter()
            .find(|b| scheme.is_some_and(|s| b.schemes().contains(&s)))
        else {
            // A URL no backend takes cannot work: a usage error.
            return Err(Exit::Usage(unknown_store(url, all)));
        };
        let store = StoreUrl::new(url, escaped(&redact(url), 300), access, terms)
            .with_connect_timeout(chosen.connect_timeout);
        let opened = backend.open(&store).await.map_err(|e| {
            pasteable(
                one_line(&e.message),
                store.redacted(),
                chosen.instead_of_url.as_deref(),
            )
        })?;
        Ok(Self {
            strategy: opened.strategy,
            admin: opened.admin,
            info: StoreInfo {
                backend: &**backend,
                url: store,
                instead_of_url: chosen.instead_of_url.clone(),
            },
        })
    }

    /// The strategy to lease with, and how messages name this store.
    pub fn into_strategy(self) -> (BoxStrategy, StoreInfo) {
        (self.strategy, self.info)
    }

    /// The operator commands of this store. A backend without them refuses to open its stores
    /// for them in its own words; this is said only when one does not.
    fn admin(&self) -> Result<&dyn DynStoreAdmin, String> {
        self.admin.as_deref().ok_or_else(|| {
            format!(
                "{}: the store keeps no leases to list, free or migrate",
                self.info.shown()
            )
        })
    }

    fn fail(&self, e: &(dyn std::error::Error + 'static)) -> String {
        self.info.describe(e).text
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

    /// Creates or repairs the store's schema; a store that needs none must answer all the
    /// same.
    pub async fn migrate(&self) -> Result<String, String> {
        let migration = self
            .admin()?
            .migrate_boxed()
            .await
            .map_err(|e| self.fail(&e))?;
        Ok(migration.to_string())
    }
}

/// `text` with ` --store 'REDACTED'` replaced by what the user gave instead (see
/// [`ChosenStore::instead_of_url`]).
fn pasteable(text: String, redacted: &str, instead_of_url: Option<&str>) -> String {
    let Some(instead) = instead_of_url else {
        return text;
    };
    let named = format!(" --store '{redacted}'");
    let instead = if instead.is_empty() {
        String::new()
    } else {
        format!(" {instead}")
    };
    text.replace(&named, &instead)
}

/// A message on one line: a client's multi-line text (a parser's report) joined with `; `.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A URL of no registered scheme: what the build takes instead.
fn unknown_store(url: &str, backends: &[Box<dyn Backend>]) -> String {
    let usage: Vec<&str> = backends.iter().flat_map(|b| b.usage()).collect();
    let takes = match usage.as_slice() {
        [] => "this build of nononce has no store backend".to_owned(),
        [only] => format!("use {only}"),
        [rest @ .., last] => format!("use {} or {last}", rest.join(", ")),
    };
    format!("unknown store \"{}\": {takes}", shown(url))
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

    /// A backend that only has a usage.
    struct Usage(Vec<&'static str>);

    impl Backend for Usage {
        fn schemes(&self) -> Vec<&'static str> {
            Vec::new()
        }

        fn usage(&self) -> Vec<&'static str> {
            self.0.clone()
        }

        fn open<'a>(
            &'a self,
            _: &'a StoreUrl,
        ) -> nononce::lease::BoxFuture<'a, Result<nononce::lease::Opened, nononce::lease::OpenError>>
        {
            unreachable!("never opened")
        }
    }

    #[test]
    fn an_unknown_store_lists_what_the_build_takes() {
        let backends: Vec<Box<dyn Backend>> = vec![
            Box::new(Usage(vec!["a://...", "b://..."])),
            Box::new(Usage(vec!["c:VAR"])),
        ];
        assert_eq!(
            unknown_store("ftp://example", &backends),
            "unknown store \"ftp://example\": use a://..., b://... or c:VAR"
        );
        assert_eq!(
            unknown_store("x", &backends[1..]),
            "unknown store \"x\": use c:VAR"
        );
        assert_eq!(
            unknown_store("x", &[]),
            "unknown store \"x\": this build of nononce has no store backend"
        );
    }
}
