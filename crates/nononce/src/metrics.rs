//! Generation metrics: each factory's [`GenerationStats`] published as `metrics` counters.
//!
//! Nothing here runs on the nonce path: a factory counts by itself, at no cost to its calls
//! (see [`Factory::stats`]), and these functions read the counts and publish them, every
//! [`PUBLISH_INTERVAL`] from a task of their own and whenever
//! [`Nononce::record_generation_metrics`](crate::Nononce::record_generation_metrics) is
//! called (before a scrape, for figures of that moment).

use std::sync::{Arc, Weak};
use std::time::Duration;

use nonce_core::{Base, Clock, Factory, GenerationStats, Generator};

use crate::FactoryClock;

/// How often the task started with the factories publishes their counts.
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(10);

/// Publishes the generation counts of `factory` ([`Factory::stats`]) as `metrics` counters
/// labelled `factory=name`, as [`Nononce::record_generation_metrics`](crate::Nononce::record_generation_metrics)
/// does for its own: for a program that holds factories of its own. Cheap (a few atomic
/// loads and one `metrics` call per series); never call it per nonce.
pub fn record_factory_metrics<C: Clock>(name: &str, factory: &Factory<C>) {
    publish(name, &factory.stats());
}

fn publish(name: &str, stats: &GenerationStats) {
    let factory = name.to_owned();
    for generator in Generator::ALL {
        let sizes: Vec<String> = stats.sizes(generator).map(|b| b.to_string()).collect();
        // No size claimed for the generator's kind: it has taken nothing.
        if sizes.is_empty() {
            continue;
        }
        let kind = match generator.base() {
            Base::Counter => "counter",
            Base::Sortable => "sortable",
        };
        // `absolute` keeps the largest value published: the count can step back a little
        // when a per-thread block gives back what it did not use.
        metrics::counter!(
            "nononce_factory_nonces_total",
            "factory" => factory.clone(),
            "kind" => kind,
            "bits" => sizes.join("+")
        )
        .absolute(stats.taken(generator));
    }
    metrics::counter!("nononce_factory_throttled_total", "factory" => factory.clone())
        .absolute(stats.throttled);
    for (bits, conflicts) in ["64", "96", "128"].into_iter().zip(stats.kind_conflicts) {
        if conflicts != 0 {
            metrics::counter!(
                "nononce_factory_kind_conflicts_total",
                "factory" => factory.clone(),
                "bits" => bits
            )
            .absolute(conflicts);
        }
    }
    metrics::counter!("nononce_factory_deadline_refusals_total", "factory" => factory)
        .absolute(stats.lease_expired);
}

/// Publishes the factories' counts every [`PUBLISH_INTERVAL`] until they are all dropped
/// (the task holds no factory alive) or the task is aborted at shutdown.
pub(crate) fn start(
    factories: &[(String, Arc<Factory<FactoryClock>>)],
) -> tokio::task::JoinHandle<()> {
    let watched: Vec<(String, Weak<Factory<FactoryClock>>)> = factories
        .iter()
        .map(|(name, factory)| (name.clone(), Arc::downgrade(factory)))
        .collect();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(PUBLISH_INTERVAL);
        loop {
            every.tick().await;
            let mut alive = false;
            for (name, factory) in &watched {
                if let Some(factory) = factory.upgrade() {
                    record_factory_metrics(name, &factory);
                    alive = true;
                }
            }
            if !alive {
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use nonce_core::{Error, FactoryConfig, MachineId, ManualClock, NO_DEADLINE};

    use super::*;

    const T0: u64 = 1_800_000_000_000;

    /// Publishes `factory` as `name` into a recorder of its own, and returns every counter
    /// with its labels, `name{label=value,...}`.
    fn published(name: &str, factory: &Factory<&ManualClock>) -> HashMap<String, u64> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || record_factory_metrics(name, factory));
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let mut labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                let DebugValue::Counter(n) = value else {
                    panic!("{} is not a counter", key.name())
                };
                (format!("{}{{{}}}", key.name(), labels.join(",")), n)
            })
            .collect()
    }

    fn factory(clock: &ManualClock) -> Factory<&ManualClock> {
        let f = Factory::new(clock, FactoryConfig::new().with_thread_cache(false)).unwrap();
        f.enable(MachineId::new(9).unwrap(), NO_DEADLINE).unwrap();
        f
    }

    #[test]
    fn each_counter_moves_for_its_cause() {
        let clock = ManualClock::new(T0);
        let f = factory(&clock);
        let nothing = published("ids", &f);
        assert_eq!(nothing["nononce_factory_throttled_total{factory=ids}"], 0);
        assert_eq!(
            nothing["nononce_factory_deadline_refusals_total{factory=ids}"],
            0
        );
        // Nothing claimed: no nonce series and no conflict series yet.
        assert_eq!(nothing.len(), 2, "{nothing:?}");

        // N nonces of a kind and size: that series moves by N.
        for _ in 0..7 {
            f.counter96().unwrap();
        }
        for _ in 0..3 {
            f.sortable128().unwrap();
        }
        let m = published("ids", &f);
        assert_eq!(
            m["nononce_factory_nonces_total{bits=96,factory=ids,kind=counter}"],
            7
        );
        assert_eq!(
            m["nononce_factory_nonces_total{bits=128,factory=ids,kind=sortable}"],
            3
        );

        // A call the throttle holds back: 8192 64-bit counter nonces use up the millisecond,
        // and this clock cannot wait.
        for _ in 0..8192 {
            f.counter64().unwrap();
        }
        assert!(matches!(f.counter64(), Err(Error::WouldBlock { .. })));
        // A kind conflict: 96-bit nonces are counter nonces in this factory.
        assert!(matches!(
            f.sortable96(),
            Err(Error::KindConflict { bits: 96, .. })
        ));
        let m = published("ids", &f);
        assert_eq!(
            m["nononce_factory_nonces_total{bits=64,factory=ids,kind=counter}"],
            8192
        );
        assert_eq!(m["nononce_factory_throttled_total{factory=ids}"], 1);
        assert_eq!(
            m["nononce_factory_kind_conflicts_total{bits=96,factory=ids}"],
            1
        );
        assert_eq!(m["nononce_factory_deadline_refusals_total{factory=ids}"], 0);

        // A deadline refusal: the lease's deadline is now.
        f.set_deadline(T0);
        assert_eq!(f.counter96(), Err(Error::LeaseExpired));
        let m = published("ids", &f);
        assert_eq!(m["nononce_factory_deadline_refusals_total{factory=ids}"], 1);
        // And nothing else moved.
        assert_eq!(
            m["nononce_factory_nonces_total{bits=96,factory=ids,kind=counter}"],
            7
        );
        assert_eq!(m["nononce_factory_throttled_total{factory=ids}"], 1);
        assert_eq!(
            m["nononce_factory_kind_conflicts_total{bits=96,factory=ids}"],
            1
        );
    }

    /// Counter nonces of 96 and 128 bits share one counter: a factory issuing both reports
    /// them together.
    #[test]
    fn sizes_sharing_a_generator_are_one_series() {
        let clock = ManualClock::new(T0);
        let f = factory(&clock);
        f.counter96().unwrap();
        f.counter128().unwrap();
        let m = published("both", &f);
        assert_eq!(
            m["nononce_factory_nonces_total{bits=96+128,factory=both,kind=counter}"],
            2
        );
    }
}
