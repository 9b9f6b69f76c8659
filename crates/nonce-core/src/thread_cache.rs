//! Per-thread blocks behind a shared factory's own calls ([`FactoryConfig::with_thread_cache`]).
//!
//! Each thread keeps, in a thread-local, a few slots; a slot belongs to one factory (by an ID
//! no other factory ever gets, so a new factory in the place of a dropped one finds nothing of
//! it) and holds what a [`Handle`](crate::Handle) holds: a block of 64-bit counter values, a
//! block of the 96/128-bit counter, a run of one millisecond's sortable counts (96/128-bit,
//! dropped once the clock passes that millisecond) and a run of encrypted 128-bit nonces, each
//! valid for the generation (sequence word) it was reserved in. Every call compares that word with the
//! factory's, as a handle does, so `disable`, `enable` and `set_deadline` reach cached blocks
//! at once. Values left in a block when a thread exits, a slot is reused or a generation ends
//! are gaps, never reused.
//!
//! Between taking a cached value and recording it as taken no other code runs (no clock, no
//! user code: a sortable call reads the clock before it looks at its run), so nothing on the
//! same thread can take it twice. 64-bit blocks hold only values
//! that may be issued now: below the deadline and within what the throttle has seen of the
//! clock, so a refused counter64 call still takes nothing and the counter never runs ahead of
//! the clock for a cache. Blocks start at one value and double with every refill up to
//! [`MAX_BLOCK`], so a thread that makes a few nonces and exits, or one that turns through
//! more factories than there are slots, wastes next to nothing.
//!
//! [`FactoryConfig::with_thread_cache`]: crate::FactoryConfig::with_thread_cache

extern crate std;

use core::cell::Cell;

use crate::clock::Clock;
use crate::error::Error;
use crate::factory::{Counter, Factory, Snapshot, encrypt_run};
use crate::kind::Kind;
use crate::layout::{self, COUNT64_BITS, COUNT64_MASK};
use crate::nonce::{Nonce64, Nonce96, Nonce128};
use crate::stats::Generator;

/// Factories one thread keeps blocks for at once; the next one takes the place of another.
const SLOTS: usize = 4;

/// The largest block a refill reserves. Eight times a handle's: a thread-cache call costs
/// about two nanoseconds, and each refill moves the counter's cache line between the cores;
/// with blocks of 1024, two threads on one factory ran 5-10% slower than two threads on two
/// factories, with 8192 as fast. What a thread leaves in its blocks when it exits is at most
/// this many values of each counter.
const MAX_BLOCK: u64 = 8192;

/// Encrypted 128-bit counter nonces made ahead in one pipelined run, as a handle's. Runs are
/// cut from a block of the 96/128-bit counter of their own, so reserving them is as rare as
/// a counter128 refill: every block size (`RUN`, doubling up to [`MAX_BLOCK`]) is a multiple.
const RUN: usize = 32;

const _: () = assert!(MAX_BLOCK.is_multiple_of(RUN as u64));

const NONE: Snapshot = Snapshot {
    state: 0,
    machine_id: 0,
    forks: 0,
    init_ts: 0,
    deadline_ts: 0,
};

const ZERO128: Nonce128 = Nonce128::from_bytes([0; 16]);

#[inline]
fn raw64(snap: &Snapshot, v: u64) -> u64 {
    layout::pack64(v >> COUNT64_BITS, snap.machine_id, v & COUNT64_MASK)
}

/// How a value of the 96/128-bit counter becomes a nonce: [`pack96`] or [`pack128`].
trait Pack: FnOnce(&Snapshot, u64) -> Result<u128, Error> {}
impl<F: FnOnce(&Snapshot, u64) -> Result<u128, Error>> Pack for F {}

/// As [`Factory::finish96`], as an integer.
#[inline]
fn pack96<C: Clock>(snap: &Snapshot, v: u64) -> Result<u128, Error> {
    let (ts, count) = Factory::<C>::split96(snap, v)?;
    Ok(layout::pack96(ts, snap.machine_id, count))
}

/// As [`Factory::finish128`], as an integer.
#[inline]
fn pack128<C: Clock>(snap: &Snapshot, v: u64) -> Result<u128, Error> {
    Factory::<C>::check_ts(snap.init_ts, snap)?;
    Ok(layout::pack128(snap.init_ts, snap.machine_id, v))
}

/// A sortable `(snapshot, timestamp, count)` as a 96-bit nonce.
#[inline]
fn sortable96_value((snap, ts, count): (Snapshot, u64, u64)) -> u128 {
    layout::pack96(ts, snap.machine_id, count)
}

