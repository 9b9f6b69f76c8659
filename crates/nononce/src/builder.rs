use std::sync::Arc;
use std::time::Duration;

use lease_core::{MachineId, Strategy};
use lease_manager::{LeaseConfig, LeaseManager, LeaseState, LossReason};
use nonce_core::{Factory, FactoryConfig};
use zeroize::Zeroizing;

use crate::{Error, FactoryClock};

/// A base key given as hex text that is not one ([`decode_key_hex`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyHexError {
    /// A character is not a hex digit, or the digits are odd in number.
    #[error("the base key is not hex: give an even number of hex digits")]
    NotHex,
    /// Valid hex, but too short to derive keys from.
    #[error(
        "the base key is {bytes} bytes: use at least 32 random bytes (64 hex digits; `openssl rand -hex 32` makes one)"
    )]
    TooShort {
        /// The bytes the text holds.
        bytes: usize,
    },
}

/// Decodes a base key from hex text: upper or lower case, an even number of digits,
/// surrounding whitespace (a file's final newline) ignored, at least
/// [`MIN_BASE_KEY_LEN`](nonce_core::MIN_BASE_KEY_LEN) bytes. The one key encoding of this
/// library's examples and of the `nononce` command.
///
/// # Errors
/// [`KeyHexError::NotHex`] or [`KeyHexError::TooShort`].
pub fn decode_key_hex(hex: &str) -> Result<Zeroizing<Vec<u8>>, KeyHexError> {
    // Constant-time decoding: the text is a secret.
    let key =
        Zeroizing::new(base16ct::mixed::decode_vec(hex.trim()).map_err(|_| KeyHexError::NotHex)?);
    if key.len() < nonce_core::MIN_BASE_KEY_LEN {
        return Err(KeyHexError::TooShort { bytes: key.len() });
    }
    Ok(key)
}

/// Factory settings that own their keys: [`FactoryConfig`] with keys held as
/// `Zeroizing<Vec<u8>>`, zeroized when the settings are dropped and never printed. Its
/// setters, getters and defaults are `FactoryConfig`'s (`with_epoch_ms`, `with_base_key`,
/// `with_cipher64`, `with_kind64`, ...; a key is given as `Zeroizing<Vec<u8>>`, so
/// `vec.into()`); `FactoryOptions::new()` and hex keys
/// ([`FactoryOptionsExt::with_base_key_hex`]) come from [`FactoryOptionsExt`], which is in the
/// [`prelude`](crate::prelude).
///
/// By default a factory draws counter nonces on blocks reserved per thread
/// ([`with_thread_cache`](FactoryConfig::with_thread_cache), on), so one factory shared by
/// every thread scales with them: no per-thread handle needed.
pub type FactoryOptions = FactoryConfig<Zeroizing<Vec<u8>>>;

/// What the facade adds to [`FactoryOptions`]: `new()` and base keys given as hex text. An
/// extension trait, since `FactoryOptions` is `nonce_core`'s `FactoryConfig`, whose own
/// `new()` is for borrowed keys; bring it into scope (`use nononce::FactoryOptionsExt`, or
/// `use nononce::prelude::*`) to call `FactoryOptions::new()`.
pub trait FactoryOptionsExt: Sized {
    /// The default settings, `FactoryOptions::default()`: default epoch (2025-01-01), no keys,
    /// default ciphers, and the per-thread blocks of
    /// [`with_thread_cache`](FactoryConfig::with_thread_cache) on: calls from many threads on
    /// one factory then scale as [`Factory::handle`]s do, with the same guarantees; counter
    /// nonces of different threads no longer follow call order, nor do sortable ones within
    /// one millisecond (each thread's own still increase). Turn it off with
    /// `.with_thread_cache(false)`.
    fn new() -> Self;

    /// Sets the base key from its hex text ([`decode_key_hex`]): the encoding the `nononce`
    /// command reads with `--base-key-hex`, `--base-key-env` and `--base-key-file`, so both
    /// derive the same keys from one secret.
    ///
    /// ```
    /// use nononce::{FactoryOptions, FactoryOptionsExt};
    /// # fn main() -> Result<(), nononce::KeyHexError> {
    /// let hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
    /// let options = FactoryOptions::new().with_base_key_hex(hex)?;
    /// # let _ = options;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`KeyHexError`] when the text is not hex or holds fewer than 32 bytes.
    fn with_base_key_hex(self, hex: &str) -> Result<Self, KeyHexError>;
}

impl FactoryOptionsExt for FactoryOptions {
    fn new() -> Self {
        Self::default()
    }

