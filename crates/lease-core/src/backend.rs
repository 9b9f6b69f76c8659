//! How a program that takes lease stores by URL (the `nononce` command) opens them: each backend
//! crate implements [`Backend`] for the URL schemes it serves, and the program keeps a list of
//! the backends it was built with. A third-party backend plugs in the same way.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::backend::{Access, Backend, Explained, OpenError, Opened, StoreUrl};
//! use lease_core::{
//!     Acquire, BoxFuture, ErrorKind, Grant, LeaseError, LeaseTerms, MachineId, Profile,
//!     Release, Renew, Renewal, Strategy,
//! };
//!
//! /// A store that always grants ID 7 and cannot be listed.
//! struct Seven;
//!
//! #[derive(Debug)]
//! struct Unreachable;
//! impl std::fmt::Display for Unreachable {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         f.write_str("no route to the seven service")
//!     }
//! }
//! impl std::error::Error for Unreachable {}
//! impl LeaseError for Unreachable {
//!     fn kind(&self) -> ErrorKind {
//!         ErrorKind::Retry
//!     }
//! }
//!
//! impl Strategy for Seven {
//!     type Lease = ();
//!     type Error = Unreachable;
//!     async fn acquire(&self, _: Acquire) -> Result<Grant<()>, Unreachable> {
//!         Ok(Grant::new(MachineId::new(7).unwrap(), (), Duration::from_secs(60)))
//!     }
//!     async fn renew(&self, _: &(), request: Renew) -> Result<Renewal<()>, Unreachable> {
//!         Ok(Renewal::new((), request.requested))
//!     }
//!     async fn release(&self, _: &(), _: Release) -> Result<(), Unreachable> {
//!         Ok(())
//!     }
//!     fn check_terms(&self, _: &LeaseTerms) -> Result<(), Unreachable> {
//!         Ok(())
//!     }
//!     fn profile(&self) -> Profile {
//!         Profile::new("seven").deterministic()
//!     }
//! }
//!
//! /// Registers the scheme `seven:`.
//! struct SevenBackend;
//!
//! impl Backend for SevenBackend {
//!     fn schemes(&self) -> Vec<&'static str> {
//!         vec!["seven"]
//!     }
//!
//!     fn usage(&self) -> Vec<&'static str> {
//!         vec!["seven:"]
//!     }
//!
//!     fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
//!         Box::pin(async move {
//!             if store.access() != Access::Lease {
//!                 // No admin: say why in the user's terms, not as a missing method.
//!                 return Err(store.error("the id is fixed: there are no leases to list"));
//!             }
//!             Ok(Opened::new(Seven))
//!         })
//!     }
//!
//!     fn explain(
//!         &self,
//!         error: &(dyn std::error::Error + 'static),
//!         store: &StoreUrl,
//!     ) -> Option<Explained> {
//!         error.downcast_ref::<Unreachable>().map(|_| {
//!             Explained::new(format!("{} is down: start the seven service", store.shown()))
//!         })
//!     }
//! }
//!
//! // The program's registry, and a lookup by scheme.
//! let backends: Vec<Box<dyn Backend>> = vec![Box::new(SevenBackend)];
//! let terms = LeaseTerms::new(Duration::from_secs(120), Duration::from_secs(30), Duration::from_secs(10));
//! let store = StoreUrl::new("seven:", "seven:", Access::Lease, terms);
//! let backend = backends
//!     .iter()
//!     .find(|b| store.scheme().is_some_and(|s| b.schemes().contains(&s)))
//!     .expect("registered");
//! let opened = futures::executor::block_on(backend.open(&store)).unwrap();
//! assert!(opened.admin.is_none());
//! let grant = futures::executor::block_on(
//!     opened.strategy.acquire(Acquire::new(Duration::from_secs(60), 0, 0)),
//! );
//! assert_eq!(grant.unwrap().machine_id.get(), 7);
//!
//! let listing = StoreUrl::new("seven:", "seven:", Access::Read, terms);
//! let refused = futures::executor::block_on(backend.open(&listing)).err().unwrap();
//! assert_eq!(refused.to_string(), "store seven:: the id is fixed: there are no leases to list");
//! let said = backend.explain(&Unreachable, &store).unwrap();
//! assert_eq!(said.message, "store seven: is down: start the seven service");
//! ```

use core::fmt;
use std::sync::Arc;
use std::time::Duration;

use machine_id::MachineId;

use crate::admin::{BoxStoreAdmin, Holder, Migration, StoreAdmin};
use crate::dyn_strategy::{BoxFuture, BoxStrategy};
use crate::strategy::{LeaseTerms, Strategy};

