//! Per-thread handles: blocks of counter values reserved from the shared factory.

use core::cell::{Cell, RefCell};

use crate::clock::Clock;
use crate::error::Error;
use crate::factory::{Counter, Factory, Snapshot, encrypt_run, widen};
use crate::kind::Kind;
use crate::layout;
use crate::nonce::{Nonce64, Nonce96, Nonce128};
use crate::stats::Generator;

/// Values reserved per block. Large enough that the shared `fetch_add` is rare, small enough
/// that values dropped with a handle or at a generation change are few.
const BLOCK: u64 = 1024;

/// A reserved run of one counter, valid for one factory generation.
struct Block {
    counter: Counter,
    snap: Cell<Option<Snapshot>>,
    next: Cell<u64>,
    left: Cell<u64>,
}

impl Block {
    const fn new(counter: Counter) -> Self {
        Self {
            counter,
            snap: Cell::new(None),
            next: Cell::new(0),
            left: Cell::new(0),
        }
    }

    /// The next value, if the block still belongs to the factory's current generation;
    /// otherwise a new block, reserved for nonces of `kind`.
    #[inline]
    fn peek<C: Clock>(&self, factory: &Factory<C>, kind: Kind) -> Result<(Snapshot, u64), Error> {
        if let Some(snap) = self.snap.get()
            && self.left.get() > 0
            && factory.is_current(snap.state, snap.forks)
        {
            return Ok((snap, self.next.get()));
        }
        self.refill(factory, kind)
    }

    #[cold]
    fn refill<C: Clock>(&self, factory: &Factory<C>, kind: Kind) -> Result<(Snapshot, u64), Error> {
        self.give_back(factory);
        let (snap, first) = factory.reserve(self.counter, kind, BLOCK)?;
        self.snap.set(Some(snap));
        self.next.set(first);
        self.left.set(BLOCK);
        Ok((snap, first))
    }

    /// Drops what is left of the block, telling the factory's tally it was never handed out.
    fn give_back<C: Clock>(&self, factory: &Factory<C>) {
        let generator = match self.counter {
            Counter::C64 => Generator::Counter64,
            Counter::C96 => Generator::Counter96And128,
        };
        factory.tally().give_back(generator, self.left.get());
        self.snap.set(None);
        self.left.set(0);
    }

    /// Consumes the value `peek` returned; only after it passed every check, so a refused
    /// value stays available for the retry.
    #[inline]
    fn consume(&self) {
        self.next.set(self.next.get().wrapping_add(1));
        self.left.set(self.left.get() - 1);
    }
}

/// Sortable counts reserved per handle: one millisecond's run, for one generation.
struct SortableBlock {
    snap: Cell<Option<Snapshot>>,
    ts: Cell<u64>,
    next: Cell<u64>,
    end: Cell<u64>,
}

/// A per-thread generator over a shared [`Factory`].
///
/// It reserves blocks of counter values with one shared atomic operation and hands them out
/// without touching shared counters, so counter nonces scale with threads. It is not `Sync`:
/// make one per thread. Every nonce re-checks the factory's generation, so `disable`,
/// `enable` and deadline changes take effect on handles as on the factory. Values still
/// reserved when a handle is dropped are skipped, never reused. Like the factory, a handle
/// fixes the factory's kind at each size it is used for (see [`Error::KindConflict`]).
///
/// [`sortable96`](Handle::sortable96) and [`sortable128`](Handle::sortable128) read the clock
/// on every call, as the factory's do, and draw on a run of counts of the current millisecond
/// reserved for the handle, dropped as soon as the clock passes it. Each handle's sortable
/// nonces increase, and each carries the millisecond it was made in (or, while a generation
/// runs ahead of the clock after a timestamp floor, the generator's, as the factory's calls
/// do); across handles a nonce made after another one was returned never carries an earlier
/// millisecond while the generator follows the clock, but within one millisecond nonces of
/// different handles are not in creation order. The factory's own sortable calls keep one
/// order for every thread only without its thread cache
/// ([`FactoryConfig::with_thread_cache`](crate::FactoryConfig::with_thread_cache)).
/// sortable64, with its 8192-per-ms cap, has no handle version.
///
/// ```
/// use nonce_core::{Factory, FactoryConfig, MachineId, ManualClock, NO_DEADLINE};
///
/// let clock = ManualClock::new(1_800_000_000_000);
/// let factory = Factory::new(&clock, FactoryConfig::new()).unwrap();
/// factory.enable(MachineId::new(3).unwrap(), NO_DEADLINE).unwrap();
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             let handle = factory.handle();
///             for _ in 0..1000 {
///                 handle.counter128().unwrap();
///             }
///         });
///     }
/// });
/// ```
pub struct Handle<'f, C: Clock> {
    factory: &'f Factory<C>,
    b64: Block,
    b96: Block,
    sortable: SortableBlock,
    /// Kinds bits this handle has seen claimed in the factory (a claim is never undone).
    verified: Cell<u64>,
    enc128: RefCell<Encrypted128>,
}

