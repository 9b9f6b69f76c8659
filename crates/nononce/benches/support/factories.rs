//! The factories and the baseline both facade benchmarks (`facade`, `paired`) measure.

use std::sync::atomic::{AtomicU64, Ordering};

use nononce::nonce::{Clock, Factory, ManualClock};
use nononce::{FactoryClock, FactoryOptions, FactoryOptionsExt, MachineId};

pub const KEY: [u8; 32] = [0x5a; 32];
const T0: u64 = 1_800_000_000_000;
/// As in nonce-core's benchmarks: the clock far past the generation's start, so the 64-bit
/// counter runs below its throttle, and the deadline further still.
const AHEAD_MS: u64 = 1_000_000_000;

/// A factory as the facade builds it (`FactoryOptions::new()`: thread cache on), or with
/// other options, on a manual clock set up as above. Its rows call plain and encrypted
/// 128-bit nonces on the one factory, which it therefore allows.
pub fn factory(options: FactoryOptions) -> Factory<ManualClock> {
    let f = options
        .with_base_key(KEY.to_vec().into())
        .with_plain_and_encrypted(true)
        .build(ManualClock::new(T0))
        .unwrap();
    f.enable(MachineId::new(17).unwrap(), T0 + 2 * AHEAD_MS)
        .unwrap();
    f.clock().set(T0 + AHEAD_MS);
    f
}

/// A factory as the builder makes it: `FactoryOptions` on the facade's clock (the process's
/// ticker), enabled for a day.
pub fn ticker_factory() -> Factory<FactoryClock> {
    let f = FactoryOptions::new()
        .build(FactoryClock::shared().unwrap())
        .unwrap();
    f.enable(
        MachineId::new(17).unwrap(),
        f.clock().exact_now_ms() + 24 * 3600 * 1000,
    )
    .unwrap();
    f
}

/// The baseline: one shared `fetch_add` and the 64-bit nonce's packing.
#[inline]
pub fn fetch_add_pack64(counter: &AtomicU64) -> u64 {
    let v = counter.fetch_add(1, Ordering::SeqCst) + 1;
    ((v >> 13) << 22) | (17 << 13) | (v & 0x1FFF)
}
