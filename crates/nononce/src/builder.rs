use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{LeaseConfig, MachineId, Strategy};
use lease_manager::{LeaseManager, LeaseState, LossReason};
use nonce_core::{Base, Cipher64, Cipher96, Cipher128, Clock, Factory, FactoryConfig};
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

/// An owned factory configuration: epoch, keys, ciphers. Keys are zeroized on drop and never
/// printed.
///
/// Factories built from it draw counter nonces on blocks reserved per thread
/// ([`thread_cache`](Self::thread_cache), on by default), so one factory shared by every
/// thread scales with them: no per-thread handle needed.
#[derive(Clone)]
pub struct FactoryOptions {
    epoch_ms: Option<u64>,
    base_key: Option<Zeroizing<Vec<u8>>>,
    key64: Option<Zeroizing<Vec<u8>>>,
    key96: Option<Zeroizing<Vec<u8>>>,
    key128: Option<Zeroizing<Vec<u8>>>,
    cipher64: Cipher64,
    cipher96: Cipher96,
    cipher128: Cipher128,
    kind64: Option<Base>,
    kind96: Option<Base>,
    kind128: Option<Base>,
    thread_cache: bool,
}

impl Default for FactoryOptions {
    fn default() -> Self {
        Self {
            epoch_ms: None,
            base_key: None,
            key64: None,
            key96: None,
            key128: None,
            cipher64: Cipher64::default(),
            cipher96: Cipher96::default(),
            cipher128: Cipher128::default(),
            kind64: None,
            kind96: None,
            kind128: None,
            thread_cache: true,
        }
    }
}

impl fmt::Debug for FactoryOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FactoryOptions")
            .field("epoch_ms", &self.epoch_ms)
            .field("base_key", &self.base_key.as_ref().map(|_| "<redacted>"))
            .field("cipher64", &self.cipher64)
            .field("cipher96", &self.cipher96)
            .field("cipher128", &self.cipher128)
            .field("kind64", &self.kind64)
            .field("kind96", &self.kind96)
            .field("kind128", &self.kind128)
            .field("thread_cache", &self.thread_cache)
            .finish_non_exhaustive()
    }
}

impl FactoryOptions {
    /// Default epoch (2025-01-01), no keys, default ciphers.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the epoch in Unix milliseconds.
    #[must_use]
    pub fn epoch_ms(mut self, epoch_ms: u64) -> Self {
        self.epoch_ms = Some(epoch_ms);
        self
    }

