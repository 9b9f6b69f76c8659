use core::fmt;

use crate::kind::Base;

/// Why a nonce could not be produced. Nothing is lost by an error: no value that was or will be
/// handed out is affected, and the call can be retried once the cause is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
// A two-byte tag keeps a 64-bit nonce in `Result<Nonce64, Error>` at an even offset: with a
// one-byte tag (which a one-byte field such as `KindConflict::locked` allows) it lands at
// offset 1, and moving it out of the result costs several ns per nonce.
#[repr(u16)]
pub enum Error {
    /// The factory is disabled: never enabled, or switched off because its machine-ID lease was
    /// lost or is being changed. Wait for the lease manager to enable it again.
    Disabled,
    /// The nonce would carry a timestamp at or past the lease deadline, so another node may
    /// already own this machine ID. The lease must be renewed before generation resumes.
    LeaseExpired,
    /// The generator is ahead of the clock (64-bit counter burst exhausted, or the 8192-per-ms
    /// cap of 64-bit sortable nonces) and the clock cannot wait. Retry at `until_ms` (clock ms).
    WouldBlock {
        /// The clock reading at which a retry can succeed.
        until_ms: u64,
    },
    /// Encryption was asked for, but the factory has no key for this size. Configure a base key
    /// (at least 32 bytes) or an explicit key for this size.
    NoKey {
        /// Nonce size in bits.
        bits: u16,
    },
    /// The 42-bit timestamp would overflow (about 139 years after the epoch). Use a later epoch.
    TimestampOverflow,
    /// A 96-bit nonce for a 64-bit-block cipher (Blowfish, 3DES) must end in 32 zero bits, as
    /// the encrypted 96-bit nonces of those ciphers do; anything else cannot be encrypted
    /// without losing uniqueness.
    NonZeroTail,
    /// The call would issue a base nonce of the other kind than this factory issues at this
    /// size. Counter and sortable nonces of one size share one layout and can repeat each
    /// other's values, so a factory issues one kind per size: the first call of a size (or
    /// [`FactoryConfig::with_kind64`](crate::FactoryConfig::with_kind64) and its siblings) fixes it for
    /// the factory's whole life. Nothing is consumed by the refused call.
    KindConflict {
        /// The base size in bits: 64, 96 or 128. 96-bit encrypted nonces under Blowfish or
        /// 3DES are made from a 64-bit base nonce, so they count as 64.
        bits: u16,
        /// The kind this factory issues at that size.
        locked: Base,
    },
    /// The process was forked after this factory was enabled: it is the parent's factory,
    /// with the parent's machine ID and counters, and would issue the parent's nonces. It
    /// refuses in the child until it is enabled again there, with a machine ID of the child's
    /// own (the parent keeps generating with its own). Only `std` builds on Unix detect a fork.
    Forked,
    /// The call would issue a plain nonce of a size at which this factory issues encrypted
    /// ones, or the reverse. An encrypted nonce can equal a plain one of the same size (among
    /// n of one and m of the other, with probability about n·m/2^bits: about 5% at 10^9 of
    /// each at 64 bits), so a factory issues plain or encrypted nonces of one size, fixed by
    /// the first call of that size, unless
    /// [`FactoryConfig::with_plain_and_encrypted`](crate::FactoryConfig::with_plain_and_encrypted)
    /// allows both. Nothing is consumed by the refused call.
    EncryptionConflict {
        /// The size in bits of the nonces the call returns: 64, 96 or 128 (every
        /// `encrypted96` counts as 96, whatever its base).
        bits: u16,
        /// Whether this factory issues encrypted (`true`) or plain nonces at that size.
        encrypted: bool,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disabled => f.write_str(
                "nonce factory is disabled: no machine-ID lease is held; wait until the lease manager enables it",
            ),
            Self::LeaseExpired => f.write_str(
                "machine-ID lease deadline reached: renew the lease before generating more nonces",
            ),
            Self::WouldBlock { until_ms } => write!(
                f,
                "nonce rate limit reached and the clock cannot wait: retry at clock time {until_ms} ms"
            ),
            Self::NoKey { bits } => write!(
                f,
                "no key for {bits}-bit nonces: configure a base key of at least 32 bytes or an explicit {bits}-bit key"
            ),
            Self::TimestampOverflow => f.write_str(
                "nonce timestamp would overflow its 42 bits: configure a later epoch",
            ),
            Self::NonZeroTail => f.write_str(
                "96-bit nonce does not end in 32 zero bits, which blowfish/des3 96-bit nonces always do: use the speck 96-bit cipher for full 96-bit nonces",
            ),
            Self::KindConflict { bits, locked } => {
                let (have, want) = match locked {
                    Base::Counter => ("counter", "sortable"),
                    Base::Sortable => ("sortable", "counter"),
                };
                write!(
                    f,
                    "this nonce factory issues {have} {bits}-bit nonces, and a factory issues one kind per size (counter or sortable): use a separate factory for {want} {bits}-bit nonces and keep its nonces apart from these, as the two kinds can repeat each other's values"
                )
            }
            Self::Forked => f.write_str(
                "this process was forked and the nonce factory was enabled in the parent, so it would issue the parent's nonces: re-enable the factory in the child with a machine ID of its own (with the nononce facade: start a new `Nononce` in the child, after the fork)",
            ),
            Self::EncryptionConflict { bits, encrypted } => {
                let (have, want) = if *encrypted {
                    ("encrypted", "plain")
                } else {
                    ("plain", "encrypted")
                };
                write!(
                    f,
                    "this nonce factory issues {have} {bits}-bit nonces, and a factory issues plain or encrypted nonces of one size, not both, as an encrypted nonce can equal a plain one (probability about n*m/2^{bits} for n of one and m of the other): use a separate factory for {want} {bits}-bit nonces, or accept that chance with `with_plain_and_encrypted(true)` in the factory's options"
                )
            }
        }
    }
}