/// What a command does with a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Access {
    /// Reads or edits what is there (`nononce leases list`, `leases release`): never creates a
    /// store.
    Read,
    /// Creates or repairs the store's schema (`nononce leases migrate`).
    Migrate,
    /// Leases a machine ID (`nononce gen`): a store embedded in the node (a SQLite file) is
    /// created on first use.
    Lease,
}

/// A store named by URL, and what is asked of it: what [`Backend::open`] opens and
/// [`Backend::explain`] names.
///
/// Its `Debug` leaves out the URL as given, which may hold a password.
#[derive(Clone)]
pub struct StoreUrl {
    url: String,
    redacted: String,
    shown: String,
    access: Access,
    terms: LeaseTerms,
    connect_timeout: Duration,
}

impl StoreUrl {
    /// `url` as given (to connect with), `redacted` as messages quote it (the password hidden,
    /// on one line), opened for `access` and leased on `terms`; a 10 s
    /// [`connect_timeout`](Self::connect_timeout).
    #[must_use]
    pub fn new(
        url: impl Into<String>,
        redacted: impl Into<String>,
        access: Access,
        terms: LeaseTerms,
    ) -> Self {
        let redacted = redacted.into();
        Self {
            url: url.into(),
            shown: format!("store {redacted}"),
            redacted,
            access,
            terms,
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// The same store, waiting up to `timeout` for the first answer of a server.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The URL as given, password included: only to connect with, never to quote.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL as messages quote it, in a command line to run for example
    /// (`` `nononce leases migrate --store '…'` ``): its password hidden.
    #[must_use]
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// How messages name the store: `store <redacted URL>`.
    #[must_use]
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// What the command does with the store.
    #[must_use]
    pub const fn access(&self) -> Access {
        self.access
    }

    /// The lease timing a strategy opened for [`Access::Lease`] will run with: a store that
    /// cannot serve it (its longest lease below `min_ttl`) says so when it is opened.
    #[must_use]
    pub const fn terms(&self) -> &LeaseTerms {
        &self.terms
    }

    /// The longest wait for a server's first answer when the store is opened. Generous: it
    /// only bounds a server that accepts a connection and then says nothing.
    #[must_use]
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The URL's scheme, the text before its first `:` (`redis` of `redis://cache:6379`,
    /// `env` of `env:POD`); `None` without a colon.
    #[must_use]
    pub fn scheme(&self) -> Option<&str> {
        self.url.split_once(':').map(|(scheme, _)| scheme)
    }

    /// `text` as a failure to open this store: `store <URL>: <text>`, or `text` alone when it
    /// names the store already ([`shown`](Self::shown)).
    #[must_use]
    pub fn error(&self, text: impl fmt::Display) -> OpenError {
        OpenError::new(self.naming(text.to_string()))
    }

    /// `text`, naming the store at its start unless it names it already.
    #[must_use]
    pub fn naming(&self, text: String) -> String {
        if text.contains(&self.shown) {
            text
        } else {
            format!("{}: {text}", self.shown)
        }
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreUrl")
            .field("redacted", &self.redacted)
            .field("access", &self.access)
            .field("terms", &self.terms)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// An opened store: a strategy to lease from and, for a store that keeps leases (a table, a
/// hash, a key prefix), the operator commands on it.
#[non_exhaustive]
pub struct Opened {
    /// The strategy to lease with.
    pub strategy: BoxStrategy,
    /// Who holds which ID, freeing one, migrating; `None` for a strategy that derives the ID
    /// from the node itself (an environment variable, a host list).
    pub admin: Option<BoxStoreAdmin>,
}

impl Opened {
    /// A store without operator commands.
    pub fn new(strategy: impl Strategy + 'static) -> Self {
        Self {
            strategy: Box::new(strategy),
            admin: None,
        }
    }

    /// A store whose strategy is its admin too; both share the one instance (its connection
    /// or pool, what it has seen of the server).
    pub fn with_admin<S: Strategy + StoreAdmin + 'static>(store: S) -> Self {
        let store = Arc::new(store);
        Self {
            strategy: Box::new(Arc::clone(&store)),
            admin: Some(Box::new(Shared(store))),
        }
    }
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("strategy", &self.strategy.profile_boxed().name)
            .field("admin", &self.admin.is_some())
            .finish()
    }
}

/// The admin side of a store shared with its strategy.
struct Shared<S>(Arc<S>);

impl<S: StoreAdmin> StoreAdmin for Shared<S> {
    type Error = S::Error;

    fn holders(&self) -> impl Future<Output = Result<Vec<Holder>, S::Error>> + Send {
        self.0.holders()
    }

    fn free_count(&self) -> impl Future<Output = Result<u64, S::Error>> + Send {
        self.0.free_count()
    }

    fn force_release(&self, id: MachineId) -> impl Future<Output = Result<bool, S::Error>> + Send {
        self.0.force_release(id)
    }

    fn migrate(&self) -> impl Future<Output = Result<Migration, S::Error>> + Send {
        self.0.migrate()
    }
}

/// Why a store could not be opened, as one line for the user: the cause and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenError {
    /// The line, naming the store ([`StoreUrl::error`] puts its name first).
    pub message: String,
}

impl OpenError {
    /// A failure said by `message` as it is.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {}

/// An error of a store in the user's terms: what [`Backend::explain`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Explained {
    /// One line: the cause and what to do. The caller puts the store's name
    /// ([`StoreUrl::shown`]) before it unless it names the store already; with a
    /// [`hold_off`](Self::hold_off), it is why the store holds leases off (a clause), and the
    /// caller says for how long.
    pub message: String,
    /// How long the store still holds new leases off (an amnesia guard's wait): retrying before
    /// then cannot succeed, so a caller that would give up sooner can say so at once.
    pub hold_off: Option<Duration>,
}

impl Explained {
    /// An error said by `message`.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hold_off: None,
        }
    }

    /// A hold-off of `remaining` more, for the reason `message` says.
    #[must_use]
    pub fn held_off(remaining: Duration, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hold_off: Some(remaining),
        }
    }
}