    /// Sets the base key (at least 32 bytes) from which per-size keys are derived.
    #[must_use]
    pub fn base_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.base_key = Some(Zeroizing::new(key.into()));
        self
    }

    /// Sets the base key from its hex text ([`decode_key_hex`]): the encoding the `nononce`
    /// command reads with `--base-key-hex`, `--base-key-env` and `--base-key-file`, so both
    /// derive the same keys from one secret.
    ///
    /// ```
    /// # fn main() -> Result<(), nononce::KeyHexError> {
    /// let hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
    /// let options = nononce::FactoryOptions::new().base_key_hex(hex)?;
    /// # let _ = options;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`KeyHexError`] when the text is not hex or holds fewer than 32 bytes.
    pub fn base_key_hex(mut self, hex: &str) -> Result<Self, KeyHexError> {
        self.base_key = Some(decode_key_hex(hex)?);
        Ok(self)
    }

    /// Sets an explicit 64-bit key.
    #[must_use]
    pub fn key64(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key64 = Some(Zeroizing::new(key.into()));
        self
    }

    /// Sets an explicit 96-bit key.
    #[must_use]
    pub fn key96(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key96 = Some(Zeroizing::new(key.into()));
        self
    }

    /// Sets an explicit 128-bit key.
    #[must_use]
    pub fn key128(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key128 = Some(Zeroizing::new(key.into()));
        self
    }

    /// Chooses the 64-bit cipher.
    #[must_use]
    pub const fn cipher64(mut self, cipher: Cipher64) -> Self {
        self.cipher64 = cipher;
        self
    }

    /// Chooses the 96-bit cipher.
    #[must_use]
    pub const fn cipher96(mut self, cipher: Cipher96) -> Self {
        self.cipher96 = cipher;
        self
    }

    /// Chooses the 128-bit cipher.
    #[must_use]
    pub const fn cipher128(mut self, cipher: Cipher128) -> Self {
        self.cipher128 = cipher;
        self
    }

    /// Declares the kind (counter or sortable) of the factory's 64-bit base nonces, so a call
    /// of the other kind fails from the first call (see
    /// [`FactoryConfig::kind64`](nonce_core::FactoryConfig::kind64)). Without it, the first
    /// call of the size decides.
    #[must_use]
    pub const fn kind64(mut self, base: Base) -> Self {
        self.kind64 = Some(base);
        self
    }

    /// Declares the kind of the factory's 96-bit base nonces (see [`kind64`](Self::kind64)).
    #[must_use]
    pub const fn kind96(mut self, base: Base) -> Self {
        self.kind96 = Some(base);
        self
    }

    /// Declares the kind of the factory's 128-bit base nonces (see [`kind64`](Self::kind64)).
    #[must_use]
    pub const fn kind128(mut self, base: Base) -> Self {
        self.kind128 = Some(base);
        self
    }

    /// Whether the factory's own counter calls (`counter64/96/128`, `encrypted*` with
    /// [`Base::Counter`]) and 96/128-bit sortable calls draw on blocks reserved per thread
    /// (default: on). Calls from many threads on one factory then scale as
    /// [`Factory::handle`]s do, with the same guarantees; counter nonces of different threads
    /// no longer follow call order, nor do sortable ones within one millisecond (each
    /// thread's own still increase). See
    /// [`FactoryConfig::thread_cache`](nonce_core::FactoryConfig::thread_cache).
    #[must_use]
    pub const fn thread_cache(mut self, on: bool) -> Self {
        self.thread_cache = on;
        self
    }

    /// Builds a disabled factory on `clock` ([`FactoryClock`] in the builder; any [`Clock`],
    /// for example a `ManualClock` in tests).
    ///
    /// # Errors
    /// When a key, cipher or the epoch is invalid.
    pub fn build<C: Clock>(&self, clock: C) -> Result<Factory<C>, nonce_core::FactoryConfigError> {
        let mut config = FactoryConfig::new()
            .cipher64(self.cipher64)
            .cipher96(self.cipher96)
            .cipher128(self.cipher128)
            .thread_cache(self.thread_cache);
        if let Some(epoch) = self.epoch_ms {
            config = config.epoch_ms(epoch);
        }
        if let Some(k) = &self.base_key {
            config = config.base_key(k);
        }
        if let Some(k) = &self.key64 {
            config = config.key64(k);
        }
        if let Some(k) = &self.key96 {
            config = config.key96(k);
        }
        if let Some(k) = &self.key128 {
            config = config.key128(k);
        }
        if let Some(base) = self.kind64 {
            config = config.kind64(base);
        }
        if let Some(base) = self.kind96 {
            config = config.kind96(base);
        }
        if let Some(base) = self.kind128 {
            config = config.kind128(base);
        }
        Factory::new(clock, config)
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
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    strategy_deterministic: bool,
    #[cfg(feature = "guard")]
    guard: Option<lease_guard::GuardConfig>,
}

