//! Nonce generation side by side with its baselines and peers, in one run.
//!
//! `cargo xtask bench` runs this and prints the goal ratios; see docs/performance.md.

use std::hint::black_box;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cipher::{Array, BlockCipherEncrypt, KeyInit};
use criterion::{Criterion, criterion_group, criterion_main};
#[path = "support/per_thread.rs"]
mod per_thread;
use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::generator::thread_local::Ulid;
use ferroid::id::SnowflakeTwitterId;
use ferroid::time::{MonotonicClock, TWITTER_EPOCH};
use nonce_core::{
    Base, BootClock, Cipher64, Clock, Factory, FactoryConfig, MachineId, ManualClock, Nonce128,
    TickerClock,
};
use per_thread::thread_rows;

const KEY: [u8; 32] = [0x5a; 32];
const T0: u64 = 1_800_000_000_000;
// Checked at compile time: a constant that is out of range fails the build.
const MACHINE_ID: MachineId = match MachineId::new(17) {
    Ok(id) => id,
    Err(_) => panic!("17 is a machine id"),
};
/// Counter benchmarks run "below the throttle": the clock is far past the generation's start,
/// so the 64-bit counter has saved-up milliseconds to burst through, and the lease deadline
/// (always checked) lies further still.
const AHEAD_MS: u64 = 1_000_000_000;

// The factories here leave the thread cache off: their rows are the factory's own calls on
// its shared counters (and handles); the facade's benchmarks measure the cache.

fn config() -> FactoryConfig {
    FactoryConfig::new()
        .with_base_key(&KEY)
        .with_cipher64(Cipher64::Speck)
        .with_thread_cache(false)
}

fn counter_factory() -> Factory<ManualClock> {
    let f = Factory::new(ManualClock::new(T0), config()).unwrap();
    f.enable(MACHINE_ID, T0 + 2 * AHEAD_MS).unwrap();
    f.clock().set(T0 + AHEAD_MS);
    f
}

/// A factory on a live clock (the boot clock, or the ticker clock the facade reads), enabled
/// with a deadline a day ahead.
fn live_factory<C: Clock>(clock: C) -> Factory<C> {
    let f = Factory::new(clock, config()).unwrap();
    let deadline = f.clock().exact_now_ms() + 24 * 3600 * 1000;
    f.enable(MACHINE_ID, deadline).unwrap();
    f
}

