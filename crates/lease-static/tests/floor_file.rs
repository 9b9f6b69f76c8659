//! The floor file of the static strategies: a replaced pod or restarted host starts above
//! everything its predecessor issued under the same ID, whatever the two clocks say.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{ErrorKind, LeaseConfig, LeaseError, Strategy};
use lease_manager::LeaseManager;
use lease_static::{FloorFile, FloorFileError, StatefulSetStrategy};
use nonce_core::{BootClock, Factory, FactoryConfig};

fn pod(file: &FloorFile) -> StatefulSetStrategy {
    StatefulSetStrategy::from_value("POD_NAME", "nonce-worker-3", 0)
        .unwrap()
        .with_floor_file(file.clone())
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lease-static-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_floor_file_records_raises_and_sets() {
    let dir = scratch("records");
    let file = FloorFile::new(dir.join("floor"));
    let a = pod(&file);
    assert!(a.records_floor());
    assert!(
        !StatefulSetStrategy::from_value("P", "p-1", 0)
            .unwrap()
            .records_floor()
    );
    let hour = Duration::from_secs(3600);
    let grant = a.acquire_with_floor(hour, 0, 1_000).await.unwrap();
    assert_eq!(grant.floor_ms, 0, "no file yet");
    assert_eq!(file.read().unwrap(), 1_000);
    a.renew_with_floor(&grant.lease, hour, 5_000).await.unwrap();
    a.renew_with_floor(&grant.lease, hour, 2_000).await.unwrap();
    assert_eq!(file.read().unwrap(), 5_000, "renew only raises");
    a.release_with_floor(&grant.lease, hour, 3_000)
        .await
        .unwrap();
    assert_eq!(file.read().unwrap(), 3_000, "release sets what was issued");
    // The replacement pod, same volume: told the floor.
    let b = pod(&file);
    let grant = b.acquire_with_floor(hour, 0, 10).await.unwrap();
    assert_eq!(grant.floor_ms, 3_000);
    assert_eq!(file.read().unwrap(), 3_000);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_floor_file_that_cannot_be_written_or_read_fails_clearly() {
    let dir = scratch("errors");
    let missing = FloorFile::new(dir.join("no-such-dir").join("floor"));
    let error = pod(&missing)
        .acquire_with_floor(Duration::from_secs(60), 0, 1)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    let message = error.to_string();
    assert!(message.contains("no-such-dir"), "{message}");
    assert!(message.contains("persistent volume"), "{message}");

    let corrupt = dir.join("corrupt");
    std::fs::write(&corrupt, "not a number\n").unwrap();
    let error = FloorFile::new(&corrupt).read().unwrap_err();
    assert!(matches!(error, FloorFileError::Corrupt { .. }), "{error}");
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    std::fs::remove_dir_all(dir).unwrap();
}

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(2))
        .with_renew_interval(Duration::from_millis(700))
        .with_min_ttl(Duration::from_secs(1))
        .with_margin(Duration::from_millis(300))
}

/// Generates sortable 96-bit nonces for `for_ms` and returns them.
fn generate(factory: &Factory<BootClock>, for_ms: u64) -> Vec<u128> {
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    while started.elapsed() < Duration::from_millis(for_ms) {
        match factory.sortable96() {
            Ok(n) => out.push(n.to_u128()),
            Err(nonce_core::Error::WouldBlock { .. } | nonce_core::Error::LeaseExpired) => {}
            Err(e) => panic!("{e}"),
        }
    }
    out
}

/// A pod replaced by one whose clock is `lag_ms` behind: with the floor file nothing repeats,
/// without it the replacement's first nonces repeat the old pod's last ones.
async fn replace_pod(with_file: bool, lag_ms: u64) -> usize {
    let dir = scratch(if with_file { "with" } else { "without" });
    let file = FloorFile::new(dir.join("floor"));
    let strategy = |file: &FloorFile| {
        let s = StatefulSetStrategy::from_value("POD_NAME", "nonce-worker-3", 0).unwrap();
        if with_file {
            s.with_floor_file(file.clone())
        } else {
            s
        }
    };
    let base = BootClock::new();
    let old_clock = base;
    let new_clock = BootClock::with_offset(base.offset_ms() - lag_ms);

    let old = Arc::new(Factory::new(old_clock, FactoryConfig::new()).unwrap());
    let manager = LeaseManager::builder(strategy(&file))
        .with_config(config())
        .with_clock(old_clock)
        .with_target(old.clone())
        .start()
        .await
        .unwrap();
    let old_factory = Arc::clone(&old);
    let issued = tokio::task::spawn_blocking(move || generate(&old_factory, 500))
        .await
        .unwrap();
    manager.shutdown().await;

    let new = Arc::new(Factory::new(new_clock, FactoryConfig::new()).unwrap());
    let manager = LeaseManager::builder(strategy(&file))
        .with_config(config())
        .with_clock(new_clock)
        .with_target(new.clone())
        .start()
        .await
        .unwrap();
    let new_factory = Arc::clone(&new);
    let fresh = tokio::task::spawn_blocking(move || generate(&new_factory, 1200))
        .await
        .unwrap();
    manager.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
    assert!(!issued.is_empty() && !fresh.is_empty());
    let old: std::collections::HashSet<u128> = issued.into_iter().collect();
    fresh.iter().filter(|n| old.contains(n)).count()
}

#[tokio::test]
async fn a_replaced_pod_with_a_lagging_clock_repeats_nothing_with_the_floor_file() {
    assert_eq!(replace_pod(true, 400).await, 0);
}

#[tokio::test]
async fn without_the_floor_file_a_replaced_pod_with_a_lagging_clock_repeats_nonces() {
    assert!(replace_pod(false, 400).await > 0);
}
