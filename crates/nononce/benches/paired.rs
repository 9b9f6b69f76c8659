//! The ratios of the performance goals that compare two loops, measured in alternating
//! rounds (`nonce-core/benches/support/paired.rs` says why): the 2-thread scaling of shared
//! facade factories, handles and the nothing-shared control; the counter calls against the
//! `fetch_add` baseline; encrypted nonces against the same done by hand in one loop; and the
//! facade's sortable nonces against the peers (ferroid, `uuid`).
//!
//! `cargo xtask bench` runs this after the criterion benchmarks; it prints a table and writes
//! `<target>/paired/report.json`, which `cargo xtask bench-report` reads. Arguments: `--bench`
//! (as `cargo bench` passes it) for the full run, else a few short rounds that only show the
//! loops run (as `cargo test --benches` runs it); any other argument keeps only the rows whose
//! ID contains it (printed, not written to the report).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "support/factories.rs"]
mod factories;
#[path = "../../nonce-core/benches/support/paired.rs"]
mod paired;
// Only its timing; its criterion rows are the other benchmarks'.
#[allow(dead_code)]
#[path = "../../nonce-core/benches/support/per_thread.rs"]
mod per_thread;
use cipher::{Array, BlockCipherEncrypt, KeyInit};
use factories::{factory, fetch_add_pack64, ticker_factory};
use ferroid::generator::thread_local::Ulid;
use nononce::nonce::{Base, Cipher64, Nonce64, Nonce96, Nonce128};
use nononce::{FactoryOptions, FactoryOptionsExt};
use paired::{ROUND, Ratio, ratio};
use per_thread::per_thread;
use uuid::Uuid;

const FULL_ROUNDS: usize = 101;

/// `scaling/{name}` on the shared factory `f`, then `scaling/handle_{name}` on a handle of it
/// per thread, each calling `call`.
macro_rules! shared_and_handle {
    ($run:ident, $f:ident, $name:literal, $call:ident) => {
        $run.scaling($name, || (), |()| $f.$call().unwrap());
        $run.scaling(
            concat!("handle_", $name),
            || $f.handle(),
            |h| h.$call().unwrap(),
        );
    };
}

/// `calls` calls of `call` on this thread, timed.
fn timed<T>(call: impl Fn() -> T) -> impl FnMut(u64) -> Duration {
    move |calls| {
        let started = Instant::now();
        for _ in 0..calls {
            black_box(call());
        }
        started.elapsed()
    }
}

struct Run {
    /// `--bench`: timed rounds; else a test run, which only shows that every loop runs.
    full: bool,
    rounds: usize,
    round: Duration,
    filter: Option<String>,
    results: Vec<(String, Ratio)>,
}

