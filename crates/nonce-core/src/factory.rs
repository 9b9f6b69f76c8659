//! The nonce factory: counters, lifecycle and the lease deadline.
//!
//! # How a call stays consistent with `disable` and `enable`
//!
//! `state` is a sequence word: `generation << 2 | WRITING | ENABLED`. Every change of machine
//! ID, counters or deadline bumps the generation. A generating call reads `state`, takes a
//! counter value, and reads `state` again; if the two reads differ the value may belong to
//! another generation, so it is dropped (never reused) and the call starts over. A dropped
//! value is a gap in the sequence, never a duplicate, and a nonce never mixes the machine ID of
//! one generation with the counter of another.
//!
//! # A refused call takes nothing
//!
//! The 64-bit counter and the sortable state are advanced with a compare-and-swap of a value
//! that has already passed the deadline, the 64-bit throttle and the 8192-per-ms cap: a call
//! refused with [`Error::WouldBlock`] or [`Error::LeaseExpired`] leaves them as they were, so
//! callers that retry in a loop (on a clock that cannot wait) never push the generator ahead
//! of the clock. The counters of 96 and 128-bit nonces, which no throttle holds back, are
//! advanced with one `fetch_add` after the generation's start is checked against the
//! deadline, so a generation past its deadline refuses them without taking anything either.
//!
//! # One kind per size
//!
//! Counter and sortable nonces of one size share one layout, so a factory that issued both
//! could repeat a value. `kinds` holds, per base size, the kind the factory issues: two bits
//! each, zero until the first call of that size claims its kind with a compare-and-swap (or
//! set from [`FactoryConfig`]). A claim is never undone, so a call checks it with one load
//! and compare before it takes any counter value, and a refused call consumes nothing.

use core::fmt;

use crate::MachineId;
use crate::cipher::{Engine64, Engine96, Engine128, Engines, zero_tail};
use crate::clock::Clock;
use crate::error::{Error, FactoryConfigError};
use crate::kind::{ALL_FORMS, Base, Kind};
use crate::layout::{
    self, COUNT64_BITS, COUNT64_MASK, COUNT96_BITS, COUNT96_MASK, DEFAULT_EPOCH_MS, MAX_TIMESTAMP,
    SORTABLE_COUNT_BITS, SORTABLE_COUNT_MASK,
};
use crate::nonce::{Nonce64, Nonce96, Nonce128};
use crate::stats::{GenerationStats, Tally};
use crate::sync::{AtomicU64, Padded, Relaxed, SeqCst};

const ENABLED: u64 = 1;
const WRITING: u64 = 2;
const GENERATION: u64 = 4;

/// `init_ts` of a factory never enabled.
const NEVER_ENABLED: u64 = u64::MAX;

/// A deadline that never passes: for factories whose machine ID is not leased.
pub const NO_DEADLINE: u64 = u64::MAX;

/// How to build a [`Factory`]: epoch, keys and ciphers. The machine ID comes later, with
/// [`Factory::enable`], because it is what a lease grants.
///
/// `K` is how keys are held; they are read through `AsRef<[u8]>` when the factory is built.
/// The default, borrowed `&[u8]` keys, needs no allocation ([`new`](FactoryConfig::new));
/// the `nononce` facade holds them as `Zeroizing<Vec<u8>>` (its `FactoryOptions`), so they
/// are zeroized when the settings are dropped. Keys are never printed.
///
/// The settings have one default, whatever holds the keys: [`new`](FactoryConfig::new) and
/// [`default`](FactoryConfig::default) are the same (the default epoch, no keys, the default
/// ciphers, no kind declared, one form per size, and with `std` the thread cache on).
///
/// Settings follow one style: `with_*` setters that consume and return the settings, and
/// getters named after the setting.
#[derive(Clone, Copy)]
pub struct FactoryConfig<K = &'static [u8]> {
    epoch_ms: u64,
    pub(crate) base_key: Option<K>,
    pub(crate) key64: Option<K>,
    pub(crate) key96: Option<K>,
    pub(crate) key128: Option<K>,
    pub(crate) cipher64: crate::Cipher64,
    pub(crate) cipher96: crate::Cipher96,
    pub(crate) cipher128: crate::Cipher128,
    kinds: u64,
    plain_and_encrypted: bool,
    thread_cache: bool,
}

impl<K> Default for FactoryConfig<K> {
    /// The default epoch (2025-01-01T00:00:00Z), no keys, default ciphers, and with `std` the
    /// thread cache on ([`with_thread_cache`](FactoryConfig::with_thread_cache)).
    fn default() -> Self {
        Self::empty()
    }
}

impl<K> fmt::Debug for FactoryConfig<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |key: &Option<K>| key.as_ref().map(|_| "<redacted>");
        f.debug_struct("FactoryConfig")
            .field("epoch_ms", &self.epoch_ms)
            .field("base_key", &redacted(&self.base_key))
            .field("key64", &redacted(&self.key64))
            .field("key96", &redacted(&self.key96))
            .field("key128", &redacted(&self.key128))
            .field("cipher64", &self.cipher64)
            .field("cipher96", &self.cipher96)
            .field("cipher128", &self.cipher128)
            .field("kind64", &self.kind64())
            .field("kind96", &self.kind96())
            .field("kind128", &self.kind128())
            .field("plain_and_encrypted", &self.plain_and_encrypted)
            .field("thread_cache", &self.thread_cache)
            .finish()
    }
}

impl FactoryConfig<&[u8]> {
    /// The default settings ([`FactoryConfig::default`]), keys borrowed; `default()` gives
    /// the same for other key storage.
    pub const fn new() -> Self {
        Self::empty()
    }
}

