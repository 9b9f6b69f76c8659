//! Generation metrics cost nothing on the nonce path: each call on a factory nobody publishes,
//! then on the same factory while a thread publishes its counts every millisecond (ten
//! thousand times as often as the facade's task, `nononce::PUBLISH_INTERVAL`) into a real
//! `metrics` recorder, side by side in one run. The factories count by themselves either way
//! (`Factory::stats` reads what they keep); what publishing adds is a reader of their
//! counters, which the two rows of each call compare.
//!
//! `cargo bench -p nononce --features generation-metrics --bench generation_metrics`; see
//! docs/performance.md, "Generation metrics".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
#[path = "support/factories.rs"]
// Its `fetch_add` baseline is for the benchmarks that compare against it.
#[allow(dead_code)]
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

/// The row `{name}/quiet`, then `{name}/published`: the same call on the same factory (the
/// same memory, the same slot of the thread cache), nobody publishing its counts, then a
/// thread publishing them.
fn pair<C: Clock + Sync, T>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    f: &Factory<C>,
    call: impl Fn(&Factory<C>) -> T,
) {
    g.bench_function(format!("{name}/quiet"), |b| b.iter(|| call(f)));
    publishing(f, || {
        g.bench_function(format!("{name}/published"), |b| b.iter(|| call(f)));
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
        let f = factory(options);
        let mut g = c.benchmark_group(group);
        pair(&mut g, "counter64", &f, Factory::counter64);
        pair(&mut g, "counter96", &f, Factory::counter96);
        pair(&mut g, "encrypted128_aes", &f, |f| {
            f.encrypted128(Base::Counter)
        });
        let h = f.handle();
        pair(&mut g, "handle_counter128", &f, |_| h.counter128());
        g.finish();
    }
    // Sortable nonces on the facade's clock; the sortable state closes a millisecond once per
    // millisecond, with one add to the factory's tally. sortable96 on a factory of its own:
    // beside sortable64 it would take one count at a time.
    let mut g = c.benchmark_group("generation_metrics_sortable");
    pair(&mut g, "sortable64", &ticker_factory(), Factory::sortable64);
    pair(&mut g, "sortable96", &ticker_factory(), Factory::sortable96);
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
