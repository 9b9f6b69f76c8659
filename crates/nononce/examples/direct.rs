//! Nonces without leasing: `nonce-core` directly, when you guarantee the machine ID yourself.
//!
//! `cargo run -p nononce --example direct`

use nononce::nonce::{Clock, NO_DEADLINE};
use nononce::{Base, BootClock, FactoryOptions, FactoryOptionsExt, MachineId};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = BootClock::new();
    let factory = FactoryOptions::new()
        .with_base_key(vec![42u8; 32].into())
        .build(clock)?;
    // Machine ID 5, valid until told otherwise: only safe if no other node can use 5.
    factory.enable(MachineId::new(5)?, NO_DEADLINE)?;
    let handle = factory.handle(); // one per thread
    println!("{}", handle.counter64()?);
    println!("{}", handle.encrypted128()?);
    // One kind per size: this factory's 64-bit nonces are counters, so its encrypted 96-bit
    // nonces (Blowfish: a 64-bit base) are made from counters too (`Base::Sortable` would fail
    // with `KindConflict`). And plain or encrypted per size: its 64-bit nonces are plain, so
    // `encrypted64` would fail with `EncryptionConflict`.
    println!("{}", factory.encrypted96(Base::Counter)?);
    println!("now: {} ms", clock.now_ms());
    Ok(())
}
