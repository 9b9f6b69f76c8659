//! The factory's nonce calls. Each counter call, and each 96/128-bit sortable one, goes to
//! this thread's blocks when the factory has a thread cache
//! ([`FactoryConfig::with_thread_cache`]) and to the shared counters otherwise.
//!
//! In a module of their own, above both the factory and the thread cache: the cache draws its
//! blocks from the factory, so the choice between the two cannot live in the factory without
//! each depending on the other.
//!
//! [`FactoryConfig::with_thread_cache`]: crate::FactoryConfig::with_thread_cache

use crate::clock::Clock;
use crate::error::Error;
use crate::factory::{Counter, Factory, encrypt_run, widen};
use crate::kind::{Base, Kind};
use crate::layout;
use crate::nonce::{Nonce64, Nonce96, Nonce128};

/// A public nonce call, `$name`, and `$as`, the same call for any kind (plain, or the base of
/// an encrypted one): on this thread's blocks when the factory has a thread cache, on the
/// shared counters (`$shared`) otherwise.
macro_rules! call {
    ($(#[$doc:meta])* $name:ident, $as:ident, $shared:ident, $kind:ident -> $nonce:ty) => {
        $(#[$doc])*
        #[inline]
        pub fn $name(&self) -> Result<$nonce, Error> {
            self.counted(self.$as(Kind::$kind))
        }

        #[inline]
        fn $as(&self, kind: Kind) -> Result<$nonce, Error> {
            #[cfg(all(feature = "std", not(loom)))]
            if self.cache_id() != 0 {
                return crate::thread_cache::$name(self, kind);
            }
            self.$shared(kind)
        }
    };
}

impl<C: Clock> Factory<C> {
    call!(
        /// A 64-bit counter nonce: 13-bit count, bursts through unused past milliseconds, then
        /// waits for the clock (8192 per ms sustained).
        counter64, counter64_as, shared_counter64, COUNTER64 -> Nonce64
    );
    call!(
        /// A 96-bit counter nonce: 45-bit count; 96 and 128 share one counter.
        counter96, counter96_as, shared_counter96, COUNTER96 -> Nonce96
    );
    call!(
        /// A 128-bit counter nonce: 64-bit count; its timestamp is the generation's start.
        counter128, counter128_as, shared_counter128, COUNTER128 -> Nonce128
    );

    /// A 64-bit sortable nonce: the timestamp is the creation time; at most 8192 per ms.
    pub fn sortable64(&self) -> Result<Nonce64, Error> {
        self.counted(self.sortable64_as(Kind::SORTABLE64))
    }

    fn sortable64_as(&self, kind: Kind) -> Result<Nonce64, Error> {
        let (snap, ts, count) = self.take_sortable(kind)?;
        Ok(Nonce64::from_u64(layout::pack64(
            ts,
            snap.machine_id,
            count,
        )))
    }

    call!(
        /// A 96-bit sortable nonce.
        sortable96, sortable96_as, shared_sortable96, SORTABLE96 -> Nonce96
    );
    call!(
        /// A 128-bit sortable nonce.
        sortable128, sortable128_as, shared_sortable128, SORTABLE128 -> Nonce128
    );

    /// The 64-bit base of an encrypted nonce of `out_bits` bits.
    #[inline]
    fn base64(&self, base: Base, out_bits: u16) -> Result<Nonce64, Error> {
        match base {
            Base::Counter => self.counter64_as(Kind::COUNTER64.encrypted(out_bits)),
            Base::Sortable => self.sortable64_as(Kind::SORTABLE64.encrypted(out_bits)),
        }
    }

    /// A 64-bit encrypted nonce: a 64-bit base nonce under the 64-bit cipher.
    #[inline]
    pub fn encrypted64(&self, base: Base) -> Result<Nonce64, Error> {
        self.counted((|| {
            let engine = self.engine64()?;
            Ok(Nonce64::from_bytes(
                engine.encrypt(self.base64(base, 64)?.to_bytes()),
            ))
        })())
    }

    /// A 96-bit encrypted nonce. With Blowfish or 3DES it is an encrypted 64-bit base nonce
    /// followed by 32 zero bits (as NoNoncense); with Speck all 96 bits are encrypted.
    pub fn encrypted96(&self, base: Base) -> Result<Nonce96, Error> {
        self.counted((|| {
            let engine = self.engine96()?;
            let plain = if engine.has_64bit_block() {
                widen(self.base64(base, 96)?)
            } else {
                match base {
                    Base::Counter => self.counter96_as(Kind::COUNTER96.encrypted(96))?,
                    Base::Sortable => self.sortable96_as(Kind::SORTABLE96.encrypted(96))?,
                }
            };
            Ok(Nonce96::from_bytes(engine.encrypt(plain.to_bytes())))
        })())
    }

    /// A 128-bit encrypted nonce.
    #[inline]
    pub fn encrypted128(&self, base: Base) -> Result<Nonce128, Error> {
        self.counted((|| match base {
            Base::Counter => {
                #[cfg(all(feature = "std", not(loom)))]
                if self.cache_id() != 0 {
                    return crate::thread_cache::encrypted128(self);
                }
                self.shared_encrypted_counter128()
            }
            Base::Sortable => {
                let engine = self.engine128()?;
                let plain = self.sortable128_as(Kind::SORTABLE128.encrypted(128))?;
                Ok(Nonce128::from_bytes(engine.encrypt(plain.to_bytes())))
            }
        })())
    }

    /// Fills `out` with encrypted 128-bit counter nonces, several times faster than one at a
    /// time: the run of counter values for the whole of `out` is reserved at once, in one
    /// generation, and encrypted as a CTR keystream. Every check comes before the first
    /// write, so on error nothing is written (and no counter value is taken); a `disable`
    /// that lands while the fill is writing does not stop it, as for any call that began
    /// before it.
    pub fn fill_encrypted128(&self, out: &mut [Nonce128]) -> Result<(), Error> {
        self.counted((|| {
            let engine = self.engine128()?;
            if out.is_empty() {
                return Ok(());
            }
            let (snap, first) =
                self.reserve(Counter::C96, Kind::ENCRYPTED_COUNTER128, out.len() as u64)?;
            let plain = Self::finish128(&snap, first)?;
            encrypt_run(engine, plain, out);
            Ok(())
        })())
    }
}
