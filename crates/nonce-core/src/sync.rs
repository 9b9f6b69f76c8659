//! Atomics, swapped for loom's under `--cfg loom` so the model checker sees every access.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicU64;

pub(crate) use core::sync::atomic::Ordering::{Relaxed, SeqCst};

/// Keeps a hot counter on its own cache line so that counters written by different threads do
/// not invalidate each other or the read-mostly state.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