/// A setting of [`FactoryConfig`]: its `with_*` setter and its getter, named after the field.
macro_rules! settings {
    ($($(#[$set:meta])* $with:ident, $(#[$get:meta])* $field:ident: $ty:ty;)+) => {$(
        $(#[$set])*
        #[must_use]
        pub const fn $with(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }

        $(#[$get])*
        pub const fn $field(&self) -> $ty {
            self.$field
        }
    )+};
}

/// A key setter of [`FactoryConfig`] (keys have no getter: they are never read back).
macro_rules! keys {
    ($($(#[$set:meta])* $with:ident => $field:ident;)+) => {$(
        $(#[$set])*
        #[must_use]
        pub fn $with(mut self, key: K) -> Self {
            self.$field = Some(key);
            self
        }
    )+};
}

/// The declaration of a base size's kind in [`FactoryConfig`], and its getter: the declared
/// kind, if any.
macro_rules! kinds {
    ($($(#[$set:meta])* $with:ident, $get:ident: $bits:literal;)+) => {$(
        $(#[$set])*
        #[must_use]
        pub const fn $with(self, base: Base) -> Self {
            self.with_kind(Kind::new($bits, base))
        }

        #[doc = concat!("The declared kind of ", $bits, "-bit base nonces, if any.")]
        pub const fn $get(&self) -> Option<Base> {
            Kind::new($bits, Base::Counter).locked_in(self.kinds)
        }
    )+};
}

impl<K> FactoryConfig<K> {
    const fn empty() -> Self {
        Self {
            epoch_ms: DEFAULT_EPOCH_MS,
            base_key: None,
            key64: None,
            key96: None,
            key128: None,
            cipher64: crate::Cipher64::Blowfish,
            cipher96: crate::Cipher96::Blowfish,
            cipher128: crate::Cipher128::Aes,
            kinds: 0,
            plain_and_encrypted: false,
            // On wherever it is compiled in: a factory shared by every thread then scales with
            // them, with the guarantees of the shared calls (see `with_thread_cache`).
            thread_cache: cfg!(feature = "std"),
        }
    }

    settings! {
        /// Sets the epoch, in Unix milliseconds, that timestamps count from.
        with_epoch_ms,
        /// The epoch in Unix milliseconds.
        epoch_ms: u64;

        /// Chooses the 64-bit cipher.
        with_cipher64,
        /// The 64-bit cipher.
        cipher64: crate::Cipher64;

        /// Chooses the 96-bit cipher.
        with_cipher96,
        /// The 96-bit cipher.
        cipher96: crate::Cipher96;

        /// Chooses the 128-bit cipher.
        with_cipher128,
        /// The 128-bit cipher.
        cipher128: crate::Cipher128;

        /// Lets the factory's own counter calls (`counter64`, `counter96`, `counter128`,
        /// `encrypted64`/`encrypted96`/`encrypted128` with [`Base::Counter`]) draw on blocks of
        /// counter values reserved per thread, and its 96/128-bit sortable calls (`sortable96`,
        /// `sortable128`, and the encrypted calls on them) on runs of one millisecond's counts, as
        /// a [`Handle`](crate::Handle) does, so that a factory shared between threads scales with
        /// them without handles. On by default; `false` keeps every call on the shared counters,
        /// whose nonces follow one order for every thread. The cache needs `std`: without it the
        /// default is off and the setting has no effect, so that code which sets it builds with
        /// or without `std`.
        ///
        /// The guarantees are those of the shared calls: every call checks the factory's
        /// generation, so `disable`, `enable` and `set_deadline` reach cached blocks at once; a
        /// refused counter64 call takes nothing, and 64-bit blocks never run ahead of the clock;
        /// values left in a block when a thread exits or a generation ends are skipped, never
        /// reused. What changes: counter nonces no longer follow call order across threads (each
        /// thread's own still increase), and a thread's first calls of a size reserve a small
        /// block (1 value, doubling per refill up to 8192; encrypted runs are cut from a
        /// counter128 block of their own). Sortable nonces keep their clock read and carry the
        /// millisecond they were made in, as the shared calls do; each thread's own
        /// increase, and one made after another was returned never carries an earlier
        /// millisecond, but within one millisecond those of different threads are not in creation
        /// order (the shared calls keep one order for every thread). Each thread keeps blocks for
        /// a few factories at once; a thread that turns through more drops one's blocks for the
        /// next. `sortable64`, with its 8192-per-ms cap, and `fill_encrypted128` do not use it;
        /// in a factory that issues `sortable64` nonces, the 96/128-bit sortable calls take one
        /// count at a time, as the shared calls do, so as not to use up its 8192 a millisecond.
        with_thread_cache,
        /// Whether the factory's own calls draw on per-thread blocks
        /// ([`with_thread_cache`](Self::with_thread_cache)).
        thread_cache: bool;

        /// Lets the factory hand out plain and encrypted nonces of one size side by side (say
        /// `counter64` and `encrypted64`). Off by default: the first call of a returned size fixes
        /// whether the factory's nonces of that size are plain or encrypted, for its whole life,
        /// and a call of the other form fails with [`Error::EncryptionConflict`].
        ///
        /// Why: an encrypted nonce is a pseudo-random value of its size, which can equal a plain
        /// nonce of the same factory. Among n encrypted and m plain nonces of b bits, some pair is
        /// equal with probability about n·m/2^b: at 10^9 of each, about 5% at 64 bits
        /// (10^18/2^64), 1.3·10^-11 at 96 bits and 2.9·10^-21 at 128 bits. Turn this on only if
        /// the two forms never meet in one namespace (or that chance is acceptable). The 96-bit
        /// size counts `encrypted96` under every cipher, since what it returns is 96 bits.
        with_plain_and_encrypted,
        /// Whether plain and encrypted nonces of one size may come from the factory side by
        /// side ([`with_plain_and_encrypted`](Self::with_plain_and_encrypted)).
        plain_and_encrypted: bool;
    }

    keys! {
        /// Sets the base key (at least 32 bytes) from which per-size keys are derived.
        with_base_key => base_key;
        /// Sets an explicit 64-bit key, overriding the derived one (16 bytes for blowfish and
        /// speck, 24 for des3).
        with_key64 => key64;
        /// Sets an explicit 96-bit key (16 bytes for blowfish, 24 for des3, 18 for speck).
        with_key96 => key96;
        /// Sets an explicit 128-bit key (32 bytes).
        with_key128 => key128;
    }

    kinds! {
        /// Declares the kind of the factory's 64-bit base nonces: those of `counter64` or
        /// `sortable64`, `encrypted64`, and `encrypted96` with Blowfish or 3DES (whose base is a
        /// 64-bit nonce). A call of the other kind then fails with [`Error::KindConflict`] from
        /// the very first call; without a declaration the first call of the size fixes the kind.
        with_kind64, kind64: 64;
        /// Declares the kind of the factory's 96-bit base nonces: those of `counter96` or
        /// `sortable96`, and `encrypted96` with Speck. See [`with_kind64`](Self::with_kind64).
        with_kind96, kind96: 96;
        /// Declares the kind of the factory's 128-bit base nonces: those of `counter128` or
        /// `sortable128`, `encrypted128` and `fill_encrypted128`. See
        /// [`with_kind64`](Self::with_kind64).
        with_kind128, kind128: 128;
    }

    const fn with_kind(mut self, kind: Kind) -> Self {
        self.kinds = (self.kinds & !kind.base_mask()) | kind.base_value();
        self
    }
}

impl<K: AsRef<[u8]>> FactoryConfig<K> {
    /// Builds a disabled factory on `clock` from these settings, which stay as they are:
    /// [`Factory::new`] without giving them up.
    ///
    /// # Errors
    /// When a key, cipher or the epoch is invalid.
    pub fn build<C: Clock>(&self, clock: C) -> Result<Factory<C>, FactoryConfigError> {
        Factory::from_config(clock, self)
    }
}

/// What a generating call saw in one generation.
#[derive(Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) state: u64,
    pub(crate) machine_id: u16,
    /// The process's fork count the generation was enabled under (see `crate::fork`): a
    /// block cached under a snapshot is valid only in the process that took it.
    pub(crate) forks: u32,
    pub(crate) init_ts: u64,
    pub(crate) deadline_ts: u64,
}

/// Where the fork count sits in `Factory::machine_id`, above the machine ID.
const FORKS_SHIFT: u32 = 32;

/// Generates unique 64/96/128-bit nonces for one machine ID at a time.
///
/// A factory starts disabled; [`enable`](Factory::enable) gives it a machine ID and a lease
/// deadline. It is `Sync`: share it between threads (by reference or in an `Arc`). With
/// `std` its own counter and 96/128-bit sortable calls draw on blocks reserved per thread
/// ([`FactoryConfig::with_thread_cache`], on by default), so they scale with cores; with the
/// cache off, or without `std`, they contend on the factory's counters, and a per-thread
/// [`Handle`](crate::Handle) scales instead.
///
/// A factory issues one kind of base nonce per size, counter or sortable, fixed by the first
/// call of that size (or declared with [`FactoryConfig::with_kind64`] and its siblings); a call of
/// the other kind fails with [`Error::KindConflict`]. Encrypted nonces count as their base:
/// `encrypted64`, and `encrypted96` with Blowfish or 3DES, are 64-bit; `encrypted96` with
/// Speck is 96-bit; `encrypted128` and `fill_encrypted128` are 128-bit.
///
/// ```
/// use nonce_core::{Factory, FactoryConfig, MachineId, ManualClock, NO_DEADLINE};
///
/// let clock = ManualClock::new(1_800_000_000_000);
/// let factory = Factory::new(&clock, FactoryConfig::new()).unwrap();
/// let id = MachineId::new(7).unwrap();
/// factory.enable(id, NO_DEADLINE).unwrap();
/// let a = factory.counter64().unwrap();
/// let b = factory.counter64().unwrap();
/// assert_ne!(a, b);
/// assert_eq!(a.decode(factory.epoch_ms()).machine_id, id);
/// ```
pub struct Factory<C: Clock> {
    clock: C,
    epoch_ms: u64,
    /// This factory's ID in the per-thread caches ([`FactoryConfig::with_thread_cache`]); 0: none.
    cache_id: u64,
    engines: Engines,
    /// The sequence word (see the module docs).
    state: AtomicU64,
    /// The kind each base size is claimed for (see the module docs); read next to `state`.
    kinds: AtomicU64,
    /// The machine ID, and above it (`FORKS_SHIFT`) the process's fork count at the enable
    /// that set it, read in the same load.
    machine_id: AtomicU64,
    init_ts: AtomicU64,
    deadline_ts: AtomicU64,
    /// Highest clock reading (in timestamp units) the 64-bit counter throttle has seen.
    observed_ts: AtomicU64,
    c64: Padded<AtomicU64>,
    /// A recent value of `c64`, stored (relaxed) by each call that took one: the guess the
    /// next call's compare-and-swap starts from. Loading `c64` itself right after a locked
    /// write to it made every counter64 call several ns slower; a wrong guess only fails the
    /// compare-and-swap, which then reports the true value.
    c64_hint: Padded<AtomicU64>,
    c96: Padded<AtomicU64>,
    sortable: Padded<AtomicU64>,
    /// Generation counts, written only off the nonce path ([`stats`](Factory::stats)).
    tally: Tally,
}

impl<C: Clock> fmt::Debug for Factory<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Factory")
            .field("epoch_ms", &self.epoch_ms)
            .field("enabled", &self.is_enabled())
            .field("machine_id", &self.machine_id())
            .field("deadline_ms", &self.deadline_ms())
            .field("kinds", &self.kinds_debug())
            .field("thread_cache", &(self.cache_id != 0))
            .field("keys", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Factory<C> {
    /// Builds a disabled factory. Keys are derived here (PBKDF2, about a millisecond per key).
    /// `config` holds its keys in any form that reads as bytes: borrowed (`&[u8]`) or owned
    /// (the facade's zeroizing `Vec<u8>`, dropped, and so zeroized, once the keys are derived).
    pub fn new<K: AsRef<[u8]>>(
        clock: C,
        config: FactoryConfig<K>,
    ) -> Result<Self, FactoryConfigError> {
        Self::from_config(clock, &config)
    }

    fn from_config<K: AsRef<[u8]>>(
        clock: C,
        config: &FactoryConfig<K>,
    ) -> Result<Self, FactoryConfigError> {
        fn key<K: AsRef<[u8]>>(k: &Option<K>) -> Option<&[u8]> {
            k.as_ref().map(AsRef::as_ref)
        }
        let engines = Engines::new(
            key(&config.base_key),
            (config.cipher64, key(&config.key64)),
            (config.cipher96, key(&config.key96)),
            (config.cipher128, key(&config.key128)),
        )?;
        let factory = Self {
            clock,
            epoch_ms: config.epoch_ms,
            cache_id: cache_id(config.thread_cache),
            engines,
            state: AtomicU64::new(0),
            kinds: AtomicU64::new(if config.plain_and_encrypted {
                config.kinds | ALL_FORMS
            } else {
                config.kinds
            }),
            machine_id: AtomicU64::new(0),
            init_ts: AtomicU64::new(NEVER_ENABLED),
            deadline_ts: AtomicU64::new(0),
            observed_ts: AtomicU64::new(0),
            c64: Padded(AtomicU64::new(0)),
            c64_hint: Padded(AtomicU64::new(0)),
            c96: Padded(AtomicU64::new(u64::MAX)),
            sortable: Padded(AtomicU64::new(0)),
            tally: Tally::new(),
        };
        factory.now_ts_checked()?;
        Ok(factory)
    }

    /// The epoch in Unix milliseconds.
    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Whether generation is currently allowed: enabled, and not a copy of an enabled factory
    /// in a forked child ([`Error::Forked`]).
    pub fn is_enabled(&self) -> bool {
        self.snapshot().is_ok()
    }

    /// The machine ID, while enabled.
    pub fn machine_id(&self) -> Option<MachineId> {
        self.snapshot()
            .ok()
            .map(|s| MachineId::from_low_bits(u64::from(s.machine_id)))
    }

    /// The lease deadline in clock milliseconds ([`NO_DEADLINE`] if none), while enabled.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.snapshot().ok().map(|s| self.ts_to_ms(s.deadline_ts))
    }

    /// Milliseconds left before the 42-bit timestamp overflows for this epoch. NoNoncense warns
    /// when this drops below a year ([`OVERFLOW_WARNING_MS`](crate::OVERFLOW_WARNING_MS)).
    pub fn ms_until_overflow(&self) -> u64 {
        MAX_TIMESTAMP.saturating_sub(self.clock.now_ms().saturating_sub(self.epoch_ms))
    }

    /// Gives the factory a machine ID and a lease deadline (clock ms; [`NO_DEADLINE`] for
    /// none) and enables generation: [`enable_above`](Factory::enable_above) with floor 0.
    ///
    /// Every enable starts a new generation of counters at a timestamp no earlier than now and
    /// later than any timestamp this factory has issued, whatever the machine ID. (NoNoncense
    /// resumes the old counters when the ID is the same, which lets a 64-bit counter burst
    /// through past milliseconds in which another node may have held the ID.) A concurrent
    /// [`disable`](Factory::disable) wins: the factory then stays disabled. Kinds fixed
    /// earlier (see [`Error::KindConflict`]) stay fixed.
    pub fn enable(
        &self,
        machine_id: MachineId,
        deadline_ms: u64,
    ) -> Result<(), FactoryConfigError> {
        self.enable_above(machine_id, 0, deadline_ms)
    }

    /// [`enable`](Factory::enable), with every timestamp of the new generation strictly above
    /// `floor_ms`: the floor an earlier holder of the machine ID left (its
    /// [`issued_up_to_ms`](Factory::issued_up_to_ms)), so that this factory cannot repeat that
    /// holder's nonces whatever the two clocks say.
    ///
    /// `floor_ms` is in clock ms, like `deadline_ms`; a floor below the epoch has no effect.
    /// The generation starts at the latest of now (the clock's
    /// [`exact_now_ms`](Clock::exact_now_ms)), one past the floor and one past everything this
    /// factory issued so far. What each kind then does while the clock is still at or
    /// below the floor:
    ///
    /// - counter96 and counter128 start past the floor at once (ahead of the clock, as they
    ///   may run anyway);
    /// - counter64 starts past the floor but, as always, waits for the clock before it issues
    ///   a timestamp ahead of it: the call sleeps (a clock that can wait) or returns
    ///   [`Error::WouldBlock`] until the clock is past the floor;
    /// - sortable nonces carry the starting millisecond (one past the floor) until the clock
    ///   passes it: sortable64 issues the rest of that millisecond's 8192 counts and then
    ///   waits or returns [`Error::WouldBlock`]; sortable96 and sortable128 keep counting,
    ///   spilling into the following milliseconds after 4 194 304 values each.
    ///
    /// A refused call takes no value, so retrying, even in a tight loop, never moves the
    /// generator ahead of the clock; retrying at the `until_ms` the error names saves the
    /// spinning.
    ///
    /// A floor at or past the deadline leaves nothing to issue: every call returns
    /// [`Error::LeaseExpired`]. A floor so late that the 42-bit timestamp would overflow
    /// returns [`FactoryConfigError::TimestampOverflow`] and leaves the factory disabled.
    pub fn enable_above(
        &self,
        machine_id: MachineId,
        floor_ms: u64,
        deadline_ms: u64,
    ) -> Result<(), FactoryConfigError> {
        crate::fork::watch()?;
        let now_ts = self.now_ts_checked()?;
        let above_floor = floor_ms
            .checked_sub(self.epoch_ms)
            .map_or(0, |ts| ts.saturating_add(1));
        let ws = self.write_begin();
        let init = now_ts.max(above_floor).max(self.next_free_ts());
        if init > MAX_TIMESTAMP {
            self.write_end(ws, false);
            return Err(FactoryConfigError::TimestampOverflow {
                epoch_ms: self.epoch_ms,
            });
        }
        self.machine_id.store(
            u64::from(machine_id.get()) | u64::from(crate::fork::count()) << FORKS_SHIFT,
            SeqCst,
        );
        let ended_init = self.init_ts.swap(init, SeqCst);
        self.deadline_ts.store(self.ms_to_ts(deadline_ms), SeqCst);
        self.observed_ts.store(now_ts, SeqCst);
        // Swaps, not stores, for the same reason as the reads in `next_free_ts`: counters only
        // ever see read-modify-writes, so every value is taken from the one before it.
        let ended64 = self
            .c64
            .swap((init << COUNT64_BITS).wrapping_sub(1), SeqCst);
        let ended96 = self.c96.swap(u64::MAX, SeqCst);
        let ended_sortable = self.sortable.swap(init << SORTABLE_COUNT_BITS, SeqCst);
        // What the ended generation took, for `stats` (which reads under the writer role's
        // sequence word, so never half of this).
        if ended_init != NEVER_ENABLED {
            let start64 = (ended_init << COUNT64_BITS).wrapping_sub(1);
            self.tally
                .counter64_ended
                .fetch_add(ended64.wrapping_sub(start64), Relaxed);
        }
        self.tally
            .counter96_ended
            .fetch_add(ended96.wrapping_add(1), Relaxed);
        // The ended millisecond's counts (its last count plus one), less the count the new
        // start records as taken and is not.
        self.tally
            .sortable_closed
            .fetch_add(ended_sortable & SORTABLE_COUNT_MASK, Relaxed);
        self.write_end(ws, true);
        Ok(())
    }

    /// An upper bound, in clock ms, of every timestamp this factory has issued: every kind,
    /// every handle, every generation. It is at least the `floor_ms` of the last
    /// [`enable_above`](Factory::enable_above), so a successor enabled strictly above it can
    /// never repeat a nonce of this factory. 0 for a factory never enabled.
    ///
    /// While the factory is enabled, generation may pass it a moment later; once the factory
    /// is disabled it is final. It counts values the counters have handed out, including
    /// those reserved by handles and not yet used, or dropped by a call that raced with a
    /// change of generation, so it can be a little above the latest timestamp actually
    /// returned.
    pub fn issued_up_to_ms(&self) -> u64 {
        loop {
            let s = self.state.load(SeqCst);
            if s & WRITING != 0 {
                // An enable is resetting the counters; read them after it.
                core::hint::spin_loop();
                continue;
            }
            let next = self.next_free_ts();
            if self.state.load(SeqCst) == s {
                return next
                    .checked_sub(1)
                    .map_or(0, |ts| ts.saturating_add(self.epoch_ms));
            }
        }
    }

    /// One past the latest timestamp the counters have handed out, in every generation, and
    /// at least the current generation's start; 0 before the first enable. Consistent only
    /// while no enable runs: `enable_above` calls it holding the writer role, and
    /// `issued_up_to_ms` retries when a writer ran meanwhile.
    fn next_free_ts(&self) -> u64 {
        // Read-modify-writes, not loads: a generator whose increment this read misses is then
        // ordered after it, and so sees the writer role taken and drops its value. (A plain
        // load gives that only under a total order of every access, which weaker models lack.)
        let c64 = self.c64.fetch_add(0, SeqCst);
        let c96 = self.c96.fetch_add(0, SeqCst);
        let sortable = self.sortable.fetch_add(0, SeqCst);
        let init = self.init_ts.load(SeqCst);
        if init == NEVER_ENABLED {
            return 0;
        }
        // The last value taken, or `init << 13` minus one (wrapping at 0) if none was: the
        // next 8192-count boundary is one past its timestamp, or `init`.
        let next64 = c64.wrapping_add(1).div_ceil(1 << COUNT64_BITS);
        // The last (timestamp, count) taken, or (init, 0) if none was.
        let next_sortable = (sortable >> SORTABLE_COUNT_BITS) + 1;
        // The last value taken (`u64::MAX`: none): counter128 carries `init`, counter96 adds
        // the count's high bits.
        let next96 = if c96 == u64::MAX {
            init
        } else {
            init + (c96 >> COUNT96_BITS) + 1
        };
        next64.max(next_sortable).max(next96)
    }

    /// What this factory has generated and refused since it was built, for metrics: read off
    /// its generators and its refusal tallies, which nothing on the nonce path writes (see
    /// [`GenerationStats`] for what each count holds).
    ///
    /// Every count only grows, except that the values taken can step back by what a
    /// per-thread block gives back unused and, for a moment, by a millisecond's sortable
    /// counts being closed: publish the largest value seen (a metrics counter's `absolute`).
    ///
    /// ```
    /// use nonce_core::{Factory, FactoryConfig, Generator, MachineId, ManualClock, NO_DEADLINE};
    ///
    /// let clock = ManualClock::new(1_800_000_000_000);
    /// let factory = Factory::new(&clock, FactoryConfig::new().with_thread_cache(false)).unwrap();
    /// factory.enable(MachineId::new(7).unwrap(), NO_DEADLINE).unwrap();
    /// for _ in 0..3 {
    ///     factory.counter96().unwrap();
    /// }
    /// let stats = factory.stats();
    /// assert_eq!(stats.taken(Generator::Counter96And128), 3);
    /// assert_eq!(stats.sizes(Generator::Counter96And128).collect::<Vec<_>>(), [96]);
    /// ```
    pub fn stats(&self) -> GenerationStats {
        let t = &self.tally;
        loop {
            let s = self.state.load(SeqCst);
            if s & WRITING != 0 {
                // An enable is moving the counters into the tallies; read after it.
                core::hint::spin_loop();
                continue;
            }
            let init = self.init_ts.load(SeqCst);
            let c64 = self.c64.load(SeqCst);
            let c96 = self.c96.load(SeqCst);
            let sortable = self.sortable.load(SeqCst);
            let ended64 = t.counter64_ended.load(Relaxed);
            let ended96 = t.counter96_ended.load(Relaxed);
            let closed = t.sortable_closed.load(Relaxed);
            if self.state.load(SeqCst) != s {
                continue;
            }
            let current64 = if init == NEVER_ENABLED {
                0
            } else {
                c64.wrapping_sub((init << COUNT64_BITS).wrapping_sub(1))
            };
            let unused = |i: usize| t.unused[i].load(Relaxed);
            let taken = |total: u64, i: usize| total.saturating_sub(unused(i));
            let word = self.kinds.load(SeqCst);
            return GenerationStats {
                counter64: taken(ended64.wrapping_add(current64), 0),
                counter96_128: taken(ended96.wrapping_add(c96.wrapping_add(1)), 1),
                sortable: taken(
                    closed
                        .wrapping_add(sortable & SORTABLE_COUNT_MASK)
                        .wrapping_add(1),
                    2,
                ),
                throttled: t.throttled.load(Relaxed),
                kind_conflicts: core::array::from_fn(|i| t.kind_conflicts[i].load(Relaxed)),
                lease_expired: t.lease_expired.load(Relaxed),
                kinds: [Kind::COUNTER64, Kind::COUNTER96, Kind::COUNTER128]
                    .map(|k| k.locked_in(word)),
            };
        }
    }

    /// The refusal tallies and give-backs, for the calls, handles and thread caches.
    #[inline]
    pub(crate) fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Counts a refused call (see [`Tally::refused`]) and returns its result unchanged: the
    /// one step each public generating call adds, a branch on its error.
    #[inline(always)]
    pub(crate) fn counted<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &result {
            self.tally.refused(*e);
        }
        result
    }

    /// The sortable state moved from `last` to a new millisecond: adds up the counts taken
    /// in the one it left. Once per millisecond at most, by the call that moved it.
    #[cold]
    #[inline(never)]
    fn close_millisecond(&self, last: u64) {
        self.tally
            .sortable_closed
            .fetch_add((last & SORTABLE_COUNT_MASK) + 1, Relaxed);
    }

    /// Moves the lease deadline (clock ms), for a renewal. It may also move it earlier. Calls
    /// in flight start over and handles drop their cached state, so none emits a nonce past
    /// a deadline set before the call began. Generation continues throughout: a renewal
    /// never makes a call fail.
    pub fn set_deadline(&self, deadline_ms: u64) {
        let deadline_ts = self.ms_to_ts(deadline_ms);
        loop {
            let s = self.state.load(SeqCst);
            if s & WRITING != 0 {
                // An `enable` is storing its own deadline; this later call must win.
                core::hint::spin_loop();
                continue;
            }
            self.deadline_ts.store(deadline_ts, SeqCst);
            // Fails if an enable or disable ran since the load: store again after it.
            if self
                .state
                .compare_exchange(s, s.wrapping_add(GENERATION), SeqCst, SeqCst)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Stops generation. Every call that begins after this returns fails with
    /// [`Error::Disabled`]; counters are kept so a later [`enable`](Factory::enable) can start
    /// past them.
    pub fn disable(&self) {
        let mut s = self.state.load(SeqCst);
        loop {
            let next = (s & !ENABLED).wrapping_add(GENERATION);
            match self.state.compare_exchange(s, next, SeqCst, SeqCst) {
                Ok(_) => return,
                Err(actual) => s = actual,
            }
        }
    }

    /// Takes the writer role: bumps the generation, clears `ENABLED`, sets `WRITING`. Returns
    /// the state written.
    fn write_begin(&self) -> u64 {
        let mut s = self.state.load(SeqCst);
        loop {
            if s & WRITING != 0 {
                // Another writer holds the role for a few stores; wait for it.
                core::hint::spin_loop();
                s = self.state.load(SeqCst);
                continue;
            }
            let next = (s & !ENABLED).wrapping_add(GENERATION) | WRITING;
            match self.state.compare_exchange(s, next, SeqCst, SeqCst) {
                Ok(_) => return next,
                Err(actual) => s = actual,
            }
        }
    }

    fn write_end(&self, written: u64, enable: bool) {
        let done = ((written & !WRITING).wrapping_add(GENERATION)) | u64::from(enable);
        if self
            .state
            .compare_exchange(written, done, SeqCst, SeqCst)
            .is_ok()
        {
            return;
        }
        // A disable ran meanwhile: leave the factory disabled, drop the writer role.
        let mut s = self.state.load(SeqCst);
        loop {
            let next = (s & !(WRITING | ENABLED)).wrapping_add(GENERATION);
            match self.state.compare_exchange(s, next, SeqCst, SeqCst) {
                Ok(_) => return,
                Err(actual) => s = actual,
            }
        }
    }

    #[inline]
    pub(crate) fn snapshot(&self) -> Result<Snapshot, Error> {
        let state = self.state.load(SeqCst);
        if state & ENABLED == 0 {
            return Err(Error::Disabled);
        }
        let word = self.machine_id.load(SeqCst);
        // The count is the word's high 32 bits.
        #[allow(clippy::cast_possible_truncation)]
        let forks = (word >> FORKS_SHIFT) as u32;
        if forks != crate::fork::count() {
            return Err(Error::Forked);
        }
        Ok(Snapshot {
            state,
            machine_id: MachineId::from_low_bits(word).get(),
            forks,
            init_ts: self.init_ts.load(SeqCst),
            deadline_ts: self.deadline_ts.load(SeqCst),
        })
    }

    /// Checks that this factory issues `kind` at its size, claiming the size on first use.
    #[inline]
    pub(crate) fn claim(&self, kind: Kind) -> Result<(), Error> {
        if self.kinds.load(SeqCst) & kind.mask() == kind.value() {
            return Ok(());
        }
        self.claim_slow(kind)
    }

    // Out of line: inlined, the compare-and-swap loop made every generating function around
    // it measurably slower (encrypted64 by several ns).
    #[cold]
    #[inline(never)]
    fn claim_slow(&self, kind: Kind) -> Result<(), Error> {
        let mut word = self.kinds.load(SeqCst);
        loop {
            let mut claimed = word;
            match kind.locked_in(word) {
                Some(locked) if locked != kind.base => {
                    self.tally.kind_conflict(kind);
                    return Err(Error::KindConflict {
                        bits: kind.bits,
                        locked,
                    });
                }
                Some(_) => {}
                None => claimed |= kind.base_value(),
            }
            if word & kind.form_bit() == 0 {
                if word & kind.other_form_bit() != 0 {
                    return Err(Error::EncryptionConflict {
                        bits: kind.out_bits,
                        encrypted: !kind.encrypted,
                    });
                }
                claimed |= kind.form_bit();
            }
            // Of racing first uses of one size, exactly one compare-and-swap wins.
            match self.kinds.compare_exchange(word, claimed, SeqCst, SeqCst) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    /// Whether this factory issues 64-bit sortable nonces: its 64-bit base size is claimed
    /// for them (a claim is never undone).
    #[cfg_attr(not(all(feature = "std", not(loom))), allow(dead_code))]
    pub(crate) fn issues_sortable64(&self) -> bool {
        Kind::SORTABLE64.locked_in(self.kinds.load(SeqCst)) == Some(Base::Sortable)
    }

    fn kinds_debug(&self) -> [Option<Base>; 3] {
        let word = self.kinds.load(SeqCst);
        [Kind::COUNTER64, Kind::COUNTER96, Kind::COUNTER128].map(|k| k.locked_in(word))
    }

    #[inline]
    pub(crate) fn unchanged(&self, snap: &Snapshot) -> bool {
        self.state.load(SeqCst) == snap.state
    }

    /// Whether a block cached under a snapshot of `state` taken in a process of `forks`
    /// forks still belongs to the current generation, in this process: the check of every
    /// call served from a cache.
    #[inline]
    pub(crate) fn is_current(&self, state: u64, forks: u32) -> bool {
        state == self.state.load(SeqCst) && forks == crate::fork::count()
    }

    fn ms_to_ts(&self, ms: u64) -> u64 {
        if ms == NO_DEADLINE {
            u64::MAX
        } else {
            ms.saturating_sub(self.epoch_ms)
        }
    }

    fn ts_to_ms(&self, ts: u64) -> u64 {
        if ts == u64::MAX {
            NO_DEADLINE
        } else {
            ts + self.epoch_ms
        }
    }

    /// The clock's exact reading in timestamp units, checked against the epoch and overflow.
    /// Exact, not `now_ms`: a generation starts here, and a start taken from a lagging reading
    /// would put a successor's first timestamps into the time its predecessor may have used.
    fn now_ts_checked(&self) -> Result<u64, FactoryConfigError> {
        let now = self.clock.exact_now_ms();
        let ts = now
            .checked_sub(self.epoch_ms)
            .ok_or(FactoryConfigError::EpochInFuture {
                epoch_ms: self.epoch_ms,
                now_ms: now,
            })?;
        if ts > MAX_TIMESTAMP {
            return Err(FactoryConfigError::TimestampOverflow {
                epoch_ms: self.epoch_ms,
            });
        }
        Ok(ts)
    }

    /// The clock in timestamp units (a clock before the epoch reads as 0).
    #[inline]
    pub(crate) fn now_ts(&self) -> u64 {
        self.clock.now_ms().saturating_sub(self.epoch_ms)
    }

    /// A nonce with timestamp `ts` is safe while `ts` is below the deadline: a successor
    /// starts only after the deadline, so every timestamp it issues is later.
    #[inline]
    pub(crate) fn check_ts(ts: u64, snap: &Snapshot) -> Result<(), Error> {
        if ts >= snap.deadline_ts {
            return Err(Error::LeaseExpired);
        }
        if ts > MAX_TIMESTAMP {
            return Err(Error::TimestampOverflow);
        }
        Ok(())
    }

    /// Keeps 64-bit counter timestamps from running ahead of the clock.
    #[inline]
    pub(crate) fn throttle(&self, ts: u64) -> Result<(), Error> {
        if ts <= self.observed_ts.load(SeqCst) {
            return Ok(());
        }
        self.throttle_slow(ts)
    }

    #[cold]
    fn throttle_slow(&self, ts: u64) -> Result<(), Error> {
        let now = self.now_ts();
        self.observed_ts.fetch_max(now, SeqCst);
        if ts <= now {
            return Ok(());
        }
        self.tally.throttled();
        let until_ms = ts + self.epoch_ms;
        if self.clock.wait_until_ms(until_ms) {
            self.observed_ts.fetch_max(ts, SeqCst);
            Ok(())
        } else {
            Err(Error::WouldBlock { until_ms })
        }
    }

    /// Takes one value of the 64-bit counter that may be issued now: `(snapshot, value)`.
    ///
    /// The value is committed (compare-and-swap) only once it passed the deadline and the
    /// throttle, so a refused call leaves the counter where it was.
    #[inline]
    fn take64(&self, kind: Kind) -> Result<(Snapshot, u64), Error> {
        let snap = self.snapshot()?;
        self.claim(kind)?;
        let last = self.c64_hint.load(Relaxed);
        let v = last.wrapping_add(1);
        let ts = v >> COUNT64_BITS;
        // The common case, kept small enough to inline: the guess is right, and its successor
        // is below the deadline and within what the throttle has seen of the clock.
        if Self::check_ts(ts, &snap).is_ok()
            && ts <= self.observed_ts.load(SeqCst)
            && self.c64.compare_exchange(last, v, SeqCst, SeqCst).is_ok()
        {
            self.c64_hint.store(v, Relaxed);
            if self.unchanged(&snap) {
                return Ok((snap, v));
            }
        }
        self.take64_slow(kind)
    }

    /// [`take64`](Self::take64) past the common case: a race, the throttle's clock reading or
    /// wait, a refusal, or a change of generation.
    #[cold]
    #[inline(never)]
    fn take64_slow(&self, kind: Kind) -> Result<(Snapshot, u64), Error> {
        'generation: loop {
            let snap = self.snapshot()?;
            self.claim(kind)?;
            let mut last = self.c64.load(SeqCst);
            let v = loop {
                let v = last.wrapping_add(1);
                if let Err(e) = self.admit64(&snap, v) {
                    // A value of another generation may fail checks of this one's snapshot.
                    if self.unchanged(&snap) {
                        return Err(e);
                    }
                    continue 'generation;
                }
                match self.c64.compare_exchange_weak(last, v, SeqCst, SeqCst) {
                    Ok(_) => break v,
                    Err(actual) => last = actual,
                }
            };
            self.c64_hint.store(v, Relaxed);
            if self.unchanged(&snap) {
                return Ok((snap, v));
            }
        }
    }

    /// Reserves `n` values of a counter for nonces of `kind`; returns the snapshot and the
    /// first value.
    #[inline]
    pub(crate) fn reserve(
        &self,
        counter: Counter,
        kind: Kind,
        n: u64,
    ) -> Result<(Snapshot, u64), Error> {
        let atomic = match counter {
            Counter::C64 => &self.c64,
            Counter::C96 => &self.c96,
        };
        loop {
            let snap = self.snapshot()?;
            self.claim(kind)?;
            // Every value of the generation carries its start or later: if the start is past
            // the deadline, refuse before taking anything.
            if let Err(e) = Self::check_ts(snap.init_ts, &snap) {
                if self.unchanged(&snap) {
                    return Err(e);
                }
                continue;
            }
            let v = atomic.fetch_add(n, SeqCst).wrapping_add(1);
            if self.unchanged(&snap) {
                return Ok((snap, v));
            }
        }
    }

    /// Whether the 64-bit counter value `v` may be issued now: below the deadline and not
    /// ahead of the clock (waiting for it, if the clock can wait).
    #[inline]
    fn admit64(&self, snap: &Snapshot, v: u64) -> Result<(), Error> {
        let ts = v >> COUNT64_BITS;
        Self::check_ts(ts, snap)?;
        self.throttle(ts)
    }

    /// Reserves up to `want` values of the 64-bit counter for nonces of `kind` that may all
    /// be issued now (below the deadline and within what the throttle has seen of the clock):
    /// `(snapshot, first, count)`, or `None` when not even the next value may be issued now,
    /// and nothing taken.
    #[cfg_attr(not(all(feature = "std", not(loom))), allow(dead_code))]
    pub(crate) fn reserve64(
        &self,
        want: u64,
        kind: Kind,
    ) -> Result<Option<(Snapshot, u64, u64)>, Error> {
        'generation: loop {
            let snap = self.snapshot()?;
            self.claim(kind)?;
            // A guess; a wrong one only fails the compare-and-swap, which reports the truth.
            let mut last = self.c64_hint.load(Relaxed);
            loop {
                let first = last.wrapping_add(1);
                let ts = first >> COUNT64_BITS;
                let limit = self
                    .observed_ts
                    .load(SeqCst)
                    .min(snap.deadline_ts.saturating_sub(1))
                    .min(MAX_TIMESTAMP);
                if ts > limit {
                    // A value of another generation may fail checks of this one's snapshot.
                    if self.unchanged(&snap) {
                        return Ok(None);
                    }
                    continue 'generation;
                }
                // Up to the end of the last admissible millisecond.
                let end = first
                    .saturating_add(want.max(1))
                    .min((limit + 1) << COUNT64_BITS);
                match self.c64.compare_exchange(last, end - 1, SeqCst, SeqCst) {
                    Ok(_) => {
                        self.c64_hint.store(end - 1, Relaxed);
                        if self.unchanged(&snap) {
                            return Ok(Some((snap, first, end - first)));
                        }
                        continue 'generation;
                    }
                    Err(actual) => last = actual,
                }
            }
        }
    }

    #[inline]
    pub(crate) fn pack_counter64(snap: &Snapshot, v: u64) -> Nonce64 {
        Nonce64::from_u64(layout::pack64(
            v >> COUNT64_BITS,
            snap.machine_id,
            v & COUNT64_MASK,
        ))
    }

    #[inline]
    pub(crate) fn finish64(&self, snap: &Snapshot, v: u64) -> Result<Nonce64, Error> {
        self.admit64(snap, v)?;
        Ok(Self::pack_counter64(snap, v))
    }

    /// The timestamp and count of the 96-bit counter value `v`, the timestamp checked: the
    /// generation's start plus the carries out of the 45-bit count.
    #[inline]
    pub(crate) fn split96(snap: &Snapshot, v: u64) -> Result<(u64, u64), Error> {
        // Every caller checked the start before taking `v` (where this is inlined beside that
        // check, the compiler folds the two); checked here too, so that this is right alone.
        Self::check_ts(snap.init_ts, snap)?;
        let carry = v >> COUNT96_BITS;
        // No carry: the value is the count, the start the timestamp, and no compare with
        // the deadline follows the counter's locked operation.
        if carry == 0 {
            return Ok((snap.init_ts, v));
        }
        let ts = snap.init_ts + carry;
        Self::check_ts(ts, snap)?;
        Ok((ts, v & COUNT96_MASK))
    }

    #[inline]
    pub(crate) fn finish96(snap: &Snapshot, v: u64) -> Result<Nonce96, Error> {
        let (ts, count) = Self::split96(snap, v)?;
        Ok(Self::pack96(snap, ts, count))
    }

    /// A 96-bit nonce of a checked timestamp (at most `MAX_TIMESTAMP`) and a 45-bit count.
    #[inline]
    fn pack96(snap: &Snapshot, ts: u64, count: u64) -> Nonce96 {
        Nonce96::from_u128(layout::pack96(ts, snap.machine_id, count)).expect("96 bits")
    }

    #[inline]
    pub(crate) fn finish128(snap: &Snapshot, v: u64) -> Result<Nonce128, Error> {
        Self::check_ts(snap.init_ts, snap)?;
        Ok(Nonce128::from_u128(layout::pack128(
            snap.init_ts,
            snap.machine_id,
            v,
        )))
    }

    /// [`counter64`](Self::counter64) on the shared counter.
    #[inline]
    pub(crate) fn shared_counter64(&self, kind: Kind) -> Result<Nonce64, Error> {
        let (snap, v) = self.take64(kind)?;
        Ok(Self::pack_counter64(&snap, v))
    }

    #[inline]
    pub(crate) fn shared_counter96(&self, kind: Kind) -> Result<Nonce96, Error> {
        let snap = self.snapshot()?;
        self.claim(kind)?;
        if Self::check_ts(snap.init_ts, &snap).is_ok() {
            let v = self.c96.fetch_add(1, SeqCst).wrapping_add(1);
            // Written out here, not through `reserve` and `finish96`: the common case (the
            // generation unchanged, no carry into the timestamp) then runs straight on from
            // the counter's locked operation to the caller's store. Through them, it jumped
            // three times on the way, and the call cost 1.4x a `fetch_add` and the packing;
            // here about as much (the `paired` benchmark's `fetch_add/counter96_u128`).
            if !self.unchanged(&snap) || v >> COUNT96_BITS != 0 {
                return self.shared_counter96_slow(kind, Some((snap.state, v)));
            }
            return Ok(Self::pack96(&snap, snap.init_ts, v));
        }
        self.shared_counter96_slow(kind, None)
    }

    /// [`shared_counter96`](Self::shared_counter96) past the common case: `v` taken after
    /// reading `state` and carried into the timestamp, or taken across a change of generation
    /// (then dropped, never issued, as `reserve` drops such a value), or none taken because
    /// the generation's start is refused. Given the state word, not the snapshot: passing the
    /// snapshot by reference made the common case store it on every call.
    #[cold]
    #[inline(never)]
    fn shared_counter96_slow(
        &self,
        kind: Kind,
        taken: Option<(u64, u64)>,
    ) -> Result<Nonce96, Error> {
        if let Some((state, v)) = taken {
            let snap = self.snapshot()?;
            // The state word is the same from before `v` was taken until after this snapshot's
            // fields were read, so no writer ran between: `v` and `snap` are of one generation.
            if snap.state == state && self.unchanged(&snap) {
                return Self::finish96(&snap, v);
            }
        }
        let (snap, v) = self.reserve(Counter::C96, kind, 1)?;
        Self::finish96(&snap, v)
    }

    #[inline]
    pub(crate) fn shared_counter128(&self, kind: Kind) -> Result<Nonce128, Error> {
        let (snap, v) = self.reserve(Counter::C96, kind, 1)?;
        Self::finish128(&snap, v)
    }

    #[cfg_attr(not(all(feature = "std", not(loom))), allow(dead_code))]
    #[inline]
    pub(crate) fn cache_id(&self) -> u64 {
        self.cache_id
    }

    /// Takes a sortable `(snapshot, timestamp, count)` for nonces of `kind`; 64-bit ones have
    /// the 13-bit count limit.
    ///
    /// The state is committed (compare-and-swap) only once the value passed the cap and the
    /// deadline, so a refused call leaves it where it was: retries cannot carry the 22-bit
    /// count into the timestamp.
    pub(crate) fn take_sortable(&self, kind: Kind) -> Result<(Snapshot, u64, u64), Error> {
        let cap64 = kind.bits == 64;
        'generation: loop {
            let snap = self.snapshot()?;
            self.claim(kind)?;
            let now = self.now_ts();
            let mut last = self.sortable.load(SeqCst);
            let (ts, count) = loop {
                let (next, ts, count) = if now > last >> SORTABLE_COUNT_BITS {
                    (now << SORTABLE_COUNT_BITS, now, 0)
                } else {
                    // The state's timestamp, not `now`: a generation may start a little ahead
                    // of the clock.
                    match last.checked_add(1) {
                        Some(next) => (
                            next,
                            next >> SORTABLE_COUNT_BITS,
                            next & SORTABLE_COUNT_MASK,
                        ),
                        // The last count of the last millisecond the epoch's range holds has
                        // no successor: a timestamp past the range, which `check_ts` refuses,
                        // not a wrap to timestamp 0.
                        None => (last, MAX_TIMESTAMP + 1, 0),
                    }
                };
                let admitted = if cap64 && count > COUNT64_MASK {
                    self.tally.throttled();
                    let until_ms = ts + 1 + self.epoch_ms;
                    if self.clock.wait_until_ms(until_ms) {
                        // Read the clock again.
                        continue 'generation;
                    }
                    Err(Error::WouldBlock { until_ms })
                } else {
                    Self::check_ts(ts, &snap)
                };
                if let Err(e) = admitted {
                    if self.unchanged(&snap) {
                        return Err(e);
                    }
                    continue 'generation;
                }
                match self
                    .sortable
                    .compare_exchange_weak(last, next, SeqCst, SeqCst)
                {
                    Ok(_) => {
                        if count == 0 {
                            self.close_millisecond(last);
                        }
                        break (ts, count);
                    }
                    Err(actual) => last = actual,
                }
            };
            if self.unchanged(&snap) {
                return Ok((snap, ts, count));
            }
        }
    }

    /// Reserves up to `want` sortable counts of one millisecond for 96 or 128-bit nonces of
    /// `kind`, the clock reading `now_ts`: `(snapshot, timestamp, first count, count)`. The
    /// millisecond is the one the shared calls would give now (the clock's, or the state's
    /// while a generation runs ahead of the clock); the run ends at that millisecond's last
    /// count. Checked against the deadline before it is taken, so a refused call takes
    /// nothing.
    pub(crate) fn reserve_sortable(
        &self,
        kind: Kind,
        now_ts: u64,
        want: u64,
    ) -> Result<(Snapshot, u64, u64, u64), Error> {
        'generation: loop {
            let snap = self.snapshot()?;
            self.claim(kind)?;
            let mut last = self.sortable.load(SeqCst);
            let (ts, first, n) = loop {
                let (ts, first) = if now_ts > last >> SORTABLE_COUNT_BITS {
                    (now_ts, 0)
                } else {
                    // Past the range's last count: refused by `check_ts`, as in `take_sortable`.
                    last.checked_add(1).map_or((MAX_TIMESTAMP + 1, 0), |next| {
                        (next >> SORTABLE_COUNT_BITS, next & SORTABLE_COUNT_MASK)
                    })
                };
                if let Err(e) = Self::check_ts(ts, &snap) {
                    if self.unchanged(&snap) {
                        return Err(e);
                    }
                    continue 'generation;
                }
                let n = want.clamp(1, SORTABLE_COUNT_MASK + 1 - first);
                let end = (ts << SORTABLE_COUNT_BITS) | (first + n - 1);
                match self
                    .sortable
                    .compare_exchange_weak(last, end, SeqCst, SeqCst)
                {
                    Ok(_) => {
                        if first == 0 {
                            self.close_millisecond(last);
                        }
                        break (ts, first, n);
                    }
                    Err(actual) => last = actual,
                }
            };
            if self.unchanged(&snap) {
                return Ok((snap, ts, first, n));
            }
        }
    }

    #[inline]
    pub(crate) fn shared_sortable96(&self, kind: Kind) -> Result<Nonce96, Error> {
        let (snap, ts, count) = self.take_sortable(kind)?;
        Ok(Nonce96::from_u128(layout::pack96(ts, snap.machine_id, count)).expect("96 bits"))
    }

    /// An encrypted 128-bit counter nonce from the shared counter.
    #[inline]
    pub(crate) fn shared_encrypted_counter128(&self) -> Result<Nonce128, Error> {
        let e = self.engine128()?;
        let plain = self.shared_counter128(Kind::ENCRYPTED_COUNTER128)?;
        Ok(Nonce128::from_bytes(e.encrypt(plain.to_bytes())))
    }

    #[inline]
    pub(crate) fn shared_sortable128(&self, kind: Kind) -> Result<Nonce128, Error> {
        let (snap, ts, count) = self.take_sortable(kind)?;
        Ok(Nonce128::from_u128(layout::pack128(
            ts,
            snap.machine_id,
            count,
        )))
    }

    /// The 64-bit engine; [`Error::NoKey`] without a 64-bit key.
    #[inline]
    pub(crate) fn engine64(&self) -> Result<&Engine64, Error> {
        self.engines.e64.as_ref().ok_or(Error::NoKey { bits: 64 })
    }

    /// The 96-bit engine; [`Error::NoKey`] without a 96-bit key.
    #[inline]
    pub(crate) fn engine96(&self) -> Result<&Engine96, Error> {
        self.engines.e96.as_ref().ok_or(Error::NoKey { bits: 96 })
    }

    /// The 128-bit engine; [`Error::NoKey`] without a 128-bit key.
    #[inline]
    pub(crate) fn engine128(&self) -> Result<&Engine128, Error> {
        self.engines.e128.as_ref().ok_or(Error::NoKey { bits: 128 })
    }

    /// Encrypts a 64-bit nonce with this factory's 64-bit cipher.
    pub fn encrypt64(&self, nonce: Nonce64) -> Result<Nonce64, Error> {
        Ok(self.engine64()?.encrypt(nonce.to_bytes()).into())
    }

    /// Decrypts a 64-bit nonce.
    pub fn decrypt64(&self, nonce: Nonce64) -> Result<Nonce64, Error> {
        Ok(self.engine64()?.decrypt(nonce.to_bytes()).into())
    }

    /// Encrypts a 96-bit nonce. Blowfish and 3DES take only nonces ending in 32 zero bits
    /// ([`Error::NonZeroTail`] otherwise), as NoNoncense does.
    pub fn encrypt96(&self, nonce: Nonce96) -> Result<Nonce96, Error> {
        let e = self.engine96()?;
        check_tail(e, &nonce)?;
        Ok(Nonce96::from_bytes(e.encrypt(nonce.to_bytes())))
    }

    /// Decrypts a 96-bit nonce.
    pub fn decrypt96(&self, nonce: Nonce96) -> Result<Nonce96, Error> {
        let e = self.engine96()?;
        check_tail(e, &nonce)?;
        Ok(Nonce96::from_bytes(e.decrypt(nonce.to_bytes())))
    }

    /// Encrypts a 128-bit nonce.
    pub fn encrypt128(&self, nonce: Nonce128) -> Result<Nonce128, Error> {
        Ok(self.engine128()?.encrypt(nonce.to_bytes()).into())
    }

    /// Decrypts a 128-bit nonce.
    pub fn decrypt128(&self, nonce: Nonce128) -> Result<Nonce128, Error> {
        Ok(self.engine128()?.decrypt(nonce.to_bytes()).into())
    }
}

/// A cache ID for a new factory: 0 (none) unless the thread cache is on and compiled in.
/// Numbered from 1 and never reused, so a factory built where a dropped one was finds none
/// of its blocks in any thread's cache.
fn cache_id(on: bool) -> u64 {
    #[cfg(all(feature = "std", not(loom)))]
    if on {
        use core::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        return NEXT.fetch_add(1, Ordering::Relaxed);
    }
    let _ = on;
    0
}

#[derive(Clone, Copy)]
pub(crate) enum Counter {
    C64,
    C96,
}

pub(crate) fn encrypt_run(
    engine: &crate::cipher::Engine128,
    first: Nonce128,
    out: &mut [Nonce128],
) {
    let mut blocks = [[0u8; 16]; 64];
    let mut plain = first.to_u128();
    for chunk in out.chunks_mut(64) {
        let blocks = &mut blocks[..chunk.len()];
        engine.encrypt_run(plain.to_be_bytes(), blocks);
        for (slot, b) in chunk.iter_mut().zip(blocks.iter()) {
            *slot = Nonce128::from_bytes(*b);
        }
        // The 64-bit count wraps within its own bits, as the counter does.
        let hi = plain >> 64;
        #[allow(clippy::cast_possible_truncation)] // the low 64 bits, on purpose
        let lo = (plain as u64).wrapping_add(chunk.len() as u64);
        plain = (hi << 64) | u128::from(lo);
    }
}

/// The 96-bit form of a 64-bit base nonce for 64-bit-block ciphers: 32 zero bits appended.
pub(crate) fn widen(n: Nonce64) -> Nonce96 {
    Nonce96::from_bytes(zero_tail(n.to_bytes()))
}

fn check_tail(e: &crate::cipher::Engine96, nonce: &Nonce96) -> Result<(), Error> {
    if e.has_64bit_block() && nonce.as_bytes()[8..] != [0u8; 4] {
        return Err(Error::NonZeroTail);
    }
    Ok(())
}

// The shared counters themselves, whatever the factory's thread cache: the calls reach them
// only without one (or from a thread whose cache is gone).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ManualClock;

    const T0: u64 = 1_800_000_000_000;

    /// A factory enabled at `T0` until `deadline_ms`, whose 96-bit counter is set so that the
    /// next value is the last count of the generation's first millisecond.
    fn before_carry(deadline_ms: u64) -> (Factory<ManualClock>, u64) {
        let f = Factory::new(ManualClock::new(T0), FactoryConfig::new()).unwrap();
        f.enable(MachineId::new(3).unwrap(), deadline_ms).unwrap();
        let start = counter96(&f).unwrap().decode(f.epoch_ms()).timestamp_ms;
        f.c96.store(COUNT96_MASK - 1, SeqCst);
        (f, start)
    }

    fn counter96(f: &Factory<ManualClock>) -> Result<Nonce96, Error> {
        f.shared_counter96(Kind::COUNTER96)
    }

    #[test]
    fn counter96_carries_its_count_into_the_timestamp() {
        let (f, start) = before_carry(T0 + 1000);
        let fields = |n: Nonce96| {
            let d = n.decode(f.epoch_ms());
            (d.timestamp_ms, d.count)
        };
        assert_eq!(fields(counter96(&f).unwrap()), (start, COUNT96_MASK));
        assert_eq!(fields(counter96(&f).unwrap()), (start + 1, 0));
        assert_eq!(fields(counter96(&f).unwrap()), (start + 1, 1));
    }

    #[test]
    fn counter96_refuses_a_carry_onto_the_deadline() {
        let (f, _) = before_carry(T0 + 1);
        assert!(counter96(&f).is_ok());
        assert_eq!(counter96(&f), Err(Error::LeaseExpired));
        assert_eq!(counter96(&f), Err(Error::LeaseExpired));
    }

    /// A factory whose clock reads the last millisecond the 42-bit timestamp can hold, with
    /// the shared sortable state at that millisecond's second-to-last count: where 4 194 302
    /// sortable96 calls in that millisecond would leave it.
    fn at_the_last_counts() -> Factory<ManualClock> {
        let clock = ManualClock::new(DEFAULT_EPOCH_MS + MAX_TIMESTAMP);
        let f = Factory::new(clock, FactoryConfig::new()).unwrap();
        f.enable(MachineId::new(3).unwrap(), NO_DEADLINE).unwrap();
        let last = (MAX_TIMESTAMP << SORTABLE_COUNT_BITS) | (SORTABLE_COUNT_MASK - 1);
        f.sortable.store(last, SeqCst);
        f
    }

    #[test]
    fn sortable_nonces_end_with_the_timestamp_range() {
        let f = at_the_last_counts();
        let fields = |kind| f.take_sortable(kind).map(|(_, ts, count)| (ts, count));
        assert_eq!(
            fields(Kind::SORTABLE96),
            Ok((MAX_TIMESTAMP, SORTABLE_COUNT_MASK))
        );
        // The state is at the range's last value: the next one would wrap to timestamp 0.
        assert_eq!(fields(Kind::SORTABLE96), Err(Error::TimestampOverflow));
        assert_eq!(fields(Kind::SORTABLE64), Err(Error::TimestampOverflow));
        assert_eq!(fields(Kind::SORTABLE128), Err(Error::TimestampOverflow));
        // A refused call takes nothing: still refused, never wrapped.
        assert_eq!(fields(Kind::SORTABLE96), Err(Error::TimestampOverflow));

        // A handle's run ends there too.
        let f = at_the_last_counts();
        let h = f.handle();
        let d = h.sortable96().unwrap().decode(DEFAULT_EPOCH_MS);
        assert_eq!(
            (d.timestamp_ms, d.count),
            (MAX_TIMESTAMP, SORTABLE_COUNT_MASK)
        );
        assert_eq!(h.sortable96(), Err(Error::TimestampOverflow));
        assert_eq!(h.sortable128(), Err(Error::TimestampOverflow));
    }
}
