//! Generation metrics cost nothing on the nonce path: each call on a factory whose counts a
//! thread publishes every millisecond (ten thousand times as often as the facade's task,
//! `nononce::PUBLISH_INTERVAL`), into a real `metrics` recorder, side by side in one run with
//! the same call on a factory nobody publishes. The factories count by themselves either way
//! (`Factory::stats` reads what they keep); what publishing adds is a reader of their
//! counters, which the two rows of each call compare.
//!
//! `cargo bench -p nononce --features generation-metrics --bench generation_metrics`; see
//! docs/performance.md, "Generation metrics".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
#[path = "support/factories.rs"]
mod factories;
use factories::{factory, ticker_factory};
use nononce::nonce::{Base, Clock, Factory};
use nononce::{FactoryOptions, FactoryOptionsExt, record_factory_metrics};

/// How often the publishing thread publishes.
const EVERY: Duration = Duration::from_millis(1);

/// Runs `rows` while a thread publishes `published`'s counts every [`EVERY`].
fn publishing<C: Clock + Sync>(published: &Factory<C>, rows: impl FnOnce()) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                record_factory_metrics("published", published);
                std::thread::sleep(EVERY);
            }
        });
        rows();
        stop.store(true, Ordering::Relaxed);
    });
}

fn generation_metrics(c: &mut Criterion) {
    metrics::set_global_recorder(metrics_util::debugging::DebuggingRecorder::new())
        .expect("the benchmark's recorder is the first");
    // As the facade builds them (thread cache on), and on the shared counters.
    for (group, options) in [
        ("generation_metrics", FactoryOptions::new()),
        (
            "generation_metrics_shared",
            FactoryOptions::new().with_thread_cache(false),
        ),
    ] {
        let quiet = factory(options.clone());
        let published = factory(options);
        let mut g = c.benchmark_group(group);
        // Each call's two rows one after the other, so that a host whose load drifts moves
        // both alike.
        let both = [("quiet", &quiet), ("published", &published)];
        publishing(&published, || {
            for (name, f) in both {
                g.bench_function(format!("counter64/{name}"), |b| b.iter(|| f.counter64()));
            }
            for (name, f) in both {
                g.bench_function(format!("counter96/{name}"), |b| b.iter(|| f.counter96()));
            }
            for (name, f) in both {
                g.bench_function(format!("encrypted128_aes/{name}"), |b| {
                    b.iter(|| f.encrypted128(Base::Counter))
                });
            }
            for (name, f) in both {
                let h = f.handle();
                g.bench_function(format!("handle_counter128/{name}"), |b| {
                    b.iter(|| h.counter128())
                });
            }
        });
        g.finish();
    }
    // Sortable nonces on the facade's clock; sortable96's state closes a millisecond once per
    // millisecond, with one add to the factory's tally.
    let quiet = ticker_factory();
    let published = ticker_factory();
    let mut g = c.benchmark_group("generation_metrics_sortable");
    let both = [("quiet", &quiet), ("published", &published)];
    publishing(&published, || {
        for (name, f) in both {
            g.bench_function(format!("sortable64/{name}"), |b| b.iter(|| f.sortable64()));
        }
        for (name, f) in both {
            g.bench_function(format!("sortable96/{name}"), |b| b.iter(|| f.sortable96()));
        }
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = generation_metrics
}
criterion_main!(benches);
