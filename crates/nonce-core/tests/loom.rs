//! Model-checked lifecycle races: `RUSTFLAGS="--cfg loom" cargo test -p nonce-core --test loom --release`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::thread;
use nonce_core::{
    Base, Decoded, Error, Factory, FactoryConfig, MachineId, ManualClock, NO_DEADLINE, Nonce128,
};

const T0: u64 = 1_800_000_000_000;

/// A machine ID the test knows to be in range.
fn machine_id(n: u16) -> MachineId {
    MachineId::new(n).expect("test machine ids are below 512")
}

fn model(f: fn()) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        spawn(f).join().unwrap();
    });
}

/// A model thread. A factory holds its cipher key schedules inline (several KiB): give it a
/// roomy stack.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap()
}

/// Every nonce of a race with a re-enable from machine ID 1 to 2 carries the machine ID and
/// timestamp of one single generation: a returned nonce of the old generation was counted
/// before the switch, so the new generation must start past it; with none returned it may
/// start at the clock.
fn one_generation_each(all: &[Decoded], first_ts: u64) {
    let old_returned = all.iter().any(|d| d.machine_id.get() == 1);
    for d in all {
        match d.machine_id.get() {
            1 => assert_eq!(d.timestamp_ms, first_ts),
            2 if old_returned => assert!(
                d.timestamp_ms > first_ts,
                "new generation starts past the old one: {all:?}"
            ),
            2 => assert!(d.timestamp_ms >= first_ts),
            other => panic!("machine id {other}"),
        }
    }
}

/// No two of `all` are equal.
fn distinct<T: PartialEq + std::fmt::Debug>(all: &[T]) {
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            assert_ne!(all[i], all[j]);
        }
    }
}

fn factory(id: u16) -> Arc<Factory<ManualClock>> {
    let f = Factory::new(
        ManualClock::new(T0).jump_on_wait(true),
        FactoryConfig::new(),
    )
    .unwrap();
    f.enable(machine_id(id), NO_DEADLINE).unwrap();
    Arc::new(f)
}

/// A call that begins after `disable` returned fails; one that began before may succeed.
#[test]
fn no_nonce_after_disable() {
    model(|| {
        let f = factory(1);
        let disabled = Arc::new(AtomicBool::new(false));
        let (f2, d2) = (f.clone(), disabled.clone());
        let t = spawn(move || {
            f2.disable();
            d2.store(true, SeqCst);
        });
        let began_after = disabled.load(SeqCst);
        let r = f.counter64();
        if began_after {
            assert_eq!(r, Err(Error::Disabled));
        }
        t.join().unwrap();
        assert_eq!(f.counter128(), Err(Error::Disabled));
    });
}

/// Generation racing with a re-enable under another machine ID: no duplicate, and every
/// nonce carries the machine ID and timestamp of one single generation.
#[test]
fn reenable_never_mixes_generations() {
    model(|| reenable_race(|f| f.counter64().map(|n| n.decode(f.epoch_ms()))));
}

/// The same for counter96, whose common case is written out apart from the shared path.
#[test]
fn reenable_never_mixes_counter96_generations() {
    model(|| reenable_race(|f| f.counter96().map(|n| n.decode(f.epoch_ms()))));
}

/// Two calls of `make` racing a re-enable under machine ID 2, and one after it.
fn reenable_race(make: fn(&Factory<ManualClock>) -> Result<Decoded, Error>) {
    let f = factory(1);
    let f2 = f.clone();
    let t = spawn(move || {
        f2.enable(machine_id(2), NO_DEADLINE).unwrap();
    });
    let a = make(&f);
    let b = make(&f);
    t.join().unwrap();
    let c = make(&f).unwrap();
    let epoch = f.epoch_ms();
    let mut all = vec![c];
    all.extend(a.ok());
    all.extend(b.ok());
    one_generation_each(&all, T0 - epoch);
    distinct(&all);
}

/// Two handles and a renewal: values stay unique and a shortened deadline stops both.
#[test]
fn handles_and_deadline_changes() {
    model(|| {
        let f = factory(3);
        let f2 = f.clone();
        let t = spawn(move || {
            let h = f2.handle();
            let x = h.counter128();
            f2.set_deadline(0);
            (x, h.counter128())
        });
        let h = f.handle();
        let a = h.counter128();
        let (x, after) = t.join().unwrap();
        assert_eq!(after, Err(Error::LeaseExpired));
        assert_eq!(h.counter128(), Err(Error::LeaseExpired));
        if let (Ok(a), Ok(x)) = (a, x) {
            assert_ne!(a, x);
        }
    });
}

