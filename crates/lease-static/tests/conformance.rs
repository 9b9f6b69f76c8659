//! The static strategies against the checks of `lease-testkit` that apply to fixed IDs.

use std::time::Duration;

use lease_static::{HostListStrategy, StatefulSetStrategy};
use lease_testkit::{Capabilities, Check, Options, Outcome};

fn options() -> Options {
    Options::new(Duration::from_secs(2)).with_capabilities(Capabilities::STATIC)
}

const APPLIES: [Check; 4] = [
    Check::RenewKeepsId,
    Check::RenewIsIdempotent,
    Check::TtlHonoured,
    Check::Deterministic,
];

fn assert_relevant_checks_passed(report: &lease_testkit::Report) {
    for check in APPLIES {
        assert_eq!(
            report.outcome(check),
            Some(&Outcome::Passed),
            "{check}\n{report}"
        );
    }
}

#[tokio::test]
async fn statefulset_strategy_conforms() {
    let report = lease_testkit::conformance(
        || async {
            || async { StatefulSetStrategy::from_value("POD_NAME", "nonce-worker-7", 100).unwrap() }
        },
        &options(),
    )
    .await;
    assert_eq!(report.strategy, "statefulset");
    assert_relevant_checks_passed(&report);
}

#[tokio::test]
async fn host_list_strategy_conforms() {
    let report = lease_testkit::conformance(
        || async {
            || async {
                HostListStrategy::with_source(&["b", "a", "c"], &["c", "192.0.2.1"]).unwrap()
            }
        },
        &options(),
    )
    .await;
    assert_eq!(report.strategy, "hosts");
    assert_relevant_checks_passed(&report);
}

#[tokio::test]
async fn grants_exactly_the_requested_ttl() {
    use lease_core::Strategy;
    let strategy = StatefulSetStrategy::from_value("POD_NAME", "w-3", 0).unwrap();
    let ttl = Duration::from_secs(8 * 3600);
    let grant = strategy.acquire(ttl).await.unwrap();
    assert_eq!((grant.machine_id.get(), grant.ttl), (3, ttl));
    let renewal = strategy.renew(&grant.lease, ttl / 2).await.unwrap();
    assert_eq!((renewal.lease.get(), renewal.ttl), (3, ttl / 2));
    strategy.release(&grant.lease, ttl).await.unwrap();
}

mod generated {
    use super::*;
    // A host list gives each node its fixed ID, and records no floor without a floor file.
    lease_testkit::conformance_tests!(
        || async { || async { HostListStrategy::with_source(&["x", "y"], &["y"]).unwrap() } },
        options(),
        does_not_apply: [
            distinct_ids,
            lost_after_takeover,
            release_guard,
            exhausted,
            floor_travels,
        ]
    );
}
