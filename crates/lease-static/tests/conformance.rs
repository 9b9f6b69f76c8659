//! The static strategies against the checks of `lease-testkit` that apply to fixed IDs.

use std::time::Duration;

use lease_core::{Acquire, Release, Renew, Strategy};
use lease_manager::LeaseConfig;
use lease_static::{HostListStrategy, StatefulSetStrategy};
use lease_testkit::{Capabilities, Check, Options, Outcome};

/// A strategy configured as a lease manager with a margin of 50 ms would: it waits that long
/// before its first grant.
fn configured<S: Strategy>(strategy: S) -> S {
    let config = LeaseConfig::default()
        .with_margin(Duration::from_millis(50))
        .with_min_ttl(Duration::from_secs(1));
    strategy
        .check_terms(&config.terms())
        .map_err(|e| e.to_string())
        .unwrap();
    strategy
}

fn options() -> Options {
    Options::new(Duration::from_secs(2)).with_capabilities(Capabilities::STATIC)
}

#[tokio::test]
async fn statefulset_strategy_conforms() {
    let report = lease_testkit::conformance(
        || async {
            || async {
                configured(
                    StatefulSetStrategy::from_value("POD_NAME", "nonce-worker-7", 100).unwrap(),
                )
            }
        },
        &options(),
    )
    .await;
    assert_eq!(report.strategy, "statefulset");
    use Check as C;
    for check in [
        C::RenewKeepsId,
        C::RenewIsIdempotent,
        C::TtlHonoured,
        C::Deterministic,
    ] {
        let outcome = report.outcome(check);
        assert_eq!(outcome, Some(&Outcome::Passed), "{check}\n{report}");
    }
}

#[tokio::test]
async fn without_a_floor_file_grants_exactly_the_requested_ttl_and_reports_no_floor() {
    let strategy = configured(StatefulSetStrategy::from_value("POD_NAME", "w-3", 0).unwrap());
    let profile = strategy.profile();
    assert!(
        profile.deterministic && !profile.records_floor,
        "{profile:?}"
    );
    let ttl = Duration::from_secs(8 * 3600);
    let grant = strategy
        .acquire(Acquire::new(ttl, 1_000, 2_000))
        .await
        .unwrap();
    assert_eq!(
        (grant.machine_id.get(), grant.ttl, grant.floor_ms),
        (3, ttl, 0)
    );
    let renewal = strategy
        .renew(&grant.lease, Renew::new(ttl / 2, 3_000))
        .await
        .unwrap();
    assert_eq!((renewal.lease.get(), renewal.ttl), (3, ttl / 2));
    strategy
        .release(&grant.lease, Release::new(ttl, 2_500))
        .await
        .unwrap();
    // Nothing was stored: the next grant has no floor either.
    let again = strategy.acquire(Acquire::new(ttl, 0, 0)).await.unwrap();
    assert_eq!(again.floor_ms, 0);
}

/// Every check that applies to a host list, one test each (its conformance by name).
mod generated {
    use super::*;

    #[test]
    fn named_hosts() {
        let strategy = HostListStrategy::with_source(&["x=0", "y=1"], &["y"]).unwrap();
        assert_eq!(strategy.profile().name, "hosts");
    }

    // A host list gives each node its fixed ID, and records no floor without a floor file.
    lease_testkit::conformance_tests!(
        || async {
            || async { configured(HostListStrategy::with_source(&["x=0", "y=1"], &["y"]).unwrap()) }
        },
        options(),
        does_not_apply: [
            distinct_ids,
            lost_after_takeover,
            release_guard,
            exhausted,
            floor_travels,
            floor_recorded,
            floor_preferred,
            herd,
            renew_after_release,
        ]
    );
}
