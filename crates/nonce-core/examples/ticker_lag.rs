//! How far the process's ticker clock trails the boot clock it publishes, idle and while other
//! threads burn every core, and what CPU time the ticker thread costs.
//!
//! `cargo run --release -p nonce-core --example ticker_lag -- [SECONDS_PER_PHASE] [BURNERS]`
//! (defaults: 10 s, two burning threads per core). Figures are in docs/performance.md.

// Sample counts become percentages and quantile ranks: far below 2^52, exact enough to print.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nonce_core::{Clock, DEFAULT_TICK_PERIOD, TickerClock};

/// Lags of 0..LAG_BUCKETS-1 ms are counted one by one; longer ones in the last bucket.
const LAG_BUCKETS: usize = 64;

struct Lags {
    counts: [u64; LAG_BUCKETS],
    samples: u64,
    max_ms: u64,
    ahead: u64,
}

/// Reads the ticker and then the boot clock in a tight loop for `run`, as a busy generator
/// would, and counts how far the first trails the second.
fn sample(clock: &TickerClock, run: Duration) -> Lags {
    let mut lags = Lags {
        counts: [0; LAG_BUCKETS],
        samples: 0,
        max_ms: 0,
        ahead: 0,
    };
    let start = Instant::now();
    while start.elapsed() < run {
        for _ in 0..1000 {
            let ticker = clock.now_ms();
            let boot = clock.source().now_ms();
            match boot.checked_sub(ticker) {
                Some(lag) => {
                    let bucket = usize::try_from(lag)
                        .unwrap_or(usize::MAX)
                        .min(LAG_BUCKETS - 1);
                    lags.counts[bucket] += 1;
                    lags.max_ms = lags.max_ms.max(lag);
                }
                None => lags.ahead += 1,
            }
            lags.samples += 1;
        }
    }
    lags
}

/// The smallest lag (ms) that at least `fraction` of the samples did not exceed.
fn quantile(lags: &Lags, fraction: f64) -> String {
    let need = (lags.samples as f64 * fraction).ceil() as u64;
    let mut seen = 0;
    for (ms, count) in lags.counts.iter().enumerate() {
        seen += count;
        if seen >= need {
            return if ms == LAG_BUCKETS - 1 {
                format!(">={ms}")
            } else {
                ms.to_string()
            };
        }
    }
    "-".into()
}

fn report(phase: &str, lags: &Lags) {
    let share = |ms: usize| lags.counts[ms] as f64 * 100.0 / lags.samples as f64;
    println!(
        "| {phase} | {} | {:.2}% | {:.2}% | {:.4}% | {} | {} | {} | {} | {} |",
        lags.samples,
        share(0),
        share(1),
        100.0 - share(0) - share(1),
        quantile(lags, 0.99),
        quantile(lags, 0.999),
        quantile(lags, 0.99999),
        lags.max_ms,
        lags.ahead,
    );
}

#[cfg(target_os = "linux")]
fn process_cpu() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

#[cfg(not(target_os = "linux"))]
fn process_cpu() -> Option<Duration> {
    None
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let burners: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2 * cores);
    let run = Duration::from_secs(seconds);
    let clock = TickerClock::shared().expect("the ticker thread starts");
    println!(
        "tick period {DEFAULT_TICK_PERIOD:?}, {cores} cores, {seconds} s per phase, {burners} burning threads under load\n"
    );

    // The ticker alone: the process sleeps, so its CPU time is the ticker's.
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    std::thread::sleep(run);
    if let (Some(before), Some(after)) = (cpu0, process_cpu()) {
        let share = (after - before).as_secs_f64() / wall0.elapsed().as_secs_f64();
        println!(
            "ticker thread alone: {:.3}% of one core ({:.1} us of CPU per second)\n",
            share * 100.0,
            share * 1e6
        );
    }

    println!(
        "| phase | samples | lag 0 ms | lag 1 ms | lag 2+ ms | p99 (ms) | p99.9 (ms) | p99.999 (ms) | max (ms) | ahead |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    report("idle (sampler only)", &sample(&clock, run));

    let stop = AtomicBool::new(false);
    let loaded = std::thread::scope(|s| {
        for _ in 0..burners {
            s.spawn(|| {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
                    }
                }
            });
        }
        let lags = sample(&clock, run);
        stop.store(true, Ordering::Relaxed);
        lags
    });
    report(&format!("{burners} threads burning"), &loaded);
}
