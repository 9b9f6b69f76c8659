//! Per-thread blocks behind the factory's own calls (`FactoryConfig::with_thread_cache`): calls on a
//! shared factory draw on blocks reserved for their thread, and a block never outlives what
//! makes its values safe (generation, deadline, kind, the factory itself).

use crate::common::{
    EPOCH, F, T0, config, conflict, enabled_as, machine_id, ms96, ms128, on_threads, until_refused,
};
use nonce_core::{
    Base, Cipher96, Clock, Decoded, Error, Factory, FactoryConfig, ManualClock, NO_DEADLINE,
    Nonce64, Nonce96, Nonce128,
};
use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};

/// A factory with the thread cache (`on`) or without, whose plain and encrypted calls of one
/// size these tests mix, to check what the two share (blocks, generation, deadline).
fn with_cache(clock: &ManualClock, id: u16, on: bool) -> F<'_> {
    let config = config(Cipher96::Blowfish).with_plain_and_encrypted(true);
    enabled_as(clock, config.with_thread_cache(on), id)
}

fn cached(clock: &ManualClock, id: u16) -> F<'_> {
    with_cache(clock, id, true)
}

fn plain(clock: &ManualClock, id: u16) -> F<'_> {
    with_cache(clock, id, false)
}

/// `(unix_ms, count)` of the next nonce of each counter kind, encrypted128 decrypted.
fn counts(f: &F<'_>) -> [(u64, u64); 4] {
    OPS.map(|op| pair(op(f)))
}

/// The machine ID of the next nonce of each counter kind, encrypted128 decrypted.
fn ids(f: &F<'_>) -> [u16; 4] {
    OPS.map(|op| op(f).machine_id.get())
}

/// What the next call of each counter kind was refused with, if it was.
fn refusals(f: &F<'_>) -> [Option<Error>; 4] {
    [
        f.counter64().err(),
        f.counter96().err(),
        f.counter128().err(),
        f.encrypted128(Base::Counter).err(),
    ]
}

type Op = fn(&F<'_>) -> Decoded;

/// One counter kind's next nonce, decoded (encrypted128 decrypted first).
const OPS: [Op; 4] = [
    |f| f.counter64().unwrap().decode(EPOCH),
    |f| f.counter96().unwrap().decode(EPOCH),
    |f| f.counter128().unwrap().decode(EPOCH),
    |f| {
        let n = f.encrypted128(Base::Counter).unwrap();
        f.decrypt128(n).unwrap().decode(EPOCH)
    },
];

fn pair(d: Decoded) -> (u64, u64) {
    (d.unix_ms, d.count)
}

/// Calls of one thread alternating with another thread's calls, of one kind: what this
/// thread got, as `(unix_ms, count)`.
fn alternate(f: &F<'_>, op: Op, rounds: usize) -> Vec<(u64, u64)> {
    let (to_other, other_rx) = mpsc::channel::<()>();
    let (to_main, main_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            while other_rx.recv().is_ok() {
                op(f);
                to_main.send(()).unwrap();
            }
        });
        let mut mine = Vec::new();
        for _ in 0..rounds {
            mine.push(pair(op(f)));
            to_other.send(()).unwrap();
            main_rx.recv().unwrap();
        }
        drop(to_other);
        mine
    })
}

/// How many of this thread's successive calls got the very next count.
fn followed_on(mine: &[(u64, u64)]) -> usize {
    mine.windows(2)
        .filter(|w| w[1] == (w[0].0, w[0].1 + 1))
        .count()
}

/// The other thread called in between, yet this thread's counts follow on, except where it
/// reserved its next block (or run, for the sortable calls), all in the clock's millisecond.
#[test]
fn calls_from_one_thread_draw_on_a_block_of_their_own() {
    let sortables: [Op; 2] = [
        |f| f.sortable96().unwrap().decode(EPOCH),
        |f| f.sortable128().unwrap().decode(EPOCH),
    ];
    for (kind, op) in OPS.into_iter().chain(sortables).enumerate() {
        let clock = ManualClock::new(T0);
        let mine = alternate(&cached(&clock, 3), op, 40);
        assert!(followed_on(&mine) >= 30, "kind {kind}: {mine:?}");
        assert!(
            mine.iter().all(|&(ms, _)| ms == T0),
            "kind {kind}: {mine:?}"
        );
        // Without the cache the two threads take turns on one counter.
        let clock = ManualClock::new(T0);
        let mine = alternate(&plain(&clock, 3), op, 40);
        assert_eq!(followed_on(&mine), 0, "kind {kind}: {mine:?}");
    }
}

