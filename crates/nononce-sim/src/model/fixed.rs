//! The static strategies (StatefulSet ordinal, host list): the node's ID is fixed for the
//! process, the first grant waits the margin, every acquire and renew grants the requested TTL,
//! there is nothing to release and no floor (no floor file is modelled). The ID comes from a
//! [`HostList`], read by `lease-static`'s own code.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use lease_core::time::millis;
use lease_core::{
    Acquire, ErrorKind, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};
use lease_manager::{Failure, LeaseConfig};
use lease_static::HostListLeaseError;
use lease_static::hosts::{match_node, parse_node_list};

use super::{Link, ModelLease, Request};

/// A node whose machine ID is fixed: its StatefulSet ordinal, or its entry in a [`HostList`].
///
/// As `lease-static` without a floor file: the first grant comes after the lease margin (read
/// from the manager's terms in `check_terms`), since nothing tells the node when a
/// predecessor with its ID stopped; a process whose clock never runs behind its predecessor's
/// thus starts above everything it issued.
#[derive(Debug)]
pub struct FixedModel<L> {
    link: L,
    id: MachineId,
    margin_ms: AtomicU64,
}

impl<L: Link> FixedModel<L> {
    /// The strategy of the node with machine ID `id`, waiting on `link`'s clock.
    #[must_use]
    pub fn new(link: L, id: MachineId) -> Self {
        Self {
            link,
            id,
            margin_ms: AtomicU64::new(millis(LeaseConfig::default().margin())),
        }
    }
}

/// No floor: the requests' floors are ignored and every grant reports 0.
impl<L: Link> Strategy for FixedModel<L> {
    type Lease = ModelLease;
    type Error = Failure;

    async fn acquire(&self, request: Acquire) -> Result<Grant<ModelLease>, Failure> {
        // Nothing to start above: a predecessor may have stopped just now.
        self.link
            .exchange(Request::Sleep(self.margin_ms.load(Relaxed)))
            .await
            .map_err(|e| Failure::new(ErrorKind::Other, e.to_string()))?;
        let lease = ModelLease {
            id: self.id,
            token: u128::from(self.id.get()),
        };
        Ok(Grant::new(self.id, lease, request.requested))
    }

    async fn renew(
        &self,
        lease: &ModelLease,
        request: Renew,
    ) -> Result<Renewal<ModelLease>, Failure> {
        Ok(Renewal::new(*lease, request.requested))
    }

    async fn release(&self, _lease: &ModelLease, _request: Release) -> Result<(), Failure> {
        Ok(())
    }

    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Failure> {
        self.margin_ms.store(millis(terms.margin), Relaxed);
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile::new("statefulset-model").deterministic()
    }
}

/// The node list of a static fleet, as an operator writes it and edits it.
///
/// With IDs written in the list (`NAME=ID`), an added host is given an ID no entry ever had,
/// as the operator must. Without them, the list holds names only, and a host's ID is the one
/// `lease-static`'s refusal of such a list writes out: its place in the list sorted by bytes,
/// which an inserted host moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// Entries as written: `NAME=ID`, or `NAME` without IDs.
    entries: Vec<String>,
    explicit_ids: bool,
    /// The lowest ID no entry was ever given.
    next_id: u16,
}

impl HostList {
    /// The list of `names`, the `i`-th given ID `i` (with IDs written, or by its place in the
    /// list when the names sort in the order given).
    #[must_use]
    pub fn new<S: AsRef<str>>(names: &[S], explicit_ids: bool) -> Self {
        let mut list = Self {
            entries: Vec::with_capacity(names.len()),
            explicit_ids,
            next_id: 0,
        };
        for name in names {
            list.add(name.as_ref());
        }
        list
    }

    /// Adds host `name` (written last, as an operator appends it).
    pub fn add(&mut self, name: &str) {
        if self.explicit_ids {
            self.entries.push(format!("{name}={}", self.next_id));
            self.next_id += 1;
        } else {
            self.entries.push(name.to_owned());
        }
    }

    /// Removes host `name`; whether it was listed.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|entry| entry.split_once('=').map_or(entry.as_str(), |(n, _)| n) != name);
        self.entries.len() != before
    }

    /// The entries as written.
    #[must_use]
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The machine ID host `name` runs with under this list.
    ///
    /// # Errors
    /// `lease-static`'s, when the list gives the host no ID.
    pub fn id_of(&self, name: &str) -> Result<MachineId, HostListLeaseError> {
        if self.explicit_ids {
            return match_node(&self.entries, &[name]).map(|m| m.machine_id);
        }
        match parse_node_list(&self.entries) {
            Err(HostListLeaseError::ImplicitIds { explicit }) => {
                let derived: Vec<&str> = explicit.split(',').collect();
                match_node(&derived, &[name]).map(|m| m.machine_id)
            }
            Err(e) => Err(e),
            Ok(_) => unreachable!("a list without IDs is refused"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HostList;

    fn ids(list: &HostList, names: &[&str]) -> Vec<u16> {
        names
            .iter()
            .map(|n| list.id_of(n).map(|id| id.get()).unwrap())
            .collect()
    }

    #[test]
    fn written_ids_stay_with_their_hosts_when_a_host_is_inserted() {
        let mut list = HostList::new(&["a", "c"], true);
        assert_eq!(ids(&list, &["a", "c"]), [0, 1]);
        list.add("b");
        assert_eq!(ids(&list, &["a", "b", "c"]), [0, 2, 1]);
        assert!(list.remove("b"));
        list.add("bb");
        assert_eq!(ids(&list, &["a", "bb", "c"]), [0, 3, 1]);
    }

    #[test]
    fn ids_by_place_move_when_a_host_is_inserted() {
        let mut list = HostList::new(&["a", "c"], false);
        assert_eq!(ids(&list, &["a", "c"]), [0, 1]);
        list.add("b");
        assert_eq!(ids(&list, &["a", "b", "c"]), [0, 1, 2]);
        assert!(list.remove("b"));
        assert!(!list.remove("b"));
        assert_eq!(ids(&list, &["a", "c"]), [0, 1]);
    }
}
