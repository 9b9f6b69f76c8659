//! Generates each kind of nonce in each size and prints it with its decoded parts.
//!
//! `cargo run -p nonce-core --example tour`

use nonce_core::{Base, BootClock, Clock, Decoded, Factory, FactoryConfig, MachineId};

fn show(kind: &str, text: impl std::fmt::Display, d: Option<Decoded>) {
    match d {
        Some(d) => println!(
            "{kind:<22} {text:<34} bits={:<3} machine_id={:<3} timestamp_ms={:<12} unix_ms={} count={}",
            d.bits, d.machine_id, d.timestamp_ms, d.unix_ms, d.count
        ),
        None => println!("{kind:<22} {text:<34} (encrypted: decode after decrypting)"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A demo key; real deployments load at least 32 random bytes from a secret store.
    let base_key: Vec<u8> = (0u8..32).collect();
    let clock = BootClock::new();
    // A factory issues one kind (counter or sortable) per size: one factory for each kind,
    // declared up front. Their nonces can repeat each other's and must be kept apart.
    let config = |base| {
        FactoryConfig::new()
            .with_base_key(&base_key)
            .with_kind64(base)
            .with_kind96(base)
            .with_kind128(base)
    };
    let counters = Factory::new(clock, config(Base::Counter))?;
    let sortables = Factory::new(clock, config(Base::Sortable))?;
    // Without a lease manager the machine ID is yours to guarantee; here: 42, one hour.
    let machine_id = MachineId::new(42)?;
    for factory in [&counters, &sortables] {
        factory.enable(machine_id, clock.now_ms() + 3_600_000)?;
    }
    let epoch = counters.epoch_ms();

    let n = counters.counter64()?;
    show("counter 64", n, Some(n.decode(epoch)));
    let n = counters.counter96()?;
    show("counter 96", n, Some(n.decode(epoch)));
    let n = counters.counter128()?;
    show("counter 128", n, Some(n.decode(epoch)));
    let n = sortables.sortable64()?;
    show("sortable 64", n, Some(n.decode(epoch)));
    let n = sortables.sortable96()?;
    show("sortable 96", n, Some(n.decode(epoch)));
    let n = sortables.sortable128()?;
    show("sortable 128", n, Some(n.decode(epoch)));

    let e = counters.encrypted64(Base::Counter)?;
    show("encrypted 64 (blowfish)", e, None);
    let d = counters.decrypt64(e)?;
    show("  decrypted", d, Some(d.decode(epoch)));
    let e = sortables.encrypted96(Base::Sortable)?;
    show("encrypted 96 (blowfish)", e, None);
    let d = sortables.decrypt96(e)?;
    let inner = nonce_core::Nonce64::from_bytes(d.as_bytes()[..8].try_into()?);
    show("  decrypted (64 + tail)", d, Some(inner.decode(epoch)));
    let e = counters.encrypted128(Base::Counter)?;
    show("encrypted 128 (aes)", e, None);
    let d = counters.decrypt128(e)?;
    show("  decrypted", d, Some(d.decode(epoch)));
    println!("base64url of the last one: {}", e.base64url());
    Ok(())
}
