//! The builder wires factories to a lease: they follow it on, off and on again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_testkit::memory::{MemoryStore, MemoryStrategy};
use nononce::nonce::Error as NonceError;
use nononce::prelude::*;
use nononce::{Builder, Cipher128, Error, LeaseConfig};

/// `options` as the one factory, `name`, started on `store` with `config`.
pub async fn start(
    store: &MemoryStore,
    name: &str,
    options: FactoryOptions,
    config: LeaseConfig,
) -> Result<Nononce<MemoryStrategy>, Error> {
    Nononce::builder(store.strategy())
        .with_factory(name, options)
        .with_lease_config(config)
        .start()
        .await
}

fn quick_config() -> LeaseConfig {
    LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(4))
        .with_renew_interval(Duration::from_secs(1))
        .with_min_ttl(Duration::from_secs(2))
        .with_margin(Duration::from_millis(500))
        .with_acquire_timeout(Some(Duration::from_secs(5)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_generate_lose_and_recover_shutdown() {
    let store = MemoryStore::new();
    let losses = Arc::new(Mutex::new(Vec::new()));
    let seen = losses.clone();
    let nonces = Nononce::builder(store.strategy())
        .with_factory("ids", FactoryOptions::new())
        .with_factory(
            "ivs",
            FactoryOptions::new()
                .with_base_key(vec![1u8; 32].into())
                .with_cipher128(Cipher128::Speck),
        )
        .with_lease_config(quick_config())
        .with_on_lease_lost(move |reason| seen.lock().unwrap().push(reason.to_string()))
        .start()
        .await
        .unwrap();
    let id = nonces.machine_id().expect("lease held after start");
    let ids = nonces.factory("ids").unwrap();
    let ivs = nonces.factory("ivs").unwrap();
    assert_eq!(
        ids.counter64().unwrap().decode(ids.epoch_ms()).machine_id,
        id
    );
    let iv = ivs.encrypted128(Base::Counter).unwrap();
    assert_eq!(
        ivs.decrypt128(iv)
            .unwrap()
            .decode(ivs.epoch_ms())
            .machine_id,
        id
    );
    assert_eq!(nonces.factories().count(), 2);

    // An outside signal (a conflict guard, say): factories stop, the callback runs, and a new
    // lease brings them back.
    nonces.lease_lost("duplicate machine id seen on a peer");
    let mut recovered = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !losses.lock().unwrap().is_empty() && ids.counter64().is_ok() {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "factories re-enabled under a new lease");
    assert!(losses.lock().unwrap()[0].contains("duplicate machine id"));

    let (ids, ivs) = (ids.clone(), ivs.clone());
    nonces.shutdown().await;
    assert_eq!(ids.counter64(), Err(NonceError::Disabled));
    assert_eq!(ivs.sortable128(), Err(NonceError::Disabled));
}

#[tokio::test]
async fn configuration_errors_are_reported_before_any_lease() {
    let store = MemoryStore::new();
    let refused = |builder: Builder<_>| async move { builder.start().await.err().unwrap() };
    let err = refused(Nononce::builder(store.strategy())).await;
    assert!(matches!(err, Error::NoFactory), "{err}");
    let err = refused(
        Nononce::builder(store.strategy())
            .with_factory("a", FactoryOptions::new())
            .with_factory("a", FactoryOptions::new()),
    )
    .await;
    assert!(
        matches!(err, Error::DuplicateFactory(ref n) if n == "a"),
        "{err}"
    );
    let short = FactoryOptions::new().with_base_key(vec![0u8; 8].into());
    let err = refused(Nononce::builder(store.strategy()).with_factory("short", short)).await;
    assert!(err.to_string().contains("short"), "{err}");
    assert_eq!(store.held(), 0);
}

#[tokio::test]
async fn no_lease_in_time_fails_start() {
    let store = MemoryStore::new().with_capacity(1);
    let _holder = start(&store, "a", FactoryOptions::new(), quick_config())
        .await
        .unwrap();
    let short_wait = quick_config().with_acquire_timeout(Some(Duration::from_millis(400)));
    let err = start(&store, "b", FactoryOptions::new(), short_wait)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::Lease(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_options_declare_one_kind_per_size() {
    let store = MemoryStore::new();
    let sorted = FactoryOptions::new()
        .with_kind64(Base::Sortable)
        .with_kind128(Base::Sortable);
    let nonces = start(&store, "sorted", sorted, quick_config())
        .await
        .unwrap();
    let sorted = nonces.factory("sorted").unwrap();
    // Declared sortable: the counter kind is refused from the very first call.
    assert!(matches!(
        sorted.counter64(),
        Err(NonceError::KindConflict { bits: 64, .. })
    ));
    assert!(sorted.sortable64().is_ok());
    assert!(matches!(
        sorted.counter128(),
        Err(NonceError::KindConflict { bits: 128, .. })
    ));
    // Undeclared sizes are fixed by their first call.
    assert!(sorted.counter96().is_ok());
    assert!(matches!(
        sorted.sortable96(),
        Err(NonceError::KindConflict { bits: 96, .. })
    ));
    nonces.shutdown().await;
}
