//! Fork detection: a factory enabled before the process forked refuses to generate in the
//! child.
//!
//! `fork()` copies the whole process: an enabled factory with its machine ID, counters and
//! deadline, and the forking thread's cached blocks. Parent and child would then issue the
//! same nonces. A child handler registered with `pthread_atfork` (once, by the first
//! `enable`) adds one to a process-wide count in every child; a factory records the count it
//! was enabled under next to its machine ID, and a call that finds the count changed refuses
//! with [`Error::Forked`](crate::Error::Forked). The check is a load of a static that only
//! a fork writes: no system call per nonce.
//!
//! Without `std`, or off Unix, nothing forks the process behind the factory's back and the
//! count stays 0.

#[cfg(all(feature = "std", unix, not(loom)))]
pub(crate) use self::watched::{count, watch};

#[cfg(all(feature = "std", unix, not(loom)))]
// The one place the crate needs `unsafe`: registering the handler is a C call.
#[allow(unsafe_code)]
mod watched {
    use core::sync::atomic::{
        AtomicBool, AtomicU32,
        Ordering::{Acquire, Relaxed, Release},
    };

    use crate::error::FactoryConfigError;

    /// Forks since the handler was registered, in this process's line of descent: a parent's
    /// count never changes, a child starts at its parent's plus one.
    static FORKS: AtomicU32 = AtomicU32::new(0);

    static WATCHING: AtomicBool = AtomicBool::new(false);

    /// The process's fork count. Relaxed: the child handler runs on the child's only thread
    /// before `fork` returns there, and threads the child starts later see it through the
    /// spawn.
    #[inline]
    pub(crate) fn count() -> u32 {
        FORKS.load(Relaxed)
    }

    /// Makes sure every child of this process counts its fork; called before a factory is
    /// enabled.
    #[inline]
    pub(crate) fn watch() -> Result<(), FactoryConfigError> {
        if WATCHING.load(Acquire) {
            return Ok(());
        }
        register()
    }

    #[cold]
    fn register() -> Result<(), FactoryConfigError> {
        // Two threads may both get here and register the handler twice; a child then counts
        // two, which differs from its parent's count all the same.
        // SAFETY: `pthread_atfork` only stores the handler. The handler takes no arguments,
        // never unwinds and does one atomic add, which is async-signal-safe, as a child
        // handler of a multithreaded process must be.
        let code = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if code != 0 {
            return Err(FactoryConfigError::ForkHandler { code });
        }
        WATCHING.store(true, Release);
        Ok(())
    }

    extern "C" fn in_child() {
        FORKS.fetch_add(1, Relaxed);
    }
}

/// Nothing forks behind the factory's back: the count never changes.
#[cfg(not(all(feature = "std", unix, not(loom))))]
#[inline]
pub(crate) const fn count() -> u32 {
    0
}

#[cfg(not(all(feature = "std", unix, not(loom))))]
#[inline]
#[allow(clippy::unnecessary_wraps)] // the std build's registration can fail
pub(crate) const fn watch() -> Result<(), crate::error::FactoryConfigError> {
    Ok(())
}
