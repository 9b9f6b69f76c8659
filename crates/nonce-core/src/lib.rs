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

pub mod bounds;
mod calls;
mod cipher;
mod clock;
#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
mod columns;
mod error;
mod factory;
mod fork;
mod handle;
mod kind;
pub mod layout;
mod manual_clock;
mod nonce;
mod range;
#[cfg(feature = "serde")]
pub mod serde;
mod stats;
mod sync;
#[cfg(all(feature = "std", not(loom)))]
mod thread_cache;
#[cfg(feature = "std")]
mod ticker;
#[cfg(feature = "uuid")]
mod uuid_form;

pub use crate::bounds::{BoundsError, RangeEnd};
pub use crate::cipher::{
    Cipher64, Cipher96, Cipher128, MIN_BASE_KEY_LEN, UnknownCipher, derive_key,
};
#[cfg(feature = "std")]
pub use crate::clock::BootClock;
pub use crate::clock::Clock;
#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
pub use crate::columns::ColumnLengthError;
pub use crate::error::{Error, FactoryConfigError};
pub use crate::factory::{Factory, FactoryConfig, NO_DEADLINE};
pub use crate::handle::Handle;
pub use crate::kind::Base;
pub use crate::layout::{
    ComposeError, DEFAULT_EPOCH_MS, Decoded, MAX_TIMESTAMP, OVERFLOW_WARNING_MS,
};
pub use crate::manual_clock::ManualClock;
pub use crate::nonce::{Nonce, Nonce64, Nonce96, Nonce128, ParseNonceError};
pub use crate::range::CounterRange;
pub use crate::stats::{GenerationStats, Generator};
#[cfg(feature = "std")]
pub use crate::ticker::{DEFAULT_TICK_PERIOD, TickerClock};
#[cfg(feature = "uuid")]
pub use crate::uuid_form::UuidV8Error;
pub use machine_id::{InvalidMachineId, MachineId};
