//! The facade's factories called as users call them (one factory shared by every thread), side
//! by side in one run with per-thread handles and the `fetch_add` baseline.
//!
//! `cargo xtask bench` runs this after nonce-core's benchmarks and prints the goal ratios; see
//! docs/performance.md.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
#[path = "support/factories.rs"]
mod factories;
#[path = "../../nonce-core/benches/support/per_thread.rs"]
mod per_thread;
use factories::{factory, fetch_add_pack64, ticker_factory};
use nononce::nonce::{Base, Factory, Handle, ManualClock, Nonce96, Nonce128};
use nononce::{FactoryOptions, FactoryOptionsExt};
use per_thread::thread_rows;

fn one_thread(c: &mut Criterion) {
    let f = factory(FactoryOptions::new());
    let mut g = c.benchmark_group("facade");
    let counter = AtomicU64::new(0);
    g.bench_function("fetch_add_pack64", |b| {
        b.iter(|| fetch_add_pack64(&counter))
    });
    g.bench_function("counter64", |b| b.iter(|| f.counter64()));
    g.bench_function("counter128", |b| b.iter(|| f.counter128()));
    g.bench_function("encrypted128_aes", |b| {
        b.iter(|| f.encrypted128(Base::Counter))
    });
    let h = f.handle();
    g.bench_function("handle_counter64", |b| b.iter(|| h.counter64()));
    g.bench_function("handle_counter128", |b| b.iter(|| h.counter128()));
    g.bench_function("handle_encrypted128_aes", |b| b.iter(|| h.encrypted128()));
    g.finish();
}

/// Sortable nonces on a factory as the builder makes it: `FactoryOptions` on the facade's
/// clock (the process's ticker), one factory shared by every thread.
fn sortables(c: &mut Criterion) {
    let f = ticker_factory();
    let mut g = c.benchmark_group("facade_sortable");
    g.bench_function("sortable64", |b| b.iter(|| f.sortable64()));
    g.bench_function("sortable96", |b| b.iter(|| f.sortable96()));
    g.bench_function("sortable128", |b| b.iter(|| f.sortable128()));
    // The value as an integer, as the peers return theirs (ferroid's `Ulid`, a `u128`) and as
    // nonce-core's counter rows compare with `fetch_add`: a `Result` passed through
    // `black_box` is written to memory whole, a cost the caller who uses the value never pays.
    g.bench_function("sortable96_u128", |b| {
        b.iter(|| f.sortable96().map_or(0, Nonce96::to_u128))
    });
    g.bench_function("sortable128_u128", |b| {
        b.iter(|| f.sortable128().map_or(0, Nonce128::to_u128))
    });
    g.finish();
}

fn threads(c: &mut Criterion) {
    let f = factory(FactoryOptions::new());
    let plain = factory(FactoryOptions::new().with_thread_cache(false));
    let counter = AtomicU64::new(0);
    let own: Vec<_> = (0..2).map(|_| factory(FactoryOptions::new())).collect();
    let next_own = AtomicUsize::new(0);
    let mut g = c.benchmark_group("facade_threads");
    // Each row: `{name}_x1` then `{name}_x2` (`thread_rows`).
    thread_rows(
        &mut g,
        "fetch_add_pack64",
        || (),
        |()| fetch_add_pack64(&counter),
    );
    thread_rows(&mut g, "counter64", || (), |()| f.counter64().unwrap());
    // The same calls with nothing shared between the threads: one factory each. What
    // `counter64_x2` loses against this row is the cost of sharing the factory.
    thread_rows(
        &mut g,
        "own_factories_counter64",
        || &own[next_own.fetch_add(1, Ordering::Relaxed) % own.len()],
        |own: &&Factory<ManualClock>| own.counter64().unwrap(),
    );
    thread_rows(&mut g, "counter128", || (), |()| f.counter128().unwrap());
    thread_rows(
        &mut g,
        "encrypted128_aes",
        || (),
        |()| f.encrypted128(Base::Counter).unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_counter64",
        || f.handle(),
        |h: &Handle<'_, _>| h.counter64().unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_counter128",
        || f.handle(),
        |h: &Handle<'_, _>| h.counter128().unwrap(),
    );
    thread_rows(
        &mut g,
        "handle_encrypted128_aes",
        || f.handle(),
        |h: &Handle<'_, _>| h.encrypted128().unwrap(),
    );
    // Sortable nonces as the facade makes them: its clock, the thread cache's runs. The
    // ticker runs only for these rows: the counter rows' factories run on a manual clock,
    // and a ticker thread waking 2000 times a second would take its share of the two
    // cores from their 2-thread runs alone (its own cost is measured by `ticker_lag`).
    let sortable = ticker_factory();
    thread_rows(
        &mut g,
        "sortable96",
        || (),
        |()| sortable.sortable96().unwrap(),
    );
    thread_rows(
        &mut g,
        "sortable128",
        || (),
        |()| sortable.sortable128().unwrap(),
    );
    drop(sortable);
    thread_rows(
        &mut g,
        "no_thread_cache_counter128",
        || (),
        |()| plain.counter128().unwrap(),
    );
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = one_thread, sortables, threads
}
criterion_main!(benches);