    fn with_base_key_hex(self, hex: &str) -> Result<Self, KeyHexError> {
        Ok(self.with_base_key(decode_key_hex(hex)?))
    }
}

type LostCallback = Box<dyn Fn(&LossReason) + Send + Sync>;

/// Sets up leasing and factories; [`start`](Builder::start) blocks until the first lease is
/// held, like the reference's supervision tree.
pub struct Builder<S: Strategy> {
    strategy: S,
    config: LeaseConfig,
    factories: Vec<(String, FactoryOptions)>,
    on_lease_lost: Option<LostCallback>,
    #[cfg(feature = "guard")]
    guard: Option<lease_guard::GuardConfig>,
}

impl<S: Strategy + 'static> Builder<S> {
    /// Adds a named factory. Several may coexist (separate purposes, epochs or keys); all share
    /// the lease's machine ID.
    #[must_use]
    pub fn with_factory(mut self, name: impl Into<String>, options: FactoryOptions) -> Self {
        self.factories.push((name.into(), options));
        self
    }

    /// How long each lease is asked for (default 8 h).
    #[must_use]
    pub const fn with_lease_duration(mut self, duration: Duration) -> Self {
        self.config = self.config.with_lease_duration(duration);
        self
    }

    /// The longest time between renewals (default 30 min).
    #[must_use]
    pub const fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.config = self.config.with_renew_interval(interval);
        self
    }

    /// How long `start` may wait for the first lease (default 60 s; `None`: forever).
    #[must_use]
    pub const fn with_acquire_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config = self.config.with_acquire_timeout(timeout);
        self
    }

    /// Replaces the whole lease timing (margins, minimum TTL, backoff).
    #[must_use]
    pub const fn with_lease_config(mut self, config: LeaseConfig) -> Self {
        self.config = config;
        self
    }

    /// Called after the factories are disabled whenever the lease is lost.
    #[must_use]
    pub fn with_on_lease_lost(
        mut self,
        callback: impl Fn(&LossReason) + Send + Sync + 'static,
    ) -> Self {
        self.on_lease_lost = Some(Box::new(callback));
        self
    }

    /// Runs a conflict guard: this node announces its machine ID to its peers over UDP, and if
    /// another node uses the same ID, the one that started later loses its lease (its factories
    /// stop). Recommended for static strategies (StatefulSet, host list), which have no
    /// coordinator to stop two nodes from sharing an ID.
    #[cfg(feature = "guard")]
    #[cfg_attr(docsrs, doc(cfg(feature = "guard")))]
    #[must_use]
    pub fn with_conflict_guard(mut self, config: lease_guard::GuardConfig) -> Self {
        self.guard = Some(config);
        self
    }

    /// Builds the factories, acquires the first lease and enables them.
    ///
    /// # Errors
    /// [`Error`] when a factory is misconfigured or no lease could be acquired in time.
    pub async fn start(self) -> Result<Nononce<S>, Error> {
        if self.factories.is_empty() {
            return Err(Error::NoFactory);
        }
        // One clock for the factories and the manager: the manager reads it exactly, the
        // factories' sortable nonces read the ticker's published value.
        let clock = FactoryClock::shared().map_err(Error::Clock)?;
        #[cfg(feature = "tracing")]
        let deterministic = self.strategy.profile().deterministic;
        let mut factories: Vec<(String, Arc<Factory<FactoryClock>>)> = Vec::new();
        for (name, options) in &self.factories {
            if factories.iter().any(|(n, _)| n == name) {
                return Err(Error::DuplicateFactory(name.clone()));
            }
            let factory = options
                .build(clock.clone())
                .map_err(|source| Error::Factory {
                    name: name.clone(),
                    source,
                })?;
            factories.push((name.clone(), Arc::new(factory)));
        }
        let mut builder = LeaseManager::builder(self.strategy)
            .with_config(self.config)
            .with_clock(clock);
        for (_, factory) in &factories {
            builder = builder.with_target(factory.clone());
        }
        if let Some(callback) = self.on_lease_lost {
            builder = builder.with_on_lease_lost(callback);
        }
        let manager = builder.start().await?;
        #[cfg(feature = "guard")]
        let mut guard = None;
        #[cfg(feature = "guard")]
        if let Some(config) = self.guard {
            let signal = manager.loss_signal();
            let announce = lease_guard::Announce::new(manager.machine_id());
            let on_conflict = move |conflict: lease_guard::Conflict| {
                signal.lease_lost(conflict.to_string());
            };
            match lease_guard::ConflictGuard::start(config, announce, on_conflict).await {
                Ok(started) => {
                    started.follow(manager.watch_state());
                    guard = Some(started);
                }
                Err(e) => {
                    // No guard, no generation: give the lease back before reporting.
                    manager.shutdown().await;
                    return Err(Error::Guard(e));
                }
            }
        }
        #[cfg(all(feature = "tracing", not(feature = "guard")))]
        let guard_configured = false;
        #[cfg(all(feature = "tracing", feature = "guard"))]
        let guard_configured = guard.is_some();
        #[cfg(feature = "tracing")]
        if deterministic && !guard_configured {
            tracing::warn!(
                strategy = manager.strategy_name(),
                "static machine id without a conflict guard: nothing detects a second node with the same id (enable the `guard` feature and `Builder::with_conflict_guard`)"
            );
        }
        #[cfg(feature = "generation-metrics")]
        let publisher = crate::metrics::start(&factories);
        Ok(Nononce {
            manager,
            #[cfg(feature = "generation-metrics")]
            publisher,
            factories,
            #[cfg(feature = "guard")]
            guard,
        })
    }
}