/// A sortable `(snapshot, timestamp, count)` as a 128-bit nonce.
#[inline]
fn sortable128_value((snap, ts, count): (Snapshot, u64, u64)) -> u128 {
    layout::pack128(ts, snap.machine_id, count)
}

/// A reserved run of one counter, valid while `snap.state` is the factory's sequence word
/// (an enabled factory's word is never 0).
struct Block {
    snap: Cell<Snapshot>,
    next: Cell<u64>,
    /// One past the block's last value: a call stores only `next`.
    end: Cell<u64>,
    /// What the next refill reserves.
    size: Cell<u64>,
}

impl Block {
    const fn new() -> Self {
        Self {
            snap: Cell::new(NONE),
            next: Cell::new(0),
            end: Cell::new(0),
            size: Cell::new(1),
        }
    }

    fn reset(&self) {
        self.drop_values();
        self.size.set(1);
    }

    fn drop_values(&self) {
        self.snap.set(NONE);
        self.end.set(0);
    }

    #[inline]
    fn valid<C: Clock>(&self, factory: &Factory<C>) -> bool {
        let snap = self.snap.get();
        self.next.get() < self.end.get() && factory.is_current(snap.state, snap.forks)
    }

    #[inline]
    fn consume(&self) {
        self.next.set(self.next.get() + 1);
    }

    /// Values left in the block, whatever its generation.
    fn left(&self) -> u64 {
        self.end.get().saturating_sub(self.next.get())
    }

    /// Holds `n` values from `first` on, none taken yet. The next refill asks for twice the
    /// larger of `n` and this one's request: a refill granted less than it asked for (the
    /// 64-bit throttle, the deadline) does not shrink the blocks.
    fn fill(&self, snap: Snapshot, first: u64, n: u64) {
        self.snap.set(snap);
        self.next.set(first);
        self.end.set(first.saturating_add(n));
        self.size.set((n.max(self.size.get()) * 2).min(MAX_BLOCK));
    }
}

/// A run of sortable counts of one millisecond, valid while `snap.state` is the factory's
/// sequence word and the clock has not passed `ts`.
struct SortableBlock {
    snap: Cell<Snapshot>,
    ts: Cell<u64>,
    next: Cell<u64>,
    end: Cell<u64>,
    /// What the next refill reserves.
    size: Cell<u64>,
}

impl SortableBlock {
    const fn new() -> Self {
        Self {
            snap: Cell::new(NONE),
            ts: Cell::new(0),
            next: Cell::new(0),
            end: Cell::new(0),
            size: Cell::new(1),
        }
    }

    fn reset(&self) {
        self.snap.set(NONE);
        self.next.set(0);
        self.end.set(0);
        self.size.set(1);
    }
}

/// One factory's blocks on one thread.
struct Slot {
    /// The factory's cache ID; 0: free.
    factory: Cell<u64>,
    /// Kinds bits seen claimed in the factory (a claim is never undone).
    verified: Cell<u64>,
    b64: Block,
    b96: Block,
    /// One millisecond's run of sortable counts for 96/128-bit nonces.
    sortable: SortableBlock,
    /// The counter128 values encrypted runs are cut from.
    enc_source: Block,
    enc_state: Cell<u64>,
    enc_forks: Cell<u32>,
    enc_next: Cell<usize>,
    enc: [Cell<u128>; RUN],
}

impl Slot {
    const fn new() -> Self {
        Self {
            factory: Cell::new(0),
            verified: Cell::new(0),
            b64: Block::new(),
            b96: Block::new(),
            sortable: SortableBlock::new(),
            enc_source: Block::new(),
            enc_state: Cell::new(0),
            enc_forks: Cell::new(0),
            enc_next: Cell::new(RUN),
            enc: [const { Cell::new(0) }; RUN],
        }
    }

    /// Gives the slot to another factory: everything cached for the last one is dropped.
    fn assign(&self, id: u64) {
        self.factory.set(id);
        self.verified.set(0);
        self.b64.reset();
        self.b96.reset();
        self.sortable.reset();
        self.enc_source.reset();
        self.enc_state.set(0);
        self.enc_next.set(RUN);
    }