impl Run {
    fn wanted(&self, id: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| id.contains(f))
    }

    fn record(&mut self, id: String, r: Ratio) {
        if !self.full {
            // Rounds of 1 ms with a thread start each measure nothing worth printing.
            println!("{id}: ran (test run, not timed; `--bench` times it)");
            return;
        }
        println!(
            "{id:<40} {:>5.2}x  (per round: median {:.2}x, quartiles {:.2}x-{:.2}x; {} rounds; \
             fastest tenth: {:.2} ns against {:.2} ns)",
            r.fastest,
            r.median,
            r.lower_quartile,
            r.upper_quartile,
            r.rounds,
            r.baseline_ns,
            r.candidate_ns
        );
        self.results.push((id, r));
    }

    /// `scaling/{name}`: 1 thread against 2 (aggregate), each thread on what `setup` gave it.
    fn scaling<S, T>(
        &mut self,
        name: &str,
        setup: impl Fn() -> S + Sync,
        call: impl Fn(&S) -> T + Sync,
    ) {
        let id = format!("scaling/{name}");
        if !self.wanted(&id) {
            return;
        }
        let r = ratio(
            self.rounds,
            self.round,
            |calls| per_thread(1, calls, &setup, &call),
            // Each of the 2 threads makes half the calls; `per_thread` returns the elapsed
            // time over the thread count, so twice that is the elapsed time of all `calls`.
            |calls: u64| per_thread(2, calls.div_ceil(2), &setup, &call) * 2,
        );
        self.record(id, r);
    }

    /// `id`: `baseline` against `call`, both on this thread.
    fn versus<B, T>(&mut self, id: &str, baseline: impl Fn() -> B, call: impl Fn() -> T) {
        if !self.wanted(id) {
            return;
        }
        let r = ratio(self.rounds, self.round, timed(baseline), timed(call));
        self.record(id.to_owned(), r);
    }

    /// `fetch_add/{name}`: the `fetch_add` baseline against `call`, both on this thread.
    fn versus_fetch_add<T>(&mut self, name: &str, call: impl Fn() -> T) {
        let counter = AtomicU64::new(0);
        self.versus(
            &format!("fetch_add/{name}"),
            || fetch_add_pack64(&counter),
            call,
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|a| a == "--bench");
    let mut run = Run {
        full,
        rounds: if full { FULL_ROUNDS } else { 3 },
        round: if full {
            ROUND
        } else {
            Duration::from_millis(1)
        },
        filter: args.iter().find(|a| !a.starts_with('-')).cloned(),
        results: Vec::new(),
    };

    // Scaling: one facade factory shared by every thread (thread cache on, as the facade
    // builds it), handles on it, a factory per thread, and the shared atomic for reference.
    let f = factory(FactoryOptions::new());
    let counter = AtomicU64::new(0);
    run.scaling("fetch_add_pack64", || (), |()| fetch_add_pack64(&counter));
    shared_and_handle!(run, f, "counter64", counter64);
    shared_and_handle!(run, f, "counter128", counter128);
    run.scaling(
        "encrypted128_aes",
        || (),
        |()| f.encrypted128(Base::Counter).unwrap(),
    );
    let own: Vec<_> = (0..2).map(|_| factory(FactoryOptions::new())).collect();
    let next_own = AtomicUsize::new(0);
    run.scaling(
        "own_factories_counter64",
        || &own[next_own.fetch_add(1, Ordering::Relaxed) % own.len()],
        |own| own.counter64().unwrap(),
    );
    // Sortable nonces on the facade's clock; the ticker runs only for these rows.
    if ["sortable96", "sortable128"]
        .iter()
        .any(|k| run.wanted(&format!("scaling/{k}")) || run.wanted(&format!("scaling/handle_{k}")))
    {
        let s = ticker_factory();
        shared_and_handle!(run, s, "sortable96", sortable96);
        shared_and_handle!(run, s, "sortable128", sortable128);
    }

    // Counter calls against `fetch_add`, returning the value as an integer as the baseline
    // does: the factory's own calls (thread cache off, the nonce-core rows), then the
    // facade's (thread cache on).
    for (prefix, f) in [
        ("", factory(FactoryOptions::new().with_thread_cache(false))),
        ("facade_", factory(FactoryOptions::new())),
    ] {
        run.versus_fetch_add(&format!("{prefix}counter64_u64"), || {
            f.counter64().map_or(0, |n| n.to_u64())
        });
        run.versus_fetch_add(&format!("{prefix}counter96_u128"), || {
            f.counter96().map_or(0, Nonce96::to_u128)
        });
        run.versus_fetch_add(&format!("{prefix}counter128_u128"), || {
            f.counter128().map_or(0, Nonce128::to_u128)
        });
    }

    // Encrypted nonces against the same done by hand in one loop: a `fetch_add`, the nonce's
    // packing and one block of the same cipher, whose input depends on the `fetch_add` as
    // the factory's does. (Criterion's separate rows of a block and of a `fetch_add`, added,
    // are cheaper than any such loop: consecutive blocks of the block row overlap in the
    // pipeline, where each block here must wait for its counter value.)
    let own = factory(
        FactoryOptions::new()
            .with_thread_cache(false)
            .with_cipher64(Cipher64::Speck),
    );
    let counter = AtomicU64::new(0);
    let aes = aes::Aes256::new_from_slice(&factories::KEY).unwrap();
    run.versus(
        "by_hand/encrypted128_aes",
        || {
            let v = counter.fetch_add(1, Ordering::SeqCst) + 1;
            let mut block =
                Array::from(((0x5a_u128 << 86) | (17 << 77) | u128::from(v)).to_be_bytes());
            // Through `black_box`, as nonce-core's block row: no call site making one nonce
            // at a time keeps the key schedule in registers.
            black_box(&aes).encrypt_block(&mut block);
            u128::from_be_bytes(block.into())
        },
        || own.encrypted128(Base::Counter).map_or(0, Nonce128::to_u128),
    );
    let speck = speck_cipher::Speck64_128::new_from_slice(&factories::KEY[..16]).unwrap();
    run.versus(
        "by_hand/encrypted64_speck",
        || {
            let mut block = Array::from(fetch_add_pack64(&counter).to_be_bytes());
            black_box(&speck).encrypt_block(&mut block);
            u64::from_be_bytes(block.into())
        },
        || own.encrypted64(Base::Counter).map_or(0, Nonce64::to_u64),
    );

    // Sortable nonces through the facade against the peers, in alternating rounds on this
    // thread (criterion measures the peers in nonce-core's run and the facade's rows in the
    // next, minutes apart): ferroid's thread-local monotonic ULID, the fastest sortable ID
    // generator we know of, and `Uuid::now_v7` with its fast RNG; each as its crate is
    // called, ours returning the `Result` as the facade's users get it.
    let peers = [
        "ferroid/sortable96",
        "ferroid/sortable128",
        "uuid/sortable96",
        "uuid/sortable128",
    ];
    if peers.iter().any(|id| run.wanted(id)) {
        let s = ticker_factory();
        let ferroid = || Ulid::new_ulid_mono(|_| std::thread::yield_now());
        run.versus("ferroid/sortable96", ferroid, || s.sortable96());
        run.versus("ferroid/sortable128", ferroid, || s.sortable128());
        run.versus("uuid/sortable96", Uuid::now_v7, || s.sortable96());
        run.versus("uuid/sortable128", Uuid::now_v7, || s.sortable128());
    }

    // A filtered run would leave the report without the other rows.
    if run.full && run.filter.is_none() {
        write_report(&run.results);
    }
}

/// `<target>/paired/report.json`, beside criterion's results (the executable is
/// `<target>/release/deps/paired-*`).
fn write_report(results: &[(String, Ratio)]) {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let Some(target) = exe.ancestors().nth(3) else {
        eprintln!("paired: no target directory above {}", exe.display());
        return;
    };
    let dir = target.join("paired");
    let report: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|(id, r)| {
            (
                id.clone(),
                serde_json::json!({
                    "fastest": r.fastest,
                    "median": r.median,
                    "lower_quartile": r.lower_quartile,
                    "upper_quartile": r.upper_quartile,
                    "rounds": r.rounds,
                    "baseline_ns": r.baseline_ns,
                    "candidate_ns": r.candidate_ns,
                }),
            )
        })
        .collect();
    let path = dir.join("report.json");
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&report).expect("a JSON map"),
        )
    });
    match written {
        Ok(()) => println!("\nwritten: {}", path.display()),
        Err(e) => eprintln!("paired: {}: {e}", path.display()),
    }
}
