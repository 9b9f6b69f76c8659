//! How the benchmarks time one call on several threads (nonce-core's and the facade's, which
//! includes this file), so both crates' scaling ratios are measured the same way: the rows
//! ([`thread_rows`]) and their timing ([`per_thread`]).

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;

/// Aggregate time per call with `threads` threads, each making `iters` calls of `call` on
/// what `setup` gave it in that thread (a handle, a factory of its own, or nothing).
///
/// Timed by the threads themselves, from the earliest start to the latest end, once every
/// thread is set up: neither thread creation nor the spawning thread (which on two cores may
/// run only after a worker is done) is counted. The threads wait for each other spinning,
/// not asleep: a thread woken from a sleeping barrier is often queued on its waker's core
/// for milliseconds, so the two would run one after the other, and a spinning thread keeps
/// its core until every thread is ready.
pub fn per_thread<S, T>(
    threads: u32,
    iters: u64,
    setup: impl Fn() -> S + Sync,
    call: impl Fn(&S) -> T + Sync,
) -> Duration {
    let ready = AtomicU32::new(0);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let state = setup();
                    ready.fetch_add(1, Ordering::SeqCst);
                    while ready.load(Ordering::SeqCst) < threads {
                        std::hint::spin_loop();
                    }
                    let started = Instant::now();
                    for _ in 0..iters {
                        black_box(call(&state));
                    }
                    (started, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a benchmark thread panicked"))
            .collect()
    });
    let started = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let ended = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    (ended - started) / threads
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