fn baselines(c: &mut Criterion) {
    let mut g = c.benchmark_group("baseline");
    let counter = AtomicU64::new(0);
    g.bench_function("fetch_add_pack64", |b| {
        b.iter(|| {
            let v = counter.fetch_add(1, Ordering::SeqCst) + 1;
            ((v >> 13) << 22) | (17 << 13) | (v & 0x1FFF)
        })
    });
    let aes = aes::Aes256::new_from_slice(&KEY).unwrap();
    let mut x = 0u128;
    g.bench_function("aes256_block", |b| {
        b.iter(|| {
            x += 1;
            let mut blk = Array::from(x.to_be_bytes());
            // Through `black_box` so the key schedule is not hoisted out of the loop, which
            // no real single-nonce call site could do.
            black_box(&aes).encrypt_block(&mut blk);
            blk
        })
    });
    let speck = speck_cipher::Speck64_128::new_from_slice(&KEY[..16]).unwrap();
    let mut y = 0u64;
    g.bench_function("speck64_block", |b| {
        b.iter(|| {
            y += 1;
            let mut blk = Array::from(y.to_be_bytes());
            black_box(&speck).encrypt_block(&mut blk);
            blk
        })
    });
    let boot = BootClock::new();
    g.bench_function("boot_clock_now", |b| b.iter(|| boot.now_ms()));
    let ticker = TickerClock::shared().unwrap();
    g.bench_function("ticker_clock_now", |b| b.iter(|| ticker.now_ms()));
    g.bench_function("instant_now", |b| b.iter(Instant::now));
    g.finish();

    // Each peer in its fastest configuration (see docs/performance.md).
    let mut g = c.benchmark_group("peers");
    // Built with the `fast-rng` feature.
    g.bench_function("uuid_now_v7", |b| b.iter(uuid::Uuid::now_v7));
    let mut ulids = ulid::Generator::new();
    g.bench_function("ulid_generate", |b| {
        b.iter(|| ulids.generate().map(u128::from).unwrap_or(0))
    });
    // ferroid's thread-local generators read a clock a ticker thread publishes in an atomic.
    g.bench_function("ferroid_ulid_mono_thread_local", |b| {
        b.iter(|| Ulid::new_ulid_mono(|_| std::thread::yield_now()))
    });
    g.bench_function("ferroid_ulid_thread_local", |b| b.iter(Ulid::new_ulid));
    // Its atomic generator: Snowflake IDs (41-bit ms, 10-bit machine, 12-bit sequence: at most
    // 4096 per ms), the one atomic generator on targets without 128-bit atomics.
    let atomic = AtomicSnowflakeGenerator::new(17, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
    g.bench_function("ferroid_atomic_snowflake", |b| {
        b.iter(|| -> SnowflakeTwitterId { atomic.next_id(|_| std::thread::yield_now()) })
    });
    g.finish();
}

fn counters(c: &mut Criterion) {
    let f = counter_factory();
    let mut g = c.benchmark_group("counter");
    g.bench_function("counter64", |b| b.iter(|| f.counter64()));
    g.bench_function("counter96", |b| b.iter(|| f.counter96()));
    g.bench_function("counter128", |b| b.iter(|| f.counter128()));
    g.bench_function("counter128_u128", |b| {
        b.iter(|| f.counter128().map_or(0, Nonce128::to_u128))
    });
    g.bench_function("counter96_u128", |b| {
        b.iter(|| f.counter96().map_or(0, nonce_core::Nonce96::to_u128))
    });
    g.bench_function("counter64_u64", |b| {
        b.iter(|| f.counter64().map_or(0, nonce_core::Nonce64::to_u64))
    });
    let h = f.handle();
    g.bench_function("handle_counter64", |b| b.iter(|| h.counter64()));
    g.bench_function("handle_counter128", |b| b.iter(|| h.counter128()));
    g.finish();
}

/// A range of a million 96-bit counter nonces (what `nononce serve` answers
/// `/v1/nonces/range?count=1000000` with), beside its floor: one atomic add of the same length
/// on a bare counter, the least any reservation of a run can cost.
fn ranges(c: &mut Criterion) {
    const RUN: u64 = 1_000_000;
    let run = NonZeroU64::new(RUN).unwrap();
    let mut g = c.benchmark_group("range");
    let counter = AtomicU64::new(0);
    g.bench_function("fetch_add_x1000000", |b| {
        b.iter(|| counter.fetch_add(black_box(RUN), Ordering::SeqCst))
    });
    let f = counter_factory();
    g.bench_function("counter_range96_x1000000", |b| {
        b.iter(|| f.counter_range96(black_box(run)).unwrap())
    });
    // On a live clock: the count runs ahead of the clock by a million per call, as a server's
    // does when clients ask for ranges faster than it mints them.
    let live = live_factory(BootClock::new());
    g.bench_function("live_counter_range96_x1000000", |b| {
        b.iter(|| live.counter_range96(black_box(run)).unwrap())
    });
    g.finish();
}

fn scaling(c: &mut Criterion) {
    let f = counter_factory();
    let mut g = c.benchmark_group("threads");
    thread_rows(
        &mut g,
        "shared_counter128",
        || (),
        |()| f.counter128().unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_counter128",
        || f.handle(),
        |h| h.counter128().unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_counter64",
        || f.handle(),
        |h| h.counter64().unwrap(),
    );
    g.finish();
}

fn sortables(c: &mut Criterion) {
    let f = live_factory(BootClock::new());
    let mut g = c.benchmark_group("sortable");
    g.bench_function("sortable64", |b| b.iter(|| f.sortable64()));
    g.bench_function("sortable96", |b| b.iter(|| f.sortable96()));
    g.bench_function("sortable128", |b| b.iter(|| f.sortable128()));
    let h = f.handle();
    g.bench_function("handle_sortable96", |b| b.iter(|| h.sortable96()));
    g.bench_function("handle_sortable128", |b| b.iter(|| h.sortable128()));
    // The same calls on the ticker clock (the facade's): one atomic load instead of a clock
    // read.
    let t = live_factory(TickerClock::shared().unwrap());
    g.bench_function("ticker_sortable64", |b| b.iter(|| t.sortable64()));
    g.bench_function("ticker_sortable96", |b| b.iter(|| t.sortable96()));
    g.bench_function("ticker_sortable128", |b| b.iter(|| t.sortable128()));
    let th = t.handle();
    g.bench_function("ticker_handle_sortable96", |b| b.iter(|| th.sortable96()));
    g.bench_function("ticker_handle_sortable128", |b| b.iter(|| th.sortable128()));
    g.finish();

    // Sortable nonces on a live clock from 1 and 2 threads: the shared state, and handles.
    let f = live_factory(BootClock::new());
    let mut g = c.benchmark_group("sortable_threads");
    thread_rows(
        &mut g,
        "shared_sortable128",
        || (),
        |()| f.sortable128().unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_sortable96",
        || f.handle(),
        |h| h.sortable96().unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_sortable128",
        || f.handle(),
        |h| h.sortable128().unwrap(),
    );
    g.finish();
}

fn encrypted(c: &mut Criterion) {
    let f = counter_factory();
    let mut g = c.benchmark_group("encrypted");
    g.bench_function("encrypted64_speck", |b| {
        b.iter(|| f.encrypted64(Base::Counter))
    });
    g.bench_function("encrypted128_aes", |b| {
        b.iter(|| f.encrypted128(Base::Counter))
    });
    let h = f.handle();
    g.bench_function("handle_encrypted128_aes", |b| b.iter(|| h.encrypted128()));
    // One iteration fills 1024 nonces; the report divides by 1024.
    let mut buf = vec![Nonce128::from_u128(0); 1024];
    g.bench_function("fill_encrypted128_aes_x1024", |b| {
        b.iter(|| {
            f.fill_encrypted128(&mut buf).unwrap();
            black_box(buf[1023])
        })
    });
    let live = live_factory(BootClock::new());
    g.bench_function("encrypted128_aes_sortable", |b| {
        b.iter(|| live.encrypted128(Base::Sortable))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = baselines, counters, ranges, scaling, sortables, encrypted
}
criterion_main!(benches);
