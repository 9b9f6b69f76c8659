//! Shared test helpers.
#![allow(dead_code, reason = "each test file uses a different subset")]

pub mod servers;

pub use servers::{Mode, OwnEnsemble};
