//! Generation metrics through the facade: a real `metrics` recorder sees each factory's
//! nonces and refusals under the factory's name.

use std::time::Duration;

use lease_testkit::memory::MemoryStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use nononce::LeaseConfig;
use nononce::nonce::Error as NonceError;
use nononce::prelude::*;

/// The value of the counter `name` with exactly `labels`, as `record_generation_metrics`
/// publishes it now.
fn counter<S: Strategy + 'static>(nonces: &Nononce<S>, name: &str, labels: &[(&str, &str)]) -> u64 {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || nonces.record_generation_metrics());
    let found: Vec<u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let key = key.key();
            let mut have: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            let mut want = labels.to_vec();
            have.sort_unstable();
            want.sort_unstable();
            match value {
                DebugValue::Counter(n) if key.name() == name && have == want => Some(n),
                _ => None,
            }
        })
        .collect();
    assert_eq!(found.len(), 1, "one {name} {labels:?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_factory_publishes_its_nonces_and_kind_conflicts() {
    let store = MemoryStore::new();
    let nonces = Nononce::builder(store.strategy())
        .with_factory("ids", FactoryOptions::new())
        .with_factory("plain", FactoryOptions::new().with_thread_cache(false))
        .with_lease_config(
            LeaseConfig::default()
                .with_lease_duration(Duration::from_secs(60))
                .with_acquire_timeout(Some(Duration::from_secs(5))),
        )
        .start()
        .await
        .unwrap();
    let nonces_of = |factory: &str, kind: &str, bits: &str| {
        counter(
            &nonces,
            "nononce_factory_nonces_total",
            &[("factory", factory), ("kind", kind), ("bits", bits)],
        )
    };

    // Through a handle (given back when dropped) and the shared calls, exact counts.
    let ids = nonces.factory("ids").unwrap();
    {
        let handle = ids.handle();
        for _ in 0..1000 {
            handle.counter128().unwrap();
        }
    }
    let plain = nonces.factory("plain").unwrap();
    for _ in 0..250 {
        plain.sortable96().unwrap();
    }
    assert_eq!(nonces_of("ids", "counter", "128"), 1000);
    assert_eq!(nonces_of("plain", "sortable", "96"), 250);

    let conflicts = |factory| {
        counter(
            &nonces,
            "nononce_factory_kind_conflicts_total",
            &[("factory", factory), ("bits", "96")],
        )
    };
    assert!(matches!(
        plain.counter96(),
        Err(NonceError::KindConflict { bits: 96, .. })
    ));
    assert_eq!(conflicts("plain"), 1);
    assert!(plain.counter96().is_err());
    assert_eq!(conflicts("plain"), 2);
    // Each factory its own series; nothing refused for the deadline.
    for factory in ["ids", "plain"] {
        let refusals = [("factory", factory)];
        assert_eq!(
            counter(
                &nonces,
                "nononce_factory_deadline_refusals_total",
                &refusals
            ),
            0
        );
    }
    nonces.shutdown().await;
}
