//! What operators see of and do to a lease store: who holds which ID and for how long, how
//! many are free, freeing a dead node's ID and preparing the store.

use core::fmt;
use std::time::Duration;

use machine_id::MachineId;

use crate::dyn_strategy::{BoxFuture, DynError};
use crate::strategy::LeaseError;

/// A machine ID held in a store, as an operator tool lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The held ID.
    pub machine_id: MachineId,
    /// The first characters of the holder's token: enough to tell holders apart, not to act
    /// as them.
    pub token_prefix: String,
    /// Time left before the lease expires on the store's clock.
    pub expires_in: Duration,
}

impl Holder {
    /// Characters of a token shown to operators.
    pub const TOKEN_PREFIX_LEN: usize = 8;

    /// A holder whose token is shortened to [`TOKEN_PREFIX_LEN`](Self::TOKEN_PREFIX_LEN).
    #[must_use]
    pub fn new(machine_id: MachineId, token: &str, expires_in: Duration) -> Self {
        Self {
            machine_id,
            token_prefix: token.chars().take(Self::TOKEN_PREFIX_LEN).collect(),
            expires_in,
        }
    }
}

/// What [`StoreAdmin::migrate`] did, in words an operator tool can print as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Migration {
    /// The lease table `table` exists with the current columns; `rows_added` ID rows were
    /// seeded into it (0 when it was already complete).
    Table {
        /// The table's name.
        table: String,
        /// How many ID rows this migration inserted.
        rows_added: u64,
    },
    /// The store's initialization marker is in place: acquisitions may claim IDs from now on.
    /// Stores that cannot tell a new store from one that lost its lease data keep such a marker
    /// with the leases, and hold acquisitions off while it is missing.
    Initialized {
        /// Where the marker is, as a clause ("field `open_at` of hash `leases`").
        marker: String,
        /// How long a pending hold-off still had, when this initialization ended one.
        ended_hold_off: Option<Duration>,
    },
    /// The store keeps its leases in keys that need no schema; `reason` says which, as a
    /// clause ("the hash `leases` needs no schema").
    NoSchema {
        /// Which keys hold the leases, and that they need no schema.
        reason: String,
    },
}

impl fmt::Display for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Table { table, rows_added } => {
                write!(f, "table `{table}` ready: {rows_added} rows added")
            }
            Self::Initialized {
                marker,
                ended_hold_off: None,
            } => write!(
                f,
                "store initialized: {marker} is set; acquisitions may start"
            ),
            Self::Initialized {
                marker,
                ended_hold_off: Some(left),
            } => write!(
                f,
                "store initialized: {marker} is set; acquisitions may start, ending a hold-off \
                 that had {left:?} left (its lease data had been found missing: this is safe \
                 only if no node still generates with a lease granted before)"
            ),
            Self::NoSchema { reason } => write!(f, "nothing to migrate: {reason}"),
        }
    }
}

/// Operator commands on a dynamic lease store (a database table, a hash, a key prefix): what
/// `nononce leases list`, `release` and `migrate` run, whatever the backend.
///
/// Static strategies (an environment variable, a host list) have no store and do not implement
/// it. Like [`Strategy`](crate::Strategy), the methods return `Send` futures; the
/// object-safe form for a store chosen at run time is [`DynStoreAdmin`].
pub trait StoreAdmin: Send + Sync {
    /// The backend's error type.
    type Error: LeaseError;

    /// Every ID held now (not yet expired on the store's clock, including IDs a release guard
    /// still blocks), in ID order.
    fn holders(&self) -> impl Future<Output = Result<Vec<Holder>, Self::Error>> + Send;

    /// How many of the [`MachineId::COUNT`] IDs an acquire could claim now: those no lease
    /// holds or blocks.
    fn free_count(&self) -> impl Future<Output = Result<u64, Self::Error>> + Send;

    /// Frees `id` at once, whoever holds it; its timestamp floor stays, so the next holder
    /// still starts above what the old one may have issued. Only for a node known to be dead:
    /// a live holder finds out at its next renewal (*lost*) and may use the ID until then.
    ///
    /// Returns `true` when the ID was held and is now free, `false` when it was not held (and
    /// nothing changed): freeing an ID twice answers `true`, then `false`.
    fn force_release(
        &self,
        id: MachineId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Creates or upgrades the store's schema, or, for a store that needs none, checks that it
    /// answers. Idempotent, and safe to run from several nodes at once.
    fn migrate(&self) -> impl Future<Output = Result<Migration, Self::Error>> + Send;
}

/// The object-safe form of [`StoreAdmin`]: boxed futures and [`DynError`]s that keep their
/// [`ErrorKind`](crate::ErrorKind). Every [`StoreAdmin`] implements it.
///
/// ```
/// use lease_core::{BoxStoreAdmin, Holder, MachineId, Migration, StoreAdmin};
/// # struct Empty;
/// # impl StoreAdmin for Empty {
/// #     type Error = core::convert::Infallible;
/// #     async fn holders(&self) -> Result<Vec<Holder>, Self::Error> { Ok(Vec::new()) }
/// #     async fn free_count(&self) -> Result<u64, Self::Error> { Ok(u64::from(MachineId::COUNT)) }
/// #     async fn force_release(&self, _: MachineId) -> Result<bool, Self::Error> { Ok(false) }
/// #     async fn migrate(&self) -> Result<Migration, Self::Error> {
/// #         Ok(Migration::NoSchema { reason: "the map needs no schema".into() })
/// #     }
/// # }
/// fn open(_url: &str) -> BoxStoreAdmin {
///     Box::new(Empty)
/// }
/// let admin = open("memory:");
/// let free = futures::executor::block_on(admin.free_count_boxed()).unwrap();
/// assert_eq!(free, 512);
/// let migration = futures::executor::block_on(admin.migrate_boxed()).unwrap();
/// assert_eq!(migration.to_string(), "nothing to migrate: the map needs no schema");
/// ```
pub trait DynStoreAdmin: Send + Sync {
    /// [`StoreAdmin::holders`], boxed.
    fn holders_boxed(&self) -> BoxFuture<'_, Result<Vec<Holder>, DynError>>;
    /// [`StoreAdmin::free_count`], boxed.
    fn free_count_boxed(&self) -> BoxFuture<'_, Result<u64, DynError>>;
    /// [`StoreAdmin::force_release`], boxed.
    fn force_release_boxed(&self, id: MachineId) -> BoxFuture<'_, Result<bool, DynError>>;
    /// [`StoreAdmin::migrate`], boxed.
    fn migrate_boxed(&self) -> BoxFuture<'_, Result<Migration, DynError>>;
}

/// A boxed store admin chosen at run time.
pub type BoxStoreAdmin = Box<dyn DynStoreAdmin>;

impl<A: StoreAdmin> DynStoreAdmin for A {
    fn holders_boxed(&self) -> BoxFuture<'_, Result<Vec<Holder>, DynError>> {
        Box::pin(async move { self.holders().await.map_err(DynError::new) })
    }

    fn free_count_boxed(&self) -> BoxFuture<'_, Result<u64, DynError>> {
        Box::pin(async move { self.free_count().await.map_err(DynError::new) })
    }

    fn force_release_boxed(&self, id: MachineId) -> BoxFuture<'_, Result<bool, DynError>> {
        Box::pin(async move { self.force_release(id).await.map_err(DynError::new) })
    }

    fn migrate_boxed(&self) -> BoxFuture<'_, Result<Migration, DynError>> {
        Box::pin(async move { self.migrate().await.map_err(DynError::new) })
    }
}