/// One default, whatever holds the keys: `new()` and `default()` agree, and both turn the
/// thread cache on, the way a factory shared by every thread scales.
#[test]
fn the_default_settings_turn_the_thread_cache_on() {
    let owned = FactoryConfig::<Vec<u8>>::default();
    assert_eq!(format!("{:?}", FactoryConfig::new()), format!("{owned:?}"));
    assert!(FactoryConfig::new().thread_cache());
    assert!(owned.thread_cache());
    let clock = ManualClock::new(T0);
    let mine = alternate(&enabled_as(&clock, FactoryConfig::new(), 3), OPS[0], 40);
    assert!(followed_on(&mine) >= 30, "{mine:?}");
}

#[test]
fn encrypted_runs_are_cut_from_a_growing_block_of_their_own() {
    // Runs of 32 encrypted nonces come from one counter128 block that doubles per refill
    // (32, 64, 128, 256, ...), so 400 calls alternating with another thread's cross only a
    // few block boundaries; a shared reservation per run would cross one every 32 calls.
    let clock = ManualClock::new(T0);
    let mine = alternate(&cached(&clock, 3), OPS[3], 400);
    let boundaries = mine.len() - 1 - followed_on(&mine);
    assert!(
        boundaries <= 4,
        "{boundaries} block boundaries in 400 calls"
    );
}

#[test]
fn cached_blocks_follow_disable_enable_and_the_deadline() {
    let clock = ManualClock::new(T0);
    let f = cached(&clock, 1);
    let before = counts(&f);
    assert!(before.iter().all(|&(ms, _)| ms == T0));

    f.disable();
    assert_eq!(refusals(&f), [Some(Error::Disabled); 4]);
    assert_eq!(f.encrypted64(Base::Counter), Err(Error::Disabled));

    // Enabled again under another ID: nothing of the old generation comes out.
    clock.advance(10);
    f.enable(machine_id(2), NO_DEADLINE).unwrap();
    let id = |n: Nonce128| n.decode(EPOCH).machine_id.get();
    assert_eq!(ids(&f), [2; 4]);
    let after = counts(&f);
    assert!(after.iter().all(|&(ms, _)| ms >= T0 + 10), "{after:?}");

    // Enabled again without a disable in between (a new lease): the same.
    f.enable(machine_id(4), NO_DEADLINE).unwrap();
    assert_eq!(id(f.counter128().unwrap()), 4);

    // A deadline moved to the generation's start stops every cached block at once.
    let start = f.counter128().unwrap().decode(EPOCH).unix_ms;
    f.set_deadline(start);
    assert_eq!(refusals(&f), [Some(Error::LeaseExpired); 4]);
    f.set_deadline(NO_DEADLINE);
    assert_eq!(id(f.counter128().unwrap()), 4);
}

#[test]
fn a_lost_lease_stops_the_blocks_of_every_thread() {
    let clock = ManualClock::new(T0);
    let f = cached(&clock, 6);
    let threads = 4;
    let filled = Barrier::new(threads + 1);
    let disabled = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    counts(&f);
                    filled.wait();
                    disabled.wait();
                    refusals(&f)
                })
            })
            .collect();
        filled.wait();
        f.disable();
        disabled.wait();
        for w in workers {
            assert_eq!(w.join().unwrap(), [Some(Error::Disabled); 4]);
        }
    });
}

