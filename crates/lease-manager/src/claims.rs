//! The machine IDs that managers of deterministic strategies hold in this process.
//!
//! A deterministic strategy works the ID out from the node's own settings (an ordinal, a host
//! list entry), so two managers in one process with the same settings (two instances on one
//! ordinal, a sidecar reading the same `POD_NAME`) would both hold it, and their factories
//! would repeat each other's nonces. No store sees the second one; this table does. Managers
//! of other strategies are not entered: their store gives an ID to one holder at a time, and
//! two managers on two separate stores are no more visible here than two processes are.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use nonce_core::MachineId;

/// Per machine ID, the claim token of the manager holding it; 0 when none does.
static HOLDERS: [AtomicU64; MachineId::COUNT as usize] =
    [const { AtomicU64::new(0) }; MachineId::COUNT as usize];

/// The next claim token: one per manager, never 0.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// One manager's claim on at most one machine ID, given up on drop.
pub(crate) struct Claim {
    token: u64,
    held: Option<MachineId>,
}

impl Claim {
    pub(crate) fn new() -> Self {
        Self {
            token: NEXT_TOKEN.fetch_add(1, SeqCst),
            held: None,
        }
    }

    /// Claims `id` for this manager, giving up any other ID it held. `false` when another
    /// manager of this process holds `id`.
    pub(crate) fn claim(&mut self, id: MachineId) -> bool {
        if self.held == Some(id) {
            return true;
        }
        let slot = &HOLDERS[usize::from(id.get())];
        if slot
            .compare_exchange(0, self.token, SeqCst, SeqCst)
            .is_err()
        {
            return false;
        }
        self.give_up();
        self.held = Some(id);
        true
    }

    /// Gives up the ID this manager held, if any.
    pub(crate) fn give_up(&mut self) {
        if let Some(id) = self.held.take() {
            let _ = HOLDERS[usize::from(id.get())].compare_exchange(self.token, 0, SeqCst, SeqCst);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// What the refused manager is told.
pub(crate) fn held_elsewhere(id: MachineId) -> String {
    format!(
        "machine ID {} is already held by another lease manager in this process: two \
         managers worked out the same ID from the same settings (the same ordinal, host list \
         entry or fixed ID), and their nonces would repeat each other's; give each its own ID, \
         or share one manager (and its factories) between them",
        id.get()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_per_id_and_given_up_on_drop() {
        let id = MachineId::new(511).unwrap();
        let mut first = Claim::new();
        let mut second = Claim::new();
        assert!(first.claim(id));
        assert!(first.claim(id), "claiming again is no conflict");
        assert!(!second.claim(id));
        drop(first);
        assert!(second.claim(id));
        second.give_up();
        assert!(Claim::new().claim(id));
    }
}