impl<S: Strategy + 'static> Builder<S> {
    /// Adds a named factory. Several may coexist (separate purposes, epochs or keys); all share
    /// the lease's machine ID.
    #[must_use]
    pub fn factory(mut self, name: impl Into<String>, options: FactoryOptions) -> Self {
        self.factories.push((name.into(), options));
        self
    }

    /// How long each lease is asked for (default 8 h).
    #[must_use]
    pub const fn lease_duration(mut self, duration: Duration) -> Self {
        self.config = self.config.with_lease_duration(duration);
        self
    }

    /// The longest time between renewals (default 30 min).
    #[must_use]
    pub const fn renew_interval(mut self, interval: Duration) -> Self {
        self.config = self.config.with_renew_interval(interval);
        self
    }

    /// How long `start` may wait for the first lease (default 60 s; `None`: forever).
    #[must_use]
    pub const fn acquire_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config = self.config.with_acquire_timeout(timeout);
        self
    }

    /// Replaces the whole lease timing (margins, minimum TTL, backoff).
    #[must_use]
    pub const fn lease_config(mut self, config: LeaseConfig) -> Self {
        self.config = config;
        self
    }

    /// Called after the factories are disabled whenever the lease is lost.
    #[must_use]
    pub fn on_lease_lost(mut self, callback: impl Fn(&LossReason) + Send + Sync + 'static) -> Self {
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
    pub fn conflict_guard(mut self, config: lease_guard::GuardConfig) -> Self {
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
            .config(self.config)
            .clock(clock);
        for (_, factory) in &factories {
            builder = builder.target(factory.clone());
        }
        if let Some(callback) = self.on_lease_lost {
            builder = builder.on_lease_lost(callback);
        }
        #[cfg(feature = "tracing")]
        let deterministic = self.strategy_deterministic;
        let manager = builder.start().await?;
        #[cfg(feature = "guard")]
        let guard = match self.guard {
            Some(config) => {
                let signal = manager.loss_signal();
                let started = lease_guard::ConflictGuard::start(
                    config,
                    lease_guard::Announce::new(manager.machine_id()),
                    move |conflict| signal.lease_lost(conflict.to_string()),
                )
                .await;
                let guard = match started {
                    Ok(guard) => guard,
                    Err(e) => {
                        // No guard, no generation: give the lease back before reporting.
                        manager.shutdown().await;
                        return Err(Error::Guard(e));
                    }
                };
                guard.follow(manager.watch_state());
                Some(guard)
            }
            None => None,
        };
        #[cfg(all(feature = "tracing", not(feature = "guard")))]
        let guard_configured = false;
        #[cfg(all(feature = "tracing", feature = "guard"))]
        let guard_configured = guard.is_some();
        #[cfg(feature = "tracing")]
        if deterministic && !guard_configured {
            tracing::warn!(
                strategy = manager.strategy_name(),
                "static machine id without a conflict guard: nothing detects a second node with the same id (enable the `guard` feature and `Builder::conflict_guard`)"
            );
        }
        Ok(Nononce {
            manager,
            factories,
            #[cfg(feature = "guard")]
            guard,
        })
    }
}

/// Running factories under a held machine-ID lease.
///
/// Generate with [`factory`](Nononce::factory): share it between threads as it is (its counter
/// calls draw on per-thread blocks, see [`FactoryOptions::thread_cache`]). The factories stop
/// by themselves the moment the lease can no longer be proven.
pub struct Nononce<S: Strategy> {
    manager: LeaseManager<S>,
    factories: Vec<(String, Arc<Factory<FactoryClock>>)>,
    #[cfg(feature = "guard")]
    guard: Option<lease_guard::ConflictGuard>,
}

impl<S: Strategy + 'static> Nononce<S> {
    /// Starts configuring nononce with a lease strategy.
    pub fn builder(strategy: S) -> Builder<S> {
        Builder {
            strategy_deterministic: strategy.deterministic(),
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

    /// The conflict guard, when one was configured.
    #[cfg(feature = "guard")]
    #[cfg_attr(docsrs, doc(cfg(feature = "guard")))]
    pub fn conflict_guard(&self) -> Option<&lease_guard::ConflictGuard> {
        self.guard.as_ref()
    }

    /// Stops the conflict guard, disables the factories, then releases the lease.
    pub async fn shutdown(self) {
        #[cfg(feature = "guard")]
        if let Some(guard) = self.guard {
            guard.shutdown().await;
        }
        self.manager.shutdown().await;
    }
}
