//! Exercises nonce-core in a `#![no_std]` setting without an allocator.
#![no_std]

use core::sync::atomic::{AtomicU64, Ordering};

use nonce_core::{Clock, Factory, FactoryConfig, MachineId, NO_DEADLINE};

/// A clock fed by the embedding firmware.
struct TickClock(AtomicU64);

impl Clock for TickClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

static CLOCK: TickClock = TickClock(AtomicU64::new(1_800_000_000_000));

/// Generates one 64-bit counter nonce for machine ID 1, or 0 on error.
#[unsafe(no_mangle)]
pub extern "C" fn nononce_proof_counter64() -> u64 {
    let Ok(factory) = Factory::new(&CLOCK, FactoryConfig::new()) else { return 0 };
    let Ok(id) = MachineId::new(1) else { return 0 };
    if factory.enable(id, NO_DEADLINE).is_err() {
        return 0;
    }
    factory.counter64().map(u64::from).unwrap_or(0)
}

/// Encrypts a 128-bit nonce under a fixed base key when a cipher is compiled in.
#[cfg(feature = "ciphers")]
#[unsafe(no_mangle)]
pub extern "C" fn nononce_proof_encrypted128(out: &mut [u8; 16]) -> bool {
    let key = [7u8; 32];
    let Ok(factory) = Factory::new(&CLOCK, FactoryConfig::new().with_base_key(&key)) else { return false };
    let Ok(id) = MachineId::new(2) else { return false };
    if factory.enable(id, NO_DEADLINE).is_err() {
        return false;
    }
    match factory.encrypted128(nonce_core::Base::Counter) {
        Ok(n) => {
            *out = n.to_bytes();
            true
        }
        Err(_) => false,
    }
}

/// Writes one sortable nonce of machine ID 3 as its version 8 UUID (the `uuid` feature).
#[cfg(feature = "ciphers")]
#[unsafe(no_mangle)]
pub extern "C" fn nononce_proof_sortable_uuid(out: &mut [u8; 16]) -> bool {
    let Ok(factory) = Factory::new(&CLOCK, FactoryConfig::new()) else { return false };
    let Ok(id) = MachineId::new(3) else { return false };
    if factory.enable(id, NO_DEADLINE).is_err() {
        return false;
    }
    match factory.sortable_uuid_v8() {
        Ok(uuid) => {
            *out = uuid.into_bytes();
            true
        }
        Err(_) => false,
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}
