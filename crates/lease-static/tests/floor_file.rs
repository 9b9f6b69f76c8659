//! The floor file of the static strategies: a replaced pod or restarted host starts above
//! everything its predecessor issued under the same ID, whatever the two clocks say.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{Acquire, ErrorKind, LeaseError, MachineId, Release, Renew, Strategy};
use lease_manager::{LeaseConfig, LeaseManager};
use lease_static::{FloorFile, FloorFileError, StatefulSetStrategy};
use nonce_core::{BootClock, Factory, FactoryConfig};

/// Pod 3 without a floor file.
fn plain() -> StatefulSetStrategy {
    StatefulSetStrategy::from_value("POD_NAME", "nonce-worker-3", 0).unwrap()
}

fn pod(file: &FloorFile) -> StatefulSetStrategy {
    plain().with_floor_file(file.clone())
}

/// A new empty directory for the test `name`, and a floor file in it.
fn scratch(name: &str) -> (std::path::PathBuf, FloorFile) {
    let dir = std::env::temp_dir().join(format!("lease-static-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = FloorFile::new(dir.join("floor"));
    (dir, file)
}

#[tokio::test]
async fn the_floor_file_records_raises_and_sets() {
    let (dir, file) = scratch("records");
    let a = pod(&file);
    a.check_terms(&config().terms()).unwrap();
    let profile = a.profile();
    assert!(
        profile.records_floor && profile.deterministic,
        "{profile:?}"
    );
    // Requests of the grant window (1 s with `config`): recorded as they come.
    let window = Duration::from_secs(1);
    let grant = a.acquire(Acquire::new(window, 0, 1_000)).await.unwrap();
    assert_eq!(grant.floor_ms, 0, "no file yet");
    assert_eq!(grant.ttl, window);
    assert_eq!(file.read().unwrap(), 1_000);
    a.renew(&grant.lease, Renew::new(window, 5_000))
        .await
        .unwrap();
    a.renew(&grant.lease, Renew::new(window, 2_000))
        .await
        .unwrap();
    assert_eq!(file.read().unwrap(), 5_000, "renew only raises");
    a.release(&grant.lease, Release::new(window, 3_000))
        .await
        .unwrap();
    assert_eq!(file.read().unwrap(), 3_000, "release sets what was issued");
    // The replacement pod, same volume: told the floor.
    let b = pod(&file);
    let grant = b.acquire(Acquire::new(window, 0, 10)).await.unwrap();
    assert_eq!(grant.floor_ms, 3_000);
    assert_eq!(file.read().unwrap(), 3_000);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn with_a_floor_file_grants_last_the_window_and_record_its_deadline() {
    let (dir, file) = scratch("window");
    let strategy = pod(&file);
    // The window: the minimum TTL or three margins, whichever is longer.
    let config = config()
        .with_lease_duration(Duration::from_secs(8 * 3600))
        .with_min_ttl(Duration::from_secs(30))
        .with_margin(Duration::from_millis(12_500));
    strategy.check_terms(&config.terms()).unwrap();
    let (requested, sent) = (config.lease_duration(), 10_000_000);
    // What the manager passes: the latest deadline a grant of the requested duration gives.
    let floor = lease_core::time::local_deadline(sent, requested, config.margin());
    let grant = strategy
        .acquire(Acquire::new(requested, sent, floor))
        .await
        .unwrap();
    assert_eq!(grant.ttl, Duration::from_millis(37_500));
    // The deadline of that grant, and no further.
    assert_eq!(file.read().unwrap(), sent + 37_500 - 12_500);
    let renewal = strategy
        .renew(&grant.lease, Renew::new(requested, floor + 20_000))
        .await
        .unwrap();
    assert_eq!(renewal.ttl, Duration::from_millis(37_500));
    assert_eq!(file.read().unwrap(), sent + 20_000 + 37_500 - 12_500);
    // Without a floor file nothing bounds what was issued: the requested TTL.
    let plain = plain();
    plain.check_terms(&config.terms()).unwrap();
    let grant = plain
        .acquire(Acquire::new(requested, sent, floor))
        .await
        .unwrap();
    assert_eq!((grant.ttl, grant.floor_ms), (requested, 0));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn with_nothing_to_start_above_the_first_grant_waits_the_margin() {
    let (dir, file) = scratch("wait");
    let margin = Duration::from_millis(400);
    let config = config()
        .with_margin(margin)
        .with_min_ttl(Duration::from_secs(1))
        .with_renew_interval(Duration::from_secs(1));
    let hour = Duration::from_secs(3600);
    let plain = plain();
    plain.check_terms(&config.terms()).unwrap();
    let started = std::time::Instant::now();
    plain.acquire(Acquire::new(hour, 0, 1_000)).await.unwrap();
    assert!(started.elapsed() >= margin, "{:?}", started.elapsed());
    // A floor file that holds no floor yet (a predecessor may have run without one) too.
    let fresh = pod(&file);
    fresh.check_terms(&config.terms()).unwrap();
    let started = std::time::Instant::now();
    fresh.acquire(Acquire::new(hour, 0, 0)).await.unwrap();
    assert!(started.elapsed() >= margin, "{:?}", started.elapsed());
    // A file that holds a floor: the grant starts above it, with nothing to wait for.
    fresh
        .release(&MachineId::new(3).unwrap(), Release::new(margin, 5_000))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let grant = fresh.acquire(Acquire::new(hour, 0, 0)).await.unwrap();
    assert!(started.elapsed() < margin, "{:?}", started.elapsed());
    assert_eq!(grant.floor_ms, 5_000);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_floor_file_that_cannot_be_written_or_read_fails_clearly() {
    let (dir, _) = scratch("errors");
    let missing = FloorFile::new(dir.join("no-such-dir").join("floor"));
    let error = pod(&missing)
        .acquire(Acquire::new(Duration::from_secs(60), 0, 60_000))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    let message = error.to_string();
    assert!(message.contains("no-such-dir"), "{message}");
    assert!(message.contains("persistent volume"), "{message}");

    let corrupt = dir.join("corrupt");
    std::fs::write(&corrupt, "not a number\n").unwrap();
    let error = FloorFile::new(&corrupt).read().unwrap_err();
    let strategy_error = pod(&FloorFile::new(&corrupt))
        .acquire(Acquire::new(Duration::from_secs(60), 0, 0))
        .await
        .unwrap_err();
    assert_eq!(strategy_error.to_string(), error.to_string());
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

/// Runs `work` on a factory on `clock` while a lease manager of `strategy` holds its lease,
/// then shuts the manager down.
async fn while_leased<T: Send + 'static>(
    strategy: StatefulSetStrategy,
    config: LeaseConfig,
    clock: BootClock,
    work: impl FnOnce(&Factory<BootClock>) -> T + Send + 'static,
) -> T {
    let factory = Arc::new(Factory::new(clock, FactoryConfig::new()).unwrap());
    let manager = LeaseManager::builder(strategy)
        .with_config(config)
        .with_clock(clock)
        .with_target(factory.clone())
        .start()
        .await
        .unwrap();
    let done = tokio::task::spawn_blocking(move || work(&factory))
        .await
        .unwrap();
    manager.shutdown().await;
    done
}

/// A pod replaced by one whose clock is `lag_ms` behind: with the floor file nothing repeats,
/// without it the replacement's first nonces repeat the old pod's last ones.
async fn replace_pod(with_file: bool, lag_ms: u64, ordinal: u16) -> usize {
    let (dir, file) = scratch(&format!("replace-{ordinal}"));
    // An ordinal (and directory) per call: a process refuses one ID to two managers at once,
    // and the calls run side by side.
    let pod = format!("nonce-worker-{ordinal}");
    let strategy = |file: &FloorFile| {
        let s = StatefulSetStrategy::from_value("POD_NAME", &pod, 0).unwrap();
        if with_file {
            s.with_floor_file(file.clone())
        } else {
            s
        }
    };
    let base = BootClock::new();
    let old_clock = base;
    let new_clock = BootClock::with_offset(base.offset_ms() - lag_ms);

    let issued = while_leased(strategy(&file), config(), old_clock, |f| generate(f, 500)).await;
    let fresh = while_leased(strategy(&file), config(), new_clock, |f| generate(f, 1200)).await;
    std::fs::remove_dir_all(dir).unwrap();
    assert!(!issued.is_empty() && !fresh.is_empty());
    let old: std::collections::HashSet<u128> = issued.into_iter().collect();
    fresh.iter().filter(|n| old.contains(n)).count()
}

#[tokio::test]
async fn a_replaced_pod_with_a_lagging_clock_repeats_only_past_the_margin_without_the_floor_file() {
    let (with_file, past_margin, within_margin) = tokio::join!(
        replace_pod(true, 400, 20),
        // The margin is 300 ms: a clock 1 s behind is beyond what the replacement's wait covers.
        replace_pod(false, 1_000, 21),
        // The documented tolerance is the margin plus the replacement's start-up time, so a
        // clock 200 ms behind must repeat nothing.
        replace_pod(false, 200, 22),
    );
    assert_eq!(with_file, 0);
    assert!(past_margin > 0);
    assert_eq!(within_margin, 0);
}

/// A pod crashes (its manager still holds the lease: nothing is released, the floor file stays
/// as the last grant or renewal wrote it); its replacement starts on that file.
#[tokio::test]
async fn a_crashed_pod_leaves_a_floor_the_replacement_reaches_within_the_grant_window() {
    let (dir, file) = scratch("crash");
    let left_by_crash = FloorFile::new(dir.join("floor-at-crash"));
    // Leases of an hour, as in production (8 h by default); a margin of 300 ms and a minimum
    // TTL of 1 s make a grant window of 1 s.
    let config = config().with_lease_duration(Duration::from_secs(3600));
    let clock = BootClock::new();
    let (path, crash_path) = (file.path().to_owned(), left_by_crash.path().to_owned());
    let (issued, crashed_at) = while_leased(pod(&file), config.clone(), clock, move |f| {
        let issued = generate(f, 1_500);
        // What the volume holds at the crash: the old pod issues nothing more from here on.
        std::fs::copy(path, crash_path).unwrap();
        (issued, nonce_core::Clock::exact_now_ms(&clock))
    })
    .await;

    let floor = left_by_crash.read().unwrap();
    let ahead_ms = floor.saturating_sub(crashed_at);
    assert!(
        ahead_ms <= 1_000,
        "the floor a crash leaves is {ahead_ms} ms ahead of the clock: a replacement's counter64 \
         and sortable64 calls wait that long"
    );
    let highest = issued.iter().map(|&n| unix_ms(n)).max().unwrap();
    assert!(floor >= highest, "{floor} < {highest}");

    // Waits for the clock to pass the floor: at most the window.
    let first = while_leased(pod(&left_by_crash), config, clock, |f| {
        f.counter64().unwrap()
    })
    .await;
    std::fs::remove_dir_all(dir).unwrap();
    let first_ms = first.decode(nonce_core::DEFAULT_EPOCH_MS).unix_ms;
    assert!(first_ms > floor, "{first_ms} <= {floor}");
}

/// The Unix ms of a 96-bit nonce from [`generate`].
fn unix_ms(nonce: u128) -> u64 {
    nonce_core::Nonce96::from_u128(nonce)
        .unwrap()
        .decode(nonce_core::DEFAULT_EPOCH_MS)
        .unix_ms
}

#[test]
fn a_margin_the_acquire_call_cannot_wait_out_is_refused() {
    let strategy = plain();
    let config = LeaseConfig::default().with_call_timeout(Duration::from_secs(10));
    let error = strategy.check_terms(&config.terms()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    assert_eq!(
        error.to_string(),
        "a node taking over a static machine id waits the lease margin (10s) before it \
         generates, but the call timeout is 10s: raise the call timeout above the margin or \
         lower the margin"
    );
    let config = LeaseConfig::default().with_acquire_timeout(Some(Duration::from_secs(5)));
    assert!(
        strategy
            .check_terms(&config.terms())
            .unwrap_err()
            .to_string()
            .contains("but the acquire timeout is 5s")
    );
    strategy
        .check_terms(&LeaseConfig::default().terms())
        .unwrap();
}