/// A lease backend as a program that takes stores by URL sees it: the URL schemes it serves,
/// how it opens a store, and how it says its errors. Object-safe: a program keeps its
/// backends as `Box<dyn Backend>`.
///
/// Opening checks at once what can be checked (a server answers, the credentials work, the
/// lease timing fits the store), so that a command fails fast with the real cause instead of
/// after the lease manager's retries.
pub trait Backend: Send + Sync {
    /// The URL schemes this backend opens, without the colon (`["redis", "rediss"]`).
    fn schemes(&self) -> Vec<&'static str>;

    /// How its URLs are written, one entry per kind of store, for a message listing the
    /// stores a program can open (`["redis://HOST:PORT (or rediss://)"]`).
    fn usage(&self) -> Vec<&'static str>;

    /// Opens `store` for [`StoreUrl::access`]: a server store is connected to once (without
    /// the retries of a pool or of the lease manager); a store that leases cannot serve
    /// [`StoreUrl::terms`] is refused; a store with no operator commands refuses every access
    /// but [`Access::Lease`]; an embedded store is created for [`Access::Lease`] (never for
    /// [`Access::Read`]).
    ///
    /// # Errors
    /// [`OpenError`]: one line naming the store, the cause and what to change.
    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>>;

    /// `error`, returned by a strategy or admin this backend opened for `store` (the original
    /// error, out of its [`DynError`](crate::DynError)), in the user's terms: its cause and
    /// what to change, in the commands and URL options the user types. `None` when the
    /// error's own message and sources say it (the default).
    fn explain(
        &self,
        error: &(dyn std::error::Error + 'static),
        store: &StoreUrl,
    ) -> Option<Explained> {
        let _ = (error, store);
        None
    }
}

/// A duration as messages say it: whole seconds rounded up, as `42 s`, `3 min 5 s` or
/// `2 h 0 min`.
///
/// ```
/// use std::time::Duration;
/// use lease_core::backend::duration;
///
/// assert_eq!(duration(Duration::from_millis(1_500)), "2 s");
/// assert_eq!(duration(Duration::from_secs(185)), "3 min 5 s");
/// assert_eq!(duration(Duration::from_secs(8762 * 3600)), "8762 h 0 min");
/// ```
#[must_use]
pub fn duration(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s} s"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_store_once() {
        let terms = LeaseTerms::new(
            Duration::from_secs(120),
            Duration::from_secs(30),
            Duration::from_secs(10),
        );
        let store = StoreUrl::new("x://u:pw@h", "x://u:***@h", Access::Read, terms);
        assert_eq!(store.error("down").message, "store x://u:***@h: down");
        assert_eq!(
            store.naming("store x://u:***@h refused the password".into()),
            "store x://u:***@h refused the password"
        );
        assert_eq!(store.scheme(), Some("x"));
        assert!(!format!("{store:?}").contains("pw"));
    }
}
