//! The integration tests of nonce-core, in one binary (`loom` has its own: it builds only with
//! `--cfg loom`).
//!
//! Each module is a file of `tests/`; `cargo test -p nonce-core --test integration MODULE::` runs
//! one of them.

#[macro_use]
mod common;
mod fields;
mod floor;
mod fuzz;
mod kinds;
mod sortable_handles;
mod stats;
#[cfg(feature = "uuid")]
mod uuid_v8;

// Every cipher and the std clock are used throughout these.
every_cipher! {
    #[cfg(feature = "std")]
    mod factory;
    #[cfg(all(unix, feature = "std"))]
    mod fork;
    #[cfg(feature = "std")]
    mod known_answers;
    #[cfg(feature = "std")]
    mod properties;
    #[cfg(feature = "std")]
    mod thread_cache;
}
