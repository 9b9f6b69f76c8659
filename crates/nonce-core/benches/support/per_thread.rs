//! How the benchmarks time one call on several threads (nonce-core's and the facade's, which
//! includes this file), so both crates' scaling ratios are measured the same way: the rows
//! ([`thread_rows`]) and their timing ([`per_thread`]).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;

/// Aggregate time per call with `threads` threads, each making `iters` calls of `call` on
/// what `setup` gave it in that thread (a handle, a factory of its own, or nothing).
///
/// Timed from the moment every thread is set up and released at once, so neither thread
/// creation nor a late start of the second thread is counted as generation.
pub fn per_thread<S, T>(
    threads: u32,
    iters: u64,
    setup: impl Fn() -> S + Sync,
    call: impl Fn(&S) -> T + Sync,
) -> Duration {
    let ready = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let state = setup();
                ready.wait();
                for _ in 0..iters {
                    black_box(call(&state));
                }
            });
        }
        ready.wait();
        Instant::now()
    })
    .elapsed()
        / threads
}

/// `{name}_x1` then `{name}_x2` in `group`: `call` on 1 and 2 threads, on what `setup` gives
/// each. The two rows of a ratio run one after the other, so what drifts on the host between
/// rows (other guests, clock speed) weighs on both alike.
pub fn thread_rows<S, T>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    setup: impl Fn() -> S + Sync,
    call: impl Fn(&S) -> T + Sync,
) {
    for threads in [1u32, 2] {
        group.bench_function(format!("{name}_x{threads}"), |b| {
            b.iter_custom(|iters| per_thread(threads, iters, &setup, &call))
        });
    }
}
