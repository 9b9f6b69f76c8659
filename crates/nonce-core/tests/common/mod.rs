//! Shared by the test files: every generating entry point, and factories to run them on.
#![allow(dead_code)]

use nonce_core::{
    Base, Cipher96, Clock, Error, Factory, FactoryConfig, Handle, MachineId, ManualClock,
    NO_DEADLINE, Nonce64, Nonce96, Nonce128,
};

pub const T0: u64 = 1_800_000_000_000;
pub const EPOCH: u64 = nonce_core::DEFAULT_EPOCH_MS;
pub const KEY: [u8; 32] = [9; 32];

pub type F<'c> = Factory<&'c ManualClock>;

/// A machine ID the test knows to be in range.
pub fn machine_id(n: u16) -> MachineId {
    MachineId::new(n).expect("test machine ids are below 512")
}

/// Whether every cipher is built in: then `config` gives keys, and the encrypted entry points
/// are among `all_ops`.
pub const ALL_CIPHERS: bool = cfg!(all(
    feature = "aes",
    feature = "blowfish",
    feature = "des3",
    feature = "speck"
));

/// Items built only where every cipher is.
macro_rules! every_cipher {
    ($($item:item)*) => {$(
        #[cfg(all(feature = "aes", feature = "blowfish", feature = "des3", feature = "speck"))]
        $item
    )*};
}

/// A factory configuration with keys for every size when the ciphers are compiled in.
pub fn config(cipher96: Cipher96) -> FactoryConfig {
    if ALL_CIPHERS {
        FactoryConfig::new()
            .with_base_key(&KEY)
            .with_cipher96(cipher96)
    } else {
        FactoryConfig::new()
    }
}

pub fn enabled<'c>(clock: &'c ManualClock, config: FactoryConfig<&[u8]>) -> F<'c> {
    enabled_as(clock, config, 5)
}

/// A factory on `config`, enabled as machine `id` with no deadline.
pub fn enabled_as<'c>(clock: &'c ManualClock, config: FactoryConfig<&[u8]>, id: u16) -> F<'c> {
    let f = Factory::new(clock, config).unwrap();
    f.enable(machine_id(id), NO_DEADLINE).unwrap();
    f
}

/// The Unix ms a 96-bit nonce of the default epoch carries.
pub fn ms96(n: Nonce96) -> u64 {
    n.decode(EPOCH).unix_ms
}

/// The Unix ms a 128-bit nonce of the default epoch carries.
pub fn ms128(n: Nonce128) -> u64 {
    n.decode(EPOCH).unix_ms
}

/// The refusal of a call of the other kind than the `locked` one at a base size of `bits`.
pub fn conflict<T>(bits: u16, locked: Base) -> Result<T, Error> {
    Err(Error::KindConflict { bits, locked })
}

/// The place of a size (64, 96 or 128 bits) in per-size arrays.
pub fn slot(bits: u16) -> usize {
    match bits {
        64 => 0,
        96 => 1,
        _ => 2,
    }
}

/// Calls `next` until it is refused; the values it gave and the refusal.
pub fn until_refused<T>(mut next: impl FnMut() -> Result<T, Error>) -> (Vec<T>, Error) {
    let mut issued = Vec::new();
    loop {
        match next() {
            Ok(n) => issued.push(n),
            Err(e) => return (issued, e),
        }
        assert!(issued.len() <= 1 << 20, "never refused");
    }
}

/// `work(i)` on threads `0..n`, all at once: what each returned, in order.
pub fn on_threads<T: Send>(n: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let work = &work;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..n).map(|i| s.spawn(move || work(i))).collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

/// Every generating entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Counter64,
    Sortable64,
    Counter96,
    Sortable96,
    Counter128,
    Sortable128,
    Encrypted64(Base),
    Encrypted96(Base),
    Encrypted128(Base),
    FillEncrypted128,
    HandleCounter64,
    HandleCounter96,
    HandleCounter128,
    HandleEncrypted64,
    HandleEncrypted96,
    HandleEncrypted128,
    HandleSortable96,
    HandleSortable128,
}

pub const PLAIN_OPS: [Op; 11] = [
    Op::Counter64,
    Op::Sortable64,
    Op::Counter96,
    Op::Sortable96,
    Op::Counter128,
    Op::Sortable128,
    Op::HandleCounter64,
    Op::HandleCounter96,
    Op::HandleCounter128,
    Op::HandleSortable96,
    Op::HandleSortable128,
];

pub const ENCRYPTED_OPS: &[Op] = if ALL_CIPHERS {
    &[
        Op::Encrypted64(Base::Counter),
        Op::Encrypted64(Base::Sortable),
        Op::Encrypted96(Base::Counter),
        Op::Encrypted96(Base::Sortable),
        Op::Encrypted128(Base::Counter),
        Op::Encrypted128(Base::Sortable),
        Op::FillEncrypted128,
        Op::HandleEncrypted64,
        Op::HandleEncrypted96,
        Op::HandleEncrypted128,
    ]
} else {
    &[]
};

pub fn all_ops() -> Vec<Op> {
    PLAIN_OPS.iter().chain(ENCRYPTED_OPS).copied().collect()
}

