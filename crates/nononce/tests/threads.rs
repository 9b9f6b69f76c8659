//! Factories the facade hands out scale with threads by themselves: calls on one shared
//! factory draw on blocks reserved per thread.

use std::sync::mpsc;
use std::time::Duration;

use lease_testkit::memory::MemoryStore;
use nononce::nonce::{Factory, ManualClock, NO_DEADLINE};
use nononce::prelude::*;
use nononce::{FactoryClock, LeaseConfig, MachineId};

/// This thread's counts of `op`'s nonces while another thread calls `op` between each two.
fn alternate<C: nononce::nonce::Clock + Sync>(
    f: &Factory<C>,
    op: fn(&Factory<C>) -> u64,
) -> Vec<u64> {
    let (to_other, other_rx) = mpsc::channel::<()>();
    let (to_main, main_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            while other_rx.recv().is_ok() {
                op(f);
                to_main.send(()).unwrap();
            }
        });
        let mut mine = Vec::new();
        for _ in 0..40 {
            mine.push(op(f));
            to_other.send(()).unwrap();
            main_rx.recv().unwrap();
        }
        drop(to_other);
        mine
    })
}

fn followed_on(counts: &[u64]) -> usize {
    counts.windows(2).filter(|w| w[1] == w[0] + 1).count()
}

fn count128<C: nononce::nonce::Clock>(f: &Factory<C>) -> u64 {
    f.counter128().unwrap().decode(f.epoch_ms()).count
}

fn count64<C: nononce::nonce::Clock>(f: &Factory<C>) -> u64 {
    f.counter64().unwrap().decode(f.epoch_ms()).count
}

fn encrypted_count128<C: nononce::nonce::Clock>(f: &Factory<C>) -> u64 {
    let n = f.encrypted128(Base::Counter).unwrap();
    f.decrypt128(n).unwrap().decode(f.epoch_ms()).count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_factory_gives_each_thread_its_own_block() {
    let store = MemoryStore::new();
    // Plain and encrypted 128-bit nonces from the one factory.
    let options = FactoryOptions::new()
        .with_base_key(vec![4u8; 32].into())
        .with_plain_and_encrypted(true);
    let config = LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(60))
        .with_acquire_timeout(Some(Duration::from_secs(5)));
    let nonces = crate::builder::start(&store, "ids", options, config)
        .await
        .unwrap();
    let ids: &Factory<FactoryClock> = nonces.factory("ids").unwrap();
    let (c128, e128) = tokio::task::block_in_place(|| {
        (alternate(ids, count128), alternate(ids, encrypted_count128))
    });
    // Consecutive but where this thread reserved its next block.
    assert!(followed_on(&c128) >= 30, "{c128:?}");
    assert!(followed_on(&e128) >= 30, "{e128:?}");
    nonces.shutdown().await;
}

#[test]
fn options_turn_the_thread_cache_on_unless_told_otherwise() {
    // `new()` and `default()` are one set of settings.
    assert_eq!(
        format!("{:?}", FactoryOptions::new()),
        format!("{:?}", FactoryOptions::default())
    );
    let clock = ManualClock::new(1_800_000_000_000);
    for options in [FactoryOptions::new(), FactoryOptions::default()] {
        let cached = options.build(&clock).unwrap();
        cached
            .enable(MachineId::new(1).unwrap(), NO_DEADLINE)
            .unwrap();
        assert!(followed_on(&alternate(&cached, count64)) >= 30);
        assert!(followed_on(&alternate(&cached, count128)) >= 30);
    }

    let shared = FactoryOptions::new()
        .with_thread_cache(false)
        .build(&clock)
        .unwrap();
    shared
        .enable(MachineId::new(2).unwrap(), NO_DEADLINE)
        .unwrap();
    assert_eq!(followed_on(&alternate(&shared, count64)), 0);
    assert_eq!(followed_on(&alternate(&shared, count128)), 0);
}