#[test]
fn factories_in_one_thread_never_share_a_block() {
    let clock = ManualClock::new(T0);
    // More factories than the cache has places: some are evicted and come back.
    let factories: Vec<_> = (0..7).map(|id| cached(&clock, id)).collect();
    let mut seen: Vec<HashSet<u128>> = vec![HashSet::new(); factories.len()];
    for _ in 0..3000 {
        for (id, f) in (0u16..).zip(&factories) {
            let n64 = f.counter64().unwrap();
            let n96 = f.counter96().unwrap();
            let n128 = f.counter128().unwrap();
            let e128 = f
                .decrypt128(f.encrypted128(Base::Counter).unwrap())
                .unwrap();
            let decoded = [n64.decode(EPOCH), n96.decode(EPOCH), n128.decode(EPOCH)];
            for d in decoded.into_iter().chain([e128.decode(EPOCH)]) {
                assert_eq!(d.machine_id.get(), id);
            }
            let set = &mut seen[usize::from(id)];
            assert!(set.insert(u128::from(n64.to_u64())));
            assert!(set.insert(n96.to_u128() | 1 << 100));
            assert!(set.insert(n128.to_u128()));
            assert!(set.insert(e128.to_u128()));
        }
    }
}

#[test]
fn a_new_factory_never_inherits_an_old_one_s_block() {
    let clock = ManualClock::new(T0);
    // Each factory lives in the same place in turn; its first nonces are its own.
    for id in 0..20 {
        let f = cached(&clock, id);
        for op in [OPS[2], OPS[0]] {
            let n = op(&f);
            assert_eq!((n.machine_id.get(), n.count), (id, 0));
        }
        assert_eq!(OPS[3](&f).machine_id.get(), id);
    }
}

#[test]
fn threads_that_exit_leave_gaps_never_repeats() {
    let clock = ManualClock::new(T0);
    let f = Arc::new(cached(&clock, 9));
    let mut seen = HashSet::new();
    let mut latest = 0;
    for _ in 0..50 {
        let batch = std::thread::scope(|s| {
            s.spawn(|| {
                let mut out = Vec::new();
                for _ in 0..3 {
                    out.push(u128::from(f.counter64().unwrap().to_u64()));
                    out.push(f.counter96().unwrap().to_u128() | 1 << 100);
                    out.push(f.counter128().unwrap().to_u128());
                    out.push(f.encrypted128(Base::Counter).unwrap().to_u128() ^ 1 << 127);
                }
                out
            })
            .join()
            .unwrap()
        });
        for v in batch {
            assert!(seen.insert(v), "{v:x} twice");
        }
        latest = latest.max(f.counter96().unwrap().decode(EPOCH).unix_ms);
        latest = latest.max(f.counter64().unwrap().decode(EPOCH).unix_ms);
    }
    f.disable();
    assert!(f.issued_up_to_ms() >= latest);
}

#[test]
fn the_cache_keeps_one_kind_per_size() {
    let clock = ManualClock::new(T0);
    let config = config(Cipher96::Blowfish).with_kind128(Base::Sortable);
    let f = enabled_as(&clock, config.with_thread_cache(true), 1);
    // counter96 fills the block counter128 would draw on; counter128 is still refused.
    f.counter96().unwrap();
    assert_eq!(f.counter128(), conflict(128, Base::Sortable));
    assert_eq!(f.encrypted128(Base::Counter), conflict(128, Base::Sortable));
    f.sortable128().unwrap();

    // Undeclared: the cached counter call claims the size, the other kind is refused.
    let f = cached(&clock, 2);
    f.counter64().unwrap();
    f.counter128().unwrap();
    assert_eq!(f.sortable64(), conflict(64, Base::Counter));
    assert_eq!(f.sortable128(), conflict(128, Base::Counter));
    let f = cached(&clock, 3);
    f.sortable96().unwrap();
    assert_eq!(f.counter96(), conflict(96, Base::Sortable));
}

/// The cache reserves only counter64 values that may be issued now: a refused call takes
/// nothing, and the counter never runs ahead of the clock, exactly as without the cache; the
/// next millisecond is issued as if the retries never happened, every count of it.
#[test]
fn refused_counter64_with_the_cache_consumes_nothing() {
    let (clock, calm_clock) = (ManualClock::new(T0), ManualClock::new(T0));
    let (f, calm) = (cached(&clock, 5), plain(&calm_clock, 5));
    let refused = Error::WouldBlock { until_ms: T0 + 1 };
    let (first, e) = until_refused(|| f.counter64());
    assert_eq!((first.len(), e), (8192, refused));
    assert_eq!(until_refused(|| calm.counter64()).1, refused);
    for _ in 0..100_000 {
        assert_eq!(f.counter64(), Err(refused));
        assert_eq!(f.encrypted64(Base::Counter), Err(refused));
        assert_eq!(f.encrypted96(Base::Counter), Err(refused));
    }
    assert_eq!(f.issued_up_to_ms(), calm.issued_up_to_ms());
    clock.advance(1);
    calm_clock.advance(1);
    let (next, e) = until_refused(|| f.counter64());
    assert_eq!((next.clone(), e), until_refused(|| calm.counter64()));
    assert_eq!(
        (next.len(), e),
        (8192, Error::WouldBlock { until_ms: T0 + 2 })
    );
    for (count, n) in (0..).zip(&next) {
        let d = n.decode(EPOCH);
        assert_eq!((d.unix_ms, d.count), (T0 + 1, count));
    }
    assert_eq!(f.issued_up_to_ms(), calm.issued_up_to_ms());
}