impl Op {
    /// The base size (in bits) and kind this entry point issues.
    pub fn claims(self, cipher96: Cipher96) -> (u16, Base) {
        let speck96 = !cipher96.has_64bit_block();
        match self {
            Op::Counter64 | Op::HandleCounter64 | Op::HandleEncrypted64 => (64, Base::Counter),
            Op::Sortable64 => (64, Base::Sortable),
            Op::Encrypted64(b) => (64, b),
            Op::Counter96 | Op::HandleCounter96 => (96, Base::Counter),
            Op::Sortable96 | Op::HandleSortable96 => (96, Base::Sortable),
            Op::Encrypted96(b) => (if speck96 { 96 } else { 64 }, b),
            Op::HandleEncrypted96 => (if speck96 { 96 } else { 64 }, Base::Counter),
            Op::Counter128
            | Op::HandleCounter128
            | Op::HandleEncrypted128
            | Op::FillEncrypted128 => (128, Base::Counter),
            Op::Sortable128 | Op::HandleSortable128 => (128, Base::Sortable),
            Op::Encrypted128(b) => (128, b),
        }
    }

    /// The size in bits of what this entry point returns, and whether it is encrypted: its
    /// form, which a factory fixes per returned size (plain or encrypted).
    pub fn form(self) -> (u16, bool) {
        let bits = match self {
            Op::Counter64
            | Op::Sortable64
            | Op::Encrypted64(_)
            | Op::HandleCounter64
            | Op::HandleEncrypted64 => 64,
            Op::Counter96
            | Op::Sortable96
            | Op::Encrypted96(_)
            | Op::HandleCounter96
            | Op::HandleEncrypted96
            | Op::HandleSortable96 => 96,
            _ => 128,
        };
        (bits, self.encrypted())
    }

    /// Whether the values this entry point issues are encrypted.
    pub fn encrypted(self) -> bool {
        matches!(
            self,
            Op::Encrypted64(_)
                | Op::Encrypted96(_)
                | Op::Encrypted128(_)
                | Op::FillEncrypted128
                | Op::HandleEncrypted64
                | Op::HandleEncrypted96
                | Op::HandleEncrypted128
        )
    }

    /// The Unix ms timestamp a value this entry point issued carries (decrypted first).
    pub fn unix_ms(self, f: &F<'_>, cipher96: Cipher96, bits: u16, value: u128) -> u64 {
        let epoch = f.epoch_ms();
        let encrypted = self.encrypted();
        match bits {
            64 => {
                let mut n = Nonce64::from_u64(u64::try_from(value).unwrap());
                if encrypted {
                    n = f.decrypt64(n).unwrap();
                }
                n.decode(epoch).unix_ms
            }
            96 => {
                let mut n = Nonce96::from_u128(value).unwrap();
                if encrypted {
                    n = f.decrypt96(n).unwrap();
                }
                if encrypted && cipher96.has_64bit_block() {
                    // A 64-bit base nonce and 32 zero bits.
                    Nonce64::from_bytes(n.as_bytes()[..8].try_into().unwrap())
                        .decode(epoch)
                        .unix_ms
                } else {
                    n.decode(epoch).unix_ms
                }
            }
            _ => {
                let mut n = Nonce128::from_u128(value);
                if encrypted {
                    n = f.decrypt128(n).unwrap();
                }
                n.decode(epoch).unix_ms
            }
        }
    }

    /// Runs the entry point once: the values issued, tagged with their size.
    pub fn run<C: Clock>(
        self,
        f: &Factory<C>,
        h: &Handle<'_, C>,
    ) -> Result<Vec<(u16, u128)>, Error> {
        let n64 = |n: Nonce64| vec![(64, u128::from(n.to_u64()))];
        let n96 = |n: Nonce96| vec![(96, n.to_u128())];
        let n128 = |n: Nonce128| vec![(128, n.to_u128())];
        match self {
            Op::Counter64 => f.counter64().map(n64),
            Op::Sortable64 => f.sortable64().map(n64),
            Op::Counter96 => f.counter96().map(n96),
            Op::Sortable96 => f.sortable96().map(n96),
            Op::Counter128 => f.counter128().map(n128),
            Op::Sortable128 => f.sortable128().map(n128),
            Op::Encrypted64(b) => f.encrypted64(b).map(n64),
            Op::Encrypted96(b) => f.encrypted96(b).map(n96),
            Op::Encrypted128(b) => f.encrypted128(b).map(n128),
            Op::FillEncrypted128 => {
                let mut out = [Nonce128::from_u128(0); 3];
                f.fill_encrypted128(&mut out)?;
                Ok(out.iter().map(|n| (128, n.to_u128())).collect())
            }
            Op::HandleCounter64 => h.counter64().map(n64),
            Op::HandleCounter96 => h.counter96().map(n96),
            Op::HandleCounter128 => h.counter128().map(n128),
            Op::HandleEncrypted64 => h.encrypted64().map(n64),
            Op::HandleEncrypted96 => h.encrypted96().map(n96),
            Op::HandleEncrypted128 => h.encrypted128().map(n128),
            Op::HandleSortable96 => h.sortable96().map(n96),
            Op::HandleSortable128 => h.sortable128().map(n128),
        }
    }
}

pub fn ciphers96() -> Vec<Cipher96> {
    if ALL_CIPHERS {
        vec![Cipher96::Blowfish, Cipher96::Des3, Cipher96::Speck]
    } else {
        vec![Cipher96::Blowfish]
    }
}