    /// The next 64-bit counter nonce from the block for a call of `kind`, if it holds one for
    /// this generation and `kind` was checked.
    #[inline]
    fn hit64<C: Clock>(&self, f: &Factory<C>, kind: Kind) -> Option<u64> {
        let b = &self.b64;
        if !(b.valid(f) && self.verified.get() & kind.mask() == kind.value()) {
            return None;
        }
        // Admitted when reserved (deadline and throttle), and nothing in a generation can
        // take that back; the deadline check costs nothing and stays.
        let snap = b.snap.get();
        let v = b.next.get();
        Factory::<C>::check_ts(v >> COUNT64_BITS, &snap).ok()?;
        b.consume();
        Some(raw64(&snap, v))
    }

    fn miss64<C: Clock>(&self, f: &Factory<C>, kind: Kind) -> Result<u64, Error> {
        let b = &self.b64;
        if b.valid(f) {
            // Plain and encrypted calls share the block: one the other form filled is checked
            // against this call's kind once (the factory is enabled: the block's generation
            // is current).
            f.claim(kind)?;
            self.verified.set(self.verified.get() | kind.value());
            if let Some(v) = self.hit64(f, kind) {
                return Ok(v);
            }
            let v = b.next.get();
            Factory::<C>::check_ts(v >> COUNT64_BITS, &b.snap.get())?;
        }
        f.tally().give_back(Generator::Counter64, b.left());
        b.drop_values();
        match f.reserve64(b.size.get(), kind)? {
            Some((snap, first, n)) => {
                self.verified.set(self.verified.get() | kind.value());
                b.fill(snap, first, n);
                b.consume();
                Ok(raw64(&snap, first))
            }
            // Not one value may be issued now: the shared call waits for the clock or
            // refuses, taking nothing.
            None => f.shared_counter64(kind).map(Nonce64::to_u64),
        }
    }

    /// The 96/128-bit block's next value for `kind`, not yet taken: refilled if it belongs
    /// to another generation or is used up, and checked against `kind` once.
    fn peek96<C: Clock>(&self, f: &Factory<C>, kind: Kind) -> Result<(Snapshot, u64), Error> {
        let b = &self.b96;
        if b.valid(f) {
            // counter96 and counter128 share the block: a block the other size filled is
            // checked against this size's kind once (the factory is enabled: the block's
            // generation is current).
            f.claim(kind)?;
        } else {
            f.tally().give_back(Generator::Counter96And128, b.left());
            b.drop_values();
            let n = b.size.get();
            // Checks the generation, then claims `kind`.
            let (snap, first) = f.reserve(Counter::C96, kind, n)?;
            b.fill(snap, first, n);
        }
        self.verified.set(self.verified.get() | kind.value());
        Ok((b.snap.get(), b.next.get()))
    }

    /// The block's next value for `kind` and its snapshot, if the block holds one for this
    /// generation and `kind` was checked.
    #[inline]
    fn valid96<C: Clock>(&self, f: &Factory<C>, kind: Kind) -> Option<(Snapshot, u64)> {
        let b = &self.b96;
        if b.valid(f) && self.verified.get() & kind.mask() == kind.value() {
            return Some((b.snap.get(), b.next.get()));
        }
        None
    }

    /// The 96/128-bit block's next value for `kind`, packed by `pack` (as a 96 or 128-bit
    /// nonce), if the block holds one for this generation and `kind` was checked.
    #[inline]
    fn hit96<C: Clock>(&self, f: &Factory<C>, kind: Kind, pack: impl Pack) -> Option<u128> {
        let (snap, v) = self.valid96(f, kind)?;
        let n = pack(&snap, v).ok()?;
        self.b96.consume();
        Some(n)
    }

    fn miss96<C: Clock>(&self, f: &Factory<C>, kind: Kind, pack: impl Pack) -> Result<u128, Error> {
        let (snap, v) = self.peek96(f, kind)?;
        let n = pack(&snap, v)?;
        self.b96.consume();
        Ok(n)
    }

    /// The next sortable `(snapshot, timestamp, count)` for `kind` from the slot's run, if it
    /// holds one for this generation and millisecond and `kind` was checked. The clock is read
    /// first, as the factory's own call does.
    #[inline]
    fn hit_sortable<C: Clock>(&self, f: &Factory<C>, kind: Kind) -> Option<(Snapshot, u64, u64)> {
        let b = &self.sortable;
        let now = f.now_ts();
        let snap = b.snap.get();
        let count = b.next.get();
        if f.is_current(snap.state, snap.forks)
            && b.ts.get() >= now
            && count < b.end.get()
            && self.verified.get() & kind.mask() == kind.value()
        {
            b.next.set(count + 1);
            return Some((snap, b.ts.get(), count));
        }
        None
    }