/// Retries past the deadline, with the cache or without, take nothing: after a renewal the
/// counter resumes where it stopped, and the saved-up milliseconds are all there.
#[test]
fn counter64_stops_at_the_deadline_and_bursts_after_renewal() {
    for on in [true, false] {
        let clock = ManualClock::new(T0);
        let f = Factory::new(&clock, FactoryConfig::new().with_thread_cache(on)).unwrap();
        f.enable(machine_id(5), T0 + 1).unwrap();
        assert_eq!(until_refused(|| f.counter64()).0.len(), 8192);
        // The clock moves on, but the next counter timestamp is the deadline's millisecond.
        clock.advance(5);
        for _ in 0..100_000 {
            assert_eq!(f.counter64(), Err(Error::LeaseExpired));
        }
        f.set_deadline(NO_DEADLINE);
        let (issued, e) = until_refused(|| f.counter64());
        assert_eq!(e, Error::WouldBlock { until_ms: T0 + 6 });
        assert_eq!(issued.len(), 8192 * 5);
        let mut seen = HashSet::new();
        for (i, n) in issued.iter().enumerate() {
            let d = n.decode(EPOCH);
            let i = u64::try_from(i).unwrap();
            assert_eq!((d.unix_ms, d.count), (T0 + 1 + i / 8192, i % 8192));
            assert!(seen.insert(*n));
        }
    }
}

#[test]
fn many_threads_on_one_cached_factory_never_repeat() {
    let clock = ManualClock::new(T0);
    let f = cached(&clock, 11);
    // Far behind the clock: counter64 bursts.
    clock.set(T0 + 1_000_000);
    let all: Vec<(Vec<Nonce64>, Vec<Nonce96>, Vec<Nonce128>)> = on_threads(4, |_| {
        let mut out = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..20_000 {
            out.0.push(f.counter64().unwrap());
            out.1.push(f.counter96().unwrap());
            out.2.push(f.encrypted128(Base::Counter).unwrap());
            out.2.push(f.counter128().unwrap());
        }
        out
    });
    let (mut s64, mut s96, mut s128) = (HashSet::new(), HashSet::new(), HashSet::new());
    for (a, b, c) in all {
        // Each thread's counter nonces increase.
        assert!(a.windows(2).all(|w| w[0].to_u64() < w[1].to_u64()));
        assert!(b.windows(2).all(|w| w[0].to_u128() < w[1].to_u128()));
        assert!(a.into_iter().all(|n| s64.insert(n)));
        assert!(b.into_iter().all(|n| s96.insert(n)));
        assert!(c.into_iter().all(|n| s128.insert(n)));
    }
}

// Sortable 96/128-bit nonces through the cache: runs of one millisecond's counts per thread.