/// Racing first uses of one size with different kinds: exactly one kind wins, the other
/// call is refused naming it, and the lock holds for every later call, handles included.
#[test]
fn racing_first_uses_claim_one_kind() {
    model(|| {
        let f = factory(4);
        let f2 = f.clone();
        let t = spawn(move || f2.sortable128().map(|n| n.to_u128()));
        let h = f.handle();
        let counter = h.counter128().map(|n| n.to_u128());
        let sortable = t.join().unwrap();
        let winner = match (counter, sortable) {
            (Ok(_), Err(e)) => {
                assert_eq!(
                    e,
                    Error::KindConflict {
                        bits: 128,
                        locked: Base::Counter
                    }
                );
                Base::Counter
            }
            (Err(e), Ok(_)) => {
                assert_eq!(
                    e,
                    Error::KindConflict {
                        bits: 128,
                        locked: Base::Sortable
                    }
                );
                Base::Sortable
            }
            other => panic!("exactly one kind must win: {other:?}"),
        };
        assert_eq!(f.counter128().is_ok(), winner == Base::Counter);
        assert_eq!(f.sortable128().is_ok(), winner == Base::Sortable);
    });
}

/// Refused counter64 calls on a clock that cannot wait, racing with each other and with the
/// clock reaching the generation's start: a refusal takes no value, so the values issued are
/// exactly the first counts of that millisecond, without gaps or repeats.
#[test]
fn refused_counter64_calls_take_no_value() {
    model(|| {
        let f = Factory::new(ManualClock::new(T0), FactoryConfig::new()).unwrap();
        // A floor at the clock: the generation starts one millisecond ahead of it.
        f.enable_above(machine_id(1), T0, NO_DEADLINE).unwrap();
        let f = Arc::new(f);
        // Loom orders only its own operations; this flag, set just before the clock moves,
        // lets it run the other thread's calls before the move as well as after it.
        let moving = Arc::new(AtomicBool::new(false));
        let (f2, moving2) = (f.clone(), moving.clone());
        let t = spawn(move || {
            let a = f2.counter64();
            let _ = moving2.load(SeqCst);
            [a, f2.counter64()]
        });
        assert_eq!(f.counter64(), Err(Error::WouldBlock { until_ms: T0 + 1 }));
        moving.store(true, SeqCst);
        f.clock().set(T0 + 1);
        let mine = f.counter64();
        let mut counts = Vec::new();
        for r in t.join().unwrap().into_iter().chain([mine]) {
            match r {
                Ok(n) => {
                    let d = n.decode(f.epoch_ms());
                    assert_eq!(d.unix_ms, T0 + 1);
                    counts.push(d.count);
                }
                Err(e) => assert_eq!(e, Error::WouldBlock { until_ms: T0 + 1 }),
            }
        }
        counts.sort_unstable();
        let next = f.counter64().unwrap().decode(f.epoch_ms());
        assert_eq!(counts, (0..next.count).collect::<Vec<_>>());
        assert_eq!(next.unix_ms, T0 + 1);
    });
}

/// A fill racing with another call and `disable`: it writes every nonce, one consecutive run
/// of counts, or, refused, none.
#[test]
fn fill_encrypted128_is_all_or_nothing() {
    model(|| {
        let key = [7u8; 32];
        // Plain and encrypted 128-bit nonces side by side: the race is on the counter they share.
        let config = FactoryConfig::new()
            .with_key128(&key)
            .with_plain_and_encrypted(true);
        let f = Factory::new(ManualClock::new(T0), config).unwrap();
        f.enable(machine_id(2), NO_DEADLINE).unwrap();
        let f = Arc::new(f);
        let f2 = f.clone();
        // The counter128 call touches the fill's counter, so loom also runs the disable
        // between any two of the fill's reservations.
        let t = spawn(move || {
            let other = f2.counter128();
            f2.disable();
            other
        });
        // More than the 4096 nonces of one CTR keystream run.
        let mut out = vec![Nonce128::from_u128(0); 4097];
        let filled = f.fill_encrypted128(&mut out);
        let other = t.join().unwrap().map(|n| n.decode(f.epoch_ms()).count);
        match filled {
            Ok(()) => {
                let counts: Vec<u64> = out
                    .iter()
                    .map(|n| f.decrypt128(*n).unwrap().decode(f.epoch_ms()).count)
                    .collect();
                let first = counts[0];
                assert_eq!(counts, (first..first + 4097).collect::<Vec<_>>());
                if let Ok(other) = other {
                    assert!(!counts.contains(&other));
                }
            }
            Err(e) => {
                assert_eq!(e, Error::Disabled);
                let written = out.iter().filter(|n| n.to_u128() != 0).count();
                assert_eq!(written, 0, "a refused fill wrote {written} nonces");
            }
        }
    });
}

/// Sortable handles racing with a re-enable under another machine ID: no duplicate, and every
/// nonce carries the machine ID and timestamp of one single generation.
#[test]
fn sortable_handles_and_reenable() {
    model(|| {
        let f = factory(1);
        let f2 = f.clone();
        let t = spawn(move || {
            let h = f2.handle();
            let x = h.sortable128();
            f2.enable(machine_id(2), NO_DEADLINE).unwrap();
            x
        });
        let h = f.handle();
        let a = h.sortable128();
        let b = h.sortable128();
        let x = t.join().unwrap();
        let c = h.sortable128().unwrap();
        let epoch = f.epoch_ms();
        let mut all = vec![c];
        all.extend([a, b, x].into_iter().flatten());
        let decoded: Vec<Decoded> = all.iter().map(|n| n.decode(epoch)).collect();
        one_generation_each(&decoded, T0 - epoch);
        distinct(&all);
    });
}