    /// Reserves a new run for `kind` (the factory checks the generation, the deadline and the
    /// kind) and takes its first count. Runs start at one count and double up to
    /// [`MAX_BLOCK`], but in a factory that issues sortable64 nonces are one count; a run ends
    /// with its millisecond, so what is left of it is a gap.
    fn miss_sortable<C: Clock>(
        &self,
        f: &Factory<C>,
        kind: Kind,
    ) -> Result<(Snapshot, u64, u64), Error> {
        let b = &self.sortable;
        b.snap.set(NONE);
        // What is left of the last run is never handed out.
        f.tally().give_back(
            Generator::Sortable,
            b.end.get().saturating_sub(b.next.get()),
        );
        b.end.set(b.next.get());
        let now = f.now_ts();
        // sortable64 draws on the same state, at most 8192 counts a millisecond: runs taken
        // ahead would use them up, and it would refuse or wait for the next millisecond after
        // every run. Where it is issued, a run is one count, what a shared call takes.
        let want = if f.issues_sortable64() {
            1
        } else {
            b.size.get()
        };
        let (snap, ts, first, n) = f.reserve_sortable(kind, now, want)?;
        self.verified.set(self.verified.get() | kind.value());
        b.snap.set(snap);
        b.ts.set(ts);
        b.next.set(first + 1);
        b.end.set(first + n);
        b.size.set((b.size.get() * 2).min(MAX_BLOCK));
        Ok((snap, ts, first))
    }

    /// An encrypted 128-bit counter nonce from the slot's run, if it holds one for this
    /// generation (a counter128 nonce's timestamp is its generation's start, so the run's
    /// one deadline check holds for all of it).
    #[inline]
    fn hit_encrypted128<C: Clock>(&self, f: &Factory<C>) -> Option<u128> {
        let next = self.enc_next.get();
        if next < RUN && f.is_current(self.enc_state.get(), self.enc_forks.get()) {
            self.enc_next.set(next + 1);
            return Some(self.enc[next].get());
        }
        None
    }

    fn miss_encrypted128<C: Clock>(&self, f: &Factory<C>) -> Result<u128, Error> {
        // What is left of the last run is never handed out.
        f.tally().give_back(
            Generator::Counter96And128,
            (RUN - self.enc_next.get()) as u64,
        );
        self.enc_next.set(RUN);
        let engine = f.engine128()?;
        let source = &self.enc_source;
        if !(source.valid(f) && source.left() >= RUN as u64) {
            f.tally()
                .give_back(Generator::Counter96And128, source.left());
            source.drop_values();
            let n = source.size.get().max(RUN as u64);
            let (snap, first) = f.reserve(Counter::C96, Kind::ENCRYPTED_COUNTER128, n)?;
            source.fill(snap, first, n);
        }
        let snap = source.snap.get();
        let first = source.next.get();
        // The deadline check for the whole run, before any of it is taken.
        let plain = Factory::<C>::finish128(&snap, first)?;
        source.next.set(first + RUN as u64);
        let mut items = [ZERO128; RUN];
        encrypt_run(engine, plain, &mut items);
        for (cell, n) in self.enc.iter().zip(items) {
            cell.set(n.to_u128());
        }
        self.enc_state.set(snap.state);
        self.enc_forks.set(snap.forks);
        self.enc_next.set(1);
        Ok(items[0].to_u128())
    }
}

struct Cache {
    slots: [Slot; SLOTS],
    /// The slot the next factory without one takes once all are in use.
    victim: Cell<usize>,
}

impl Cache {
    const fn new() -> Self {
        Self {
            slots: [const { Slot::new() }; SLOTS],
            victim: Cell::new(0),
        }
    }

    #[inline]
    fn slot(&self, id: u64) -> &Slot {
        for slot in &self.slots {
            if slot.factory.get() == id {
                return slot;
            }
        }
        self.assign(id)
    }

    #[cold]
    #[inline(never)]
    fn assign(&self, id: u64) -> &Slot {
        let i = self
            .slots
            .iter()
            .position(|s| s.factory.get() == 0)
            .unwrap_or_else(|| {
                let v = self.victim.get();
                self.victim.set((v + 1) % SLOTS);
                v
            });
        let slot = &self.slots[i];
        slot.assign(id);
        slot
    }
}

std::thread_local! {
    // Plain data without a destructor: nothing to register per thread, and a thread's
    // reserved values simply end with it.
    static CACHE: Cache = const { Cache::new() };
}