#[test]
fn cached_sortables_carry_their_millisecond_and_never_an_earlier_one_later() {
    let clock = ManualClock::new(T0);
    let f = cached(&clock, 4);
    let (to_other, other_rx) = mpsc::channel::<u64>();
    let (to_main, main_rx) = mpsc::channel::<Nonce128>();
    let mut seen = HashSet::new();
    std::thread::scope(|s| {
        let f = &f;
        s.spawn(move || {
            let mut last = 0u128;
            while let Ok(now) = other_rx.recv() {
                let n = f.sortable128().unwrap();
                assert_eq!(ms128(n), now);
                assert!(n.to_u128() > last, "each thread's own increase");
                last = n.to_u128();
                to_main.send(n).unwrap();
            }
        });
        let mut last = 0u128;
        for step in 0..600u64 {
            if step % 5 == 0 {
                clock.advance(1);
            }
            let now = T0 + step / 5 + 1;
            let mine = f.sortable128().unwrap();
            assert_eq!(ms128(mine), now);
            assert!(mine.to_u128() > last);
            last = mine.to_u128();
            to_other.send(now).unwrap();
            let theirs = main_rx.recv().unwrap();
            // Made after `mine` was returned: never an earlier millisecond.
            assert!(ms128(theirs) >= ms128(mine));
            assert!(seen.insert(mine) && seen.insert(theirs));
        }
        drop(to_other);
    });
    // The 96-bit calls share the sortable state: same millisecond.
    let config = FactoryConfig::new().with_kind96(Base::Sortable);
    let f = enabled_as(&clock, config.with_thread_cache(true), 5);
    assert_eq!(ms96(f.sortable96().unwrap()), clock.now_ms());
}

/// sortable64 draws on the sortable state the 96/128-bit calls do, at most 8192 counts a
/// millisecond: runs this thread reserves ahead must not use those counts up.
#[test]
fn cached_sortable_runs_leave_sortable64_its_counts() {
    let clock = ManualClock::new(T0);
    let f = cached(&clock, 6);
    // Runs double with every refill, and each millisecond starts one: within a few
    // milliseconds a run would be 8192 counts, all that sortable64 may take in one.
    for ms in T0..T0 + 20 {
        clock.set(ms);
        for _ in 0..100 {
            assert_eq!(f.sortable96().map(ms96), Ok(ms));
            assert_eq!(f.sortable128().map(ms128), Ok(ms));
            assert_eq!(f.sortable64().map(|n| n.decode(EPOCH).unix_ms), Ok(ms));
        }
    }
}

#[test]
fn cached_sortable_runs_follow_disable_enable_and_the_deadline() {
    let clock = ManualClock::new(T0);
    let f = cached(&clock, 1);
    assert_eq!(f.sortable128().unwrap().decode(EPOCH).machine_id.get(), 1);
    f.disable();
    assert_eq!(f.sortable128(), Err(Error::Disabled));
    assert_eq!(f.encrypted128(Base::Sortable), Err(Error::Disabled));
    f.enable(machine_id(2), NO_DEADLINE).unwrap();
    // Nothing of the old generation's run comes out.
    assert_eq!(f.sortable128().unwrap().decode(EPOCH).machine_id.get(), 2);
    // A deadline at the current millisecond stops the run at once.
    f.set_deadline(clock.now_ms());
    assert_eq!(f.sortable128(), Err(Error::LeaseExpired));
    assert_eq!(f.encrypted128(Base::Sortable), Err(Error::LeaseExpired));
    f.set_deadline(NO_DEADLINE);
    assert_eq!(f.sortable128().unwrap().decode(EPOCH).machine_id.get(), 2);
}

#[test]
fn many_threads_on_one_cached_factory_never_repeat_sortables() {
    let clock = ManualClock::new(T0);
    let f = enabled_as(
        &clock,
        config(Cipher96::Blowfish).with_thread_cache(true),
        12,
    );
    let all: Vec<(Vec<Nonce96>, Vec<Nonce128>)> = on_threads(4, |t| {
        let mut out = (Vec::new(), Vec::new());
        for i in 0..20_000 {
            if t == 0 && i % 1000 == 0 {
                clock.advance(1);
            }
            out.0.push(f.sortable96().unwrap());
            out.1.push(f.encrypted128(Base::Sortable).unwrap());
        }
        out
    });
    let (mut s96, mut s128) = (HashSet::new(), HashSet::new());
    for (a, b) in all {
        assert!(a.windows(2).all(|w| w[0].to_u128() < w[1].to_u128()));
        let plain: Vec<u128> = b
            .iter()
            .map(|&n| f.decrypt128(n).unwrap().to_u128())
            .collect();
        assert!(plain.windows(2).all(|w| w[0] < w[1]));
        assert!(a.into_iter().all(|n| s96.insert(n)));
        assert!(b.into_iter().all(|n| s128.insert(n)));
    }
    assert_eq!((s96.len(), s128.len()), (80_000, 80_000));
}
