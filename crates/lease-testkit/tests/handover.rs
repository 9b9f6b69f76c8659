//! The handover scenario on the reference store: no duplicate and no overlap of the two
//! holders' timestamps with the floor, both without.

use lease_testkit::handover::{self, Scenario};
use lease_testkit::memory::MemoryStore;

#[tokio::test]
async fn handover_across_clocks_repeats_nothing_with_the_floor() {
    let outcomes = handover::standard(|| async { MemoryStore::new() })
        .await
        .unwrap();
    assert_eq!(outcomes.len(), Scenario::standard().len());
    for (scenario, outcome) in &outcomes {
        assert_eq!(outcome.duplicates, 0, "{scenario:?}");
        assert_eq!(outcome.overlap, None, "{scenario:?}");
        assert!(outcome.issued_a > 0, "{scenario:?}: {outcome:?}");
        if scenario.offset_ms <= -3_600_000 {
            // An hour behind the floor, sortable and 64-bit counter nonces cannot wait.
            assert!(outcome.refused_b > 0, "{scenario:?}: {outcome:?}");
        } else {
            assert!(outcome.issued_b > 0, "{scenario:?}: {outcome:?}");
        }
    }
}

#[tokio::test]
async fn without_the_floor_a_lagging_successor_repeats_nonces() {
    // The same lags as the standard scenarios.
    for scenario in Scenario::standard()
        .into_iter()
        .filter(|s| s.offset_ms < 0 && s.offset_ms > -10_000)
    {
        let scenario = scenario.without_floor();
        let outcome = handover::run(&MemoryStore::new(), scenario).await.unwrap();
        assert!(outcome.duplicates > 0, "{scenario:?}: {outcome:?}");
        let overlap = outcome.overlap.expect("B's timestamps among A's");
        assert_eq!(overlap.id, outcome.machine_id.get());
        assert_eq!((overlap.earlier.node, overlap.range.node), (0, 1));
    }
}
