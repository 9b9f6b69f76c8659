// The README's examples use the default ciphers (Blowfish and AES).
#![cfg_attr(all(feature = "aes", feature = "blowfish"), doc = include_str!("../README.md"))]
#![cfg_attr(
    not(all(feature = "aes", feature = "blowfish")),
    doc = "Unique 64, 96 and 128-bit nonces; see the README (built with the `aes` and `blowfish` features) for the guide."
)]
#![no_std]
// `deny`, not `forbid`: the fork handler's registration (src/fork.rs) is a C call, allowed
// there alone.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(test, doctest))]
extern crate std;

mod calls;
mod cipher;
mod clock;
mod error;
mod factory;
mod fork;
mod handle;
mod kind;
pub mod layout;
mod manual_clock;
mod nonce;
mod range;
mod stats;
mod sync;
#[cfg(all(feature = "std", not(loom)))]
mod thread_cache;
#[cfg(feature = "std")]
mod ticker;

pub use crate::cipher::{
    Cipher64, Cipher96, Cipher128, MIN_BASE_KEY_LEN, UnknownCipher, derive_key,
};
#[cfg(feature = "std")]
pub use crate::clock::BootClock;
pub use crate::clock::Clock;
pub use crate::error::{Error, FactoryConfigError};
pub use crate::factory::{Factory, FactoryConfig, NO_DEADLINE};
pub use crate::handle::Handle;
pub use crate::kind::Base;
pub use crate::layout::{DEFAULT_EPOCH_MS, Decoded, MAX_TIMESTAMP, OVERFLOW_WARNING_MS};
pub use crate::manual_clock::ManualClock;
pub use crate::nonce::{Nonce, Nonce64, Nonce96, Nonce128, ParseNonceError};
pub use crate::range::CounterRange;
pub use crate::stats::{GenerationStats, Generator};
#[cfg(feature = "std")]
pub use crate::ticker::{DEFAULT_TICK_PERIOD, TickerClock};
pub use machine_id::{InvalidMachineId, MachineId};