impl core::error::Error for Error {}

/// Why a factory could not be configured or enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FactoryConfigError {
    /// Base keys must be at least 32 bytes.
    BaseKeyTooShort {
        /// The length given.
        len: usize,
    },
    /// An explicit key has the wrong length for its cipher.
    KeyLength {
        /// Nonce size in bits.
        bits: u16,
        /// The cipher the key is for.
        cipher: &'static str,
        /// Required length in bytes.
        expected: usize,
        /// Length given.
        actual: usize,
    },
    /// The cipher was compiled out (its cargo feature is off).
    CipherUnavailable {
        /// The cipher's name.
        cipher: &'static str,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// The clock reads earlier than the epoch; timestamps cannot be negative.
    EpochInFuture {
        /// The configured epoch (Unix ms).
        epoch_ms: u64,
        /// The clock reading (Unix ms).
        now_ms: u64,
    },
    /// The clock is past the last timestamp the 42-bit field can hold for this epoch.
    TimestampOverflow {
        /// The configured epoch (Unix ms).
        epoch_ms: u64,
    },
    /// The handler that stops factories in a forked child could not be registered
    /// (`pthread_atfork` failed: the system is out of memory). The factory stays disabled.
    ForkHandler {
        /// The error code `pthread_atfork` returned.
        code: i32,
    },
}

impl fmt::Display for FactoryConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BaseKeyTooShort { len } => {
                write!(f, "base key is {len} bytes: use at least 32 random bytes")
            }
            Self::KeyLength {
                bits,
                cipher,
                expected,
                actual,
            } => write!(
                f,
                "{bits}-bit {cipher} key is {actual} bytes: it must be exactly {expected}"
            ),
            Self::CipherUnavailable { cipher, feature } => write!(
                f,
                "cipher {cipher} is not compiled in: enable the `{feature}` feature of nonce-core"
            ),
            Self::EpochInFuture { epoch_ms, now_ms } => write!(
                f,
                "epoch {epoch_ms} ms is after the current time {now_ms} ms: use an epoch in the past"
            ),
            Self::TimestampOverflow { epoch_ms } => write!(
                f,
                "the 42-bit timestamp has overflowed for epoch {epoch_ms} ms: use a later epoch"
            ),
            Self::ForkHandler { code } => write!(
                f,
                "could not register the fork handler that stops nonce factories in a forked child (pthread_atfork returned error {code}, out of memory): free memory, then enable the factory again"
            ),
        }
    }
}

impl core::error::Error for FactoryConfigError {}