/// Encrypted 128-bit counter nonces made ahead in one pipelined run.
const ENCRYPTED_RUN: usize = 32;

struct Encrypted128 {
    state: u64,
    forks: u32,
    items: [Nonce128; ENCRYPTED_RUN],
    next: usize,
}

impl<C: Clock> Factory<C> {
    /// A per-thread [`Handle`] on this factory.
    pub fn handle(&self) -> Handle<'_, C> {
        Handle {
            factory: self,
            b64: Block::new(Counter::C64),
            b96: Block::new(Counter::C96),
            sortable: SortableBlock {
                snap: Cell::new(None),
                ts: Cell::new(0),
                next: Cell::new(0),
                end: Cell::new(0),
            },
            verified: Cell::new(0),
            enc128: RefCell::new(Encrypted128 {
                state: 0,
                forks: 0,
                items: [Nonce128::from_u128(0); ENCRYPTED_RUN],
                next: ENCRYPTED_RUN,
            }),
        }
    }
}

impl<'f, C: Clock> Handle<'f, C> {
    /// The factory this handle draws from.
    pub fn factory(&self) -> &'f Factory<C> {
        self.factory
    }

    /// A 64-bit counter nonce, as [`Factory::counter64`].
    #[inline]
    pub fn counter64(&self) -> Result<Nonce64, Error> {
        self.factory.counted(self.counter64_as(Kind::COUNTER64))
    }

    /// A 64-bit counter nonce for a call of `kind`: plain, or the base of an encrypted one.
    #[inline]
    fn counter64_as(&self, kind: Kind) -> Result<Nonce64, Error> {
        let (snap, v) = self.b64.peek(self.factory, kind)?;
        // The block may have been filled by a call of the other form (plain or encrypted).
        self.verify(kind)?;
        let nonce = self.factory.finish64(&snap, v)?;
        self.b64.consume();
        Ok(nonce)
    }

    /// A 96-bit counter nonce, as [`Factory::counter96`].
    #[inline]
    pub fn counter96(&self) -> Result<Nonce96, Error> {
        self.factory.counted(self.counter96_as(Kind::COUNTER96))
    }

    #[inline]
    fn counter96_as(&self, kind: Kind) -> Result<Nonce96, Error> {
        let (snap, v) = self.b96.peek(self.factory, kind)?;
        self.verify(kind)?;
        let nonce = Factory::<C>::finish96(&snap, v)?;
        self.b96.consume();
        Ok(nonce)
    }

    /// A 128-bit counter nonce, as [`Factory::counter128`].
    #[inline]
    pub fn counter128(&self) -> Result<Nonce128, Error> {
        self.factory.counted((|| {
            let (snap, v) = self.b96.peek(self.factory, Kind::COUNTER128)?;
            self.verify(Kind::COUNTER128)?;
            let nonce = Factory::<C>::finish128(&snap, v)?;
            self.b96.consume();
            Ok(nonce)
        })())
    }

    /// A 96-bit sortable nonce, as [`Factory::sortable96`], from the handle's run of counts.
    #[inline]
    pub fn sortable96(&self) -> Result<Nonce96, Error> {
        self.factory.counted((|| {
            let (snap, ts, count) = self.take_sortable(Kind::SORTABLE96)?;
            Ok(Nonce96::from_u128(layout::pack96(ts, snap.machine_id, count)).expect("96 bits"))
        })())
    }

    /// A 128-bit sortable nonce, as [`Factory::sortable128`], from the handle's run of counts.
    #[inline]
    pub fn sortable128(&self) -> Result<Nonce128, Error> {
        self.factory.counted((|| {
            let (snap, ts, count) = self.take_sortable(Kind::SORTABLE128)?;
            Ok(Nonce128::from_u128(layout::pack128(
                ts,
                snap.machine_id,
                count,
            )))
        })())
    }

    /// The next sortable `(snapshot, timestamp, count)` for `kind`. The clock is read first;
    /// between taking the count and recording it as taken no other code runs.
    #[inline]
    fn take_sortable(&self, kind: Kind) -> Result<(Snapshot, u64, u64), Error> {
        let now = self.factory.now_ts();
        let b = &self.sortable;
        if let Some(snap) = b.snap.get()
            && self.factory.is_current(snap.state, snap.forks)
            && b.ts.get() >= now
            && b.next.get() < b.end.get()
            && self.verified.get() & kind.mask() == kind.value()
        {
            let count = b.next.get();
            b.next.set(count + 1);
            return Ok((snap, b.ts.get(), count));
        }
        self.refill_sortable(kind, now)
    }

    #[cold]
    fn refill_sortable(&self, kind: Kind, now: u64) -> Result<(Snapshot, u64, u64), Error> {
        self.give_back_sortable();
        let b = &self.sortable;
        let (snap, ts, first, n) = self.factory.reserve_sortable(kind, now, BLOCK)?;
        self.verified.set(self.verified.get() | kind.value());
        b.snap.set(Some(snap));
        b.ts.set(ts);
        b.next.set(first + 1);
        b.end.set(first + n);
        Ok((snap, ts, first))
    }

    /// Checks the factory's kind at `kind`'s size: counter96 and counter128 share one block,
    /// which the other size may have filled, and plain and encrypted calls share the blocks
    /// of their base. Asks the factory once per handle and kind.
    #[inline]
    fn verify(&self, kind: Kind) -> Result<(), Error> {
        if self.verified.get() & kind.mask() == kind.value() {
            return Ok(());
        }
        self.verify_slow(kind)
    }

    #[cold]
    fn verify_slow(&self, kind: Kind) -> Result<(), Error> {
        self.factory.claim(kind)?;
        self.verified.set(self.verified.get() | kind.value());
        Ok(())
    }

    /// A 64-bit encrypted counter nonce, as [`Factory::encrypted64`].
    #[inline]
    pub fn encrypted64(&self) -> Result<Nonce64, Error> {
        self.factory.counted((|| {
            let engine = self.factory.engine64()?;
            Ok(Nonce64::from_bytes(engine.encrypt(
                self.counter64_as(Kind::COUNTER64.encrypted(64))?.to_bytes(),
            )))
        })())
    }

    /// A 96-bit encrypted counter nonce, as [`Factory::encrypted96`].
    #[inline]
    pub fn encrypted96(&self) -> Result<Nonce96, Error> {
        self.factory.counted((|| {
            let engine = self.factory.engine96()?;
            let plain = if engine.has_64bit_block() {
                widen(self.counter64_as(Kind::COUNTER64.encrypted(96))?)
            } else {
                self.counter96_as(Kind::COUNTER96.encrypted(96))?
            };
            Ok(Nonce96::from_bytes(engine.encrypt(plain.to_bytes())))
        })())
    }

    /// A 128-bit encrypted counter nonce, as [`Factory::encrypted128`].
    ///
    /// Encrypts a run of consecutive counter nonces at once (a pipelined CTR keystream with
    /// AES) and hands them out one by one, re-checking the factory's generation each time.
    #[inline]
    pub fn encrypted128(&self) -> Result<Nonce128, Error> {
        self.factory.counted((|| {
            let mut buf = self.enc128.borrow_mut();
            if buf.next < ENCRYPTED_RUN && self.factory.is_current(buf.state, buf.forks) {
                let n = buf.items[buf.next];
                buf.next += 1;
                return Ok(n);
            }
            self.refill_encrypted128(&mut buf)
        })())
    }

    #[cold]
    fn refill_encrypted128(&self, buf: &mut Encrypted128) -> Result<Nonce128, Error> {
        Self::give_back_encrypted128(self.factory, buf);
        let engine = self.factory.engine128()?;
        let (snap, first) = self.factory.reserve(
            Counter::C96,
            Kind::ENCRYPTED_COUNTER128,
            ENCRYPTED_RUN as u64,
        )?;
        let plain = Factory::<C>::finish128(&snap, first)?;
        encrypt_run(engine, plain, &mut buf.items);
        buf.state = snap.state;
        buf.forks = snap.forks;
        buf.next = 1;
        Ok(buf.items[0])
    }
}

impl<C: Clock> Handle<'_, C> {
    /// Drops what is left of the sortable run, telling the factory's tally.
    fn give_back_sortable(&self) {
        let b = &self.sortable;
        self.factory.tally().give_back(
            Generator::Sortable,
            b.end.get().saturating_sub(b.next.get()),
        );
        b.snap.set(None);
        b.end.set(b.next.get());
    }

    /// Drops what is left of the encrypted run, telling the factory's tally.
    fn give_back_encrypted128(factory: &Factory<C>, buf: &mut Encrypted128) {
        factory.tally().give_back(
            Generator::Counter96And128,
            (ENCRYPTED_RUN - buf.next) as u64,
        );
        buf.next = ENCRYPTED_RUN;
    }
}

/// What the handle reserved and did not hand out is given back to the factory's tally, so
/// that [`Factory::stats`] counts only what was issued.
impl<C: Clock> Drop for Handle<'_, C> {
    fn drop(&mut self) {
        self.b64.give_back(self.factory);
        self.b96.give_back(self.factory);
        self.give_back_sortable();
        Self::give_back_encrypted128(self.factory, self.enc128.get_mut());
    }
}