// The fast path hands a plain integer out of the thread-local's closure, and the `Result`
// is built outside it: a `Result` of a byte-array nonce returned through the closure was
// copied through the stack in overlapping pieces that stalled every call.

/// `hit` on this thread's slot for `factory`, if it has the value at hand.
#[inline]
fn hit<C: Clock, T>(
    factory: &Factory<C>,
    hit: impl FnOnce(&Slot, &Factory<C>) -> Option<T>,
) -> Option<T> {
    let id = factory.cache_id();
    CACHE
        .try_with(move |cache| hit(cache.slot(id), factory))
        .ok()
        .flatten()
}

/// `miss` on this thread's slot for `factory` (a refill, or the error), or `shared` when the
/// thread has no thread-locals any more (it is exiting).
#[cold]
#[inline(never)]
fn miss<C: Clock, T>(
    factory: &Factory<C>,
    miss: impl FnOnce(&Slot, &Factory<C>) -> Result<T, Error>,
    shared: impl FnOnce(&Factory<C>) -> Result<T, Error>,
) -> Result<T, Error> {
    let id = factory.cache_id();
    CACHE
        .try_with(move |cache| miss(cache.slot(id), factory))
        .unwrap_or_else(|_| shared(factory))
}

#[inline]
pub(crate) fn counter64<C: Clock>(f: &Factory<C>, kind: Kind) -> Result<Nonce64, Error> {
    if let Some(v) = hit(f, |slot, f| slot.hit64(f, kind)) {
        return Ok(Nonce64::from_u64(v));
    }
    miss(
        f,
        |slot, f| slot.miss64(f, kind),
        |f| f.shared_counter64(kind).map(Nonce64::to_u64),
    )
    .map(Nonce64::from_u64)
}

#[inline]
pub(crate) fn counter96<C: Clock>(f: &Factory<C>, kind: Kind) -> Result<Nonce96, Error> {
    let v = match hit(f, |slot, f| slot.hit96(f, kind, pack96::<C>)) {
        Some(v) => v,
        None => miss(
            f,
            |slot, f| slot.miss96(f, kind, pack96::<C>),
            |f| f.shared_counter96(kind).map(Nonce96::to_u128),
        )?,
    };
    Ok(Nonce96::from_u128(v).expect("96 bits"))
}

#[inline]
pub(crate) fn counter128<C: Clock>(f: &Factory<C>, kind: Kind) -> Result<Nonce128, Error> {
    if let Some(v) = hit(f, |slot, f| slot.hit96(f, kind, pack128::<C>)) {
        return Ok(Nonce128::from_u128(v));
    }
    miss(
        f,
        |slot, f| slot.miss96(f, kind, pack128::<C>),
        |f| f.shared_counter128(kind).map(Nonce128::to_u128),
    )
    .map(Nonce128::from_u128)
}

#[inline]
pub(crate) fn encrypted128<C: Clock>(f: &Factory<C>) -> Result<Nonce128, Error> {
    if let Some(v) = hit(f, Slot::hit_encrypted128) {
        return Ok(Nonce128::from_u128(v));
    }
    miss(f, Slot::miss_encrypted128, |f| {
        f.shared_encrypted_counter128().map(Nonce128::to_u128)
    })
    .map(Nonce128::from_u128)
}

#[inline]
pub(crate) fn sortable96<C: Clock>(f: &Factory<C>, kind: Kind) -> Result<Nonce96, Error> {
    let v = match hit(f, |slot, f| {
        slot.hit_sortable(f, kind).map(sortable96_value)
    }) {
        Some(v) => v,
        None => miss(
            f,
            |slot, f| slot.miss_sortable(f, kind).map(sortable96_value),
            |f| f.shared_sortable96(kind).map(Nonce96::to_u128),
        )?,
    };
    Ok(Nonce96::from_u128(v).expect("96 bits"))
}

#[inline]
pub(crate) fn sortable128<C: Clock>(f: &Factory<C>, kind: Kind) -> Result<Nonce128, Error> {
    if let Some(v) = hit(f, |slot, f| {
        slot.hit_sortable(f, kind).map(sortable128_value)
    }) {
        return Ok(Nonce128::from_u128(v));
    }
    miss(
        f,
        |slot, f| slot.miss_sortable(f, kind).map(sortable128_value),
        |f| f.shared_sortable128(kind).map(Nonce128::to_u128),
    )
    .map(Nonce128::from_u128)
}