/// Running factories under a held machine-ID lease.
///
/// Generate with [`factory`](Nononce::factory): share it between threads as it is (its counter
/// calls draw on per-thread blocks, see [`FactoryOptions`]). The factories stop
/// by themselves the moment the lease can no longer be proven.
pub struct Nononce<S: Strategy> {
    manager: LeaseManager<S>,
    /// The task publishing the factories' generation counts.
    #[cfg(feature = "generation-metrics")]
    publisher: tokio::task::JoinHandle<()>,
    factories: Vec<(String, Arc<Factory<FactoryClock>>)>,
    #[cfg(feature = "guard")]
    guard: Option<lease_guard::ConflictGuard>,
}

impl<S: Strategy + 'static> Nononce<S> {
    /// Starts configuring nononce with a lease strategy.
    pub fn builder(strategy: S) -> Builder<S> {
        Builder {
            strategy,
            config: LeaseConfig::default(),
            factories: Vec::new(),
            on_lease_lost: None,
            #[cfg(feature = "guard")]
            guard: None,
        }
    }

    /// The factory named `name`.
    pub fn factory(&self, name: &str) -> Option<&Arc<Factory<FactoryClock>>> {
        self.factories
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f)
    }

    /// Every factory with its name, in the order added.
    pub fn factories(&self) -> impl Iterator<Item = (&str, &Arc<Factory<FactoryClock>>)> {
        self.factories.iter().map(|(n, f)| (n.as_str(), f))
    }

    /// The machine ID while the lease is held.
    pub fn machine_id(&self) -> Option<MachineId> {
        self.manager.machine_id()
    }

    /// The lease state.
    pub fn lease_state(&self) -> LeaseState {
        self.manager.state()
    }

    /// Tells the manager this node must stop using its ID now (for example, a conflict was
    /// detected): factories are disabled and, for dynamic strategies, a new ID is acquired.
    pub fn lease_lost(&self, reason: impl Into<String>) {
        self.manager.lease_lost(reason);
    }

    /// Publishes every factory's generation counts now, as `metrics` counters labelled with
    /// the factory's name (docs/operations.md lists them): nonces issued by kind and size,
    /// calls the throttle held back, kind conflicts and deadline refusals. A task does the
    /// same every [`PUBLISH_INTERVAL`](crate::PUBLISH_INTERVAL); call this before rendering a
    /// scrape for the figures of that moment. It reads counts the factories keep at no cost
    /// to their calls ([`Factory::stats`]).
    #[cfg(feature = "generation-metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "generation-metrics")))]
    pub fn record_generation_metrics(&self) {
        for (name, factory) in &self.factories {
            crate::record_factory_metrics(name, factory);
        }
    }

    /// The conflict guard, when one was configured.
    #[cfg(feature = "guard")]
    #[cfg_attr(docsrs, doc(cfg(feature = "guard")))]
    pub fn conflict_guard(&self) -> Option<&lease_guard::ConflictGuard> {
        self.guard.as_ref()
    }

    /// Stops the conflict guard, disables the factories, then releases the lease.
    pub async fn shutdown(self) {
        #[cfg(feature = "generation-metrics")]
        {
            self.publisher.abort();
            // The last counts, refusals of the calls that raced the shutdown included.
            self.record_generation_metrics();
        }
        #[cfg(feature = "guard")]
        if let Some(guard) = self.guard {
            guard.shutdown().await;
        }
        self.manager.shutdown().await;
    }
}
