//! How the benchmarks time one call on several threads (nonce-core's and the facade's, which
//! includes this file), so both crates' scaling ratios are measured the same way.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

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
