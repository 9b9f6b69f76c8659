//! The host-list strategy: the machine ID is this host's index in a node list shared by all nodes.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;

use lease_core::{ErrorKind, LeaseError, MachineId};

/// The floor file, here too for `with_floor_file`.
pub use crate::floor_file::{FloorFile, FloorFileError};

/// Why the host-list strategy could not derive a machine ID.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostListLeaseError {
    /// The node list has no entries.
    #[error(
        "node list is empty; list every node's hostname, fqdn or address, the same on all nodes"
    )]
    EmptyList,
    /// The node list has more distinct entries than there are machine IDs.
    #[error(
        "node list has {count} distinct entries, more than the {ids} machine ids; use a dynamic \
         lease strategy for this many nodes",
        ids = MachineId::COUNT
    )]
    TooManyNodes {
        /// The number of distinct entries.
        count: usize,
    },
    /// None of this host's identifiers is in the list.
    #[error(
        "none of this host's identifiers ({}) is in the node list; add this host's name, fqdn or \
         one of its addresses to the list shared by all nodes",
        .identifiers.join(", ")
    )]
    NoMatch {
        /// This host's identifiers.
        identifiers: Vec<String>,
    },
    /// This host matches several entries, so its ID would depend on which one wins.
    #[error(
        "this host matches several node list entries ({}): each entry has its own machine id, so \
         keep exactly one entry per host (for example only its hostname)",
        .matches.iter().map(|m| format!("{:?} at index {}", m.entry, m.machine_id)).collect::<Vec<_>>().join(", ")
    )]
    Ambiguous {
        /// Every entry this host matched.
        matches: Vec<NodeMatch>,
    },
    /// This host's identifiers could not be read.
    #[error("cannot read this host's {what}")]
    Identifiers {
        /// What could not be read (hostname, interface addresses).
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl LeaseError for HostListLeaseError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Misconfigured
    }
}

/// An entry of the node list that one of this host's identifiers matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMatch {
    /// The machine ID: the entry's index in the sorted, de-duplicated list.
    pub machine_id: MachineId,
    /// The entry, as written in the list.
    pub entry: String,
    /// This host's identifier that matched it.
    pub identifier: String,
}

/// Where this host's identifiers come from; [`SystemIdentifiers`] in production, a list in tests.
pub trait IdentifierSource {
    /// This host's identifiers: names and addresses, as text.
    ///
    /// # Errors
    /// When the operating system cannot tell.
    fn identifiers(&self) -> Result<Vec<String>, HostListLeaseError>;
}

impl IdentifierSource for [&str] {
    fn identifiers(&self) -> Result<Vec<String>, HostListLeaseError> {
        Ok(self.iter().map(|&s| s.to_owned()).collect())
    }
}

impl<const N: usize> IdentifierSource for [&str; N] {
    fn identifiers(&self) -> Result<Vec<String>, HostListLeaseError> {
        self.as_slice().identifiers()
    }
}

impl IdentifierSource for Vec<String> {
    fn identifiers(&self) -> Result<Vec<String>, HostListLeaseError> {
        Ok(self.clone())
    }
}

/// This host's identifiers from the operating system: the hostname (crate `hostname`), the
/// fully qualified domain name (`getaddrinfo` with `AI_CANONNAME`, crate `dns-lookup`) and the
/// address of every non-loopback interface (crate `if-addrs`; IPv6 link-local addresses excluded).
///
/// Loopback addresses are left out on purpose: every host has `127.0.0.1`, so a list that
/// contained it would give all nodes the same ID. The FQDN lookup asks the resolver and may block
/// while it times out; if it fails the FQDN is left out (if a host's only entry is its FQDN,
/// that gives a clear no-match error, never another host's ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemIdentifiers {
    fqdn: bool,
}

impl Default for SystemIdentifiers {
    fn default() -> Self {
        Self::new()
    }
}

impl SystemIdentifiers {
    /// Hostname, FQDN and interface addresses.
    #[must_use]
    pub const fn new() -> Self {
        Self { fqdn: true }
    }

    /// Hostname and interface addresses only, skipping the resolver lookup.
    #[must_use]
    pub const fn without_fqdn() -> Self {
        Self { fqdn: false }
    }
}

#[cfg(unix)]
const AI_CANONNAME: i32 = libc::AI_CANONNAME;
// The same value in Windows' ws2def.h.
#[cfg(not(unix))]
const AI_CANONNAME: i32 = 2;

fn canonical_name(host: &str) -> Option<String> {
    let hints = dns_lookup::AddrInfoHints {
        flags: AI_CANONNAME,
        ..Default::default()
    };
    dns_lookup::getaddrinfo(Some(host), None, Some(hints))
        .ok()?
        .filter_map(Result::ok)
        .find_map(|info| info.canonname)
        .filter(|name| !name.is_empty())
}

impl IdentifierSource for SystemIdentifiers {
    fn identifiers(&self) -> Result<Vec<String>, HostListLeaseError> {
        let host = hostname::get()
            .map_err(|source| HostListLeaseError::Identifiers {
                what: "hostname",
                source,
            })?
            .into_string()
            .map_err(|_| HostListLeaseError::Identifiers {
                what: "hostname",
                source: io::Error::new(io::ErrorKind::InvalidData, "hostname is not valid unicode"),
            })?;
        let mut identifiers = vec![host.clone()];
        if self.fqdn
            && let Some(fqdn) = canonical_name(&host)
        {
            identifiers.push(fqdn);
        }
        let interfaces =
            if_addrs::get_if_addrs().map_err(|source| HostListLeaseError::Identifiers {
                what: "interface addresses",
                source,
            })?;
        identifiers.extend(
            interfaces
                .iter()
                .filter(|iface| !iface.is_loopback())
                .map(|iface| iface.ip().to_string()),
        );
        identifiers.dedup();
        Ok(identifiers)
    }
}

/// The node list as every node indexes it: sorted by bytes and de-duplicated, entries kept
/// exactly as written (the same order NoNoncense gives binaries, so mixed fleets agree).
#[must_use]
pub fn sorted_node_list<S: AsRef<str>>(nodes: &[S]) -> Vec<String> {
    let set: BTreeSet<&str> = nodes.iter().map(AsRef::as_ref).collect();
    set.into_iter().map(str::to_owned).collect()
}

/// How an entry or identifier is compared: addresses by value (`::1` = `0:0::1`), names
/// case-insensitively without a trailing dot (DNS names are case-insensitive).
#[derive(Debug, PartialEq, Eq)]
enum Key {
    Ip(IpAddr),
    Name(String),
}

fn key(text: &str) -> Option<Key> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(Key::Ip(ip));
    }
    let name = text.strip_suffix('.').unwrap_or(text);
    (!name.is_empty()).then(|| Key::Name(name.to_ascii_lowercase()))
}

/// Finds this host in the node list: the pure core of [`HostListStrategy`].
///
/// The list is sorted and de-duplicated ([`sorted_node_list`]); the machine ID is the index of the
/// one entry that matches any of `identifiers`.
///
/// # Errors
/// [`HostListLeaseError::EmptyList`], [`HostListLeaseError::TooManyNodes`] (over 512 distinct entries),
/// [`HostListLeaseError::NoMatch`], or [`HostListLeaseError::Ambiguous`] when entries at several indices match.
pub fn match_node<S: AsRef<str>, I: AsRef<str>>(
    nodes: &[S],
    identifiers: &[I],
) -> Result<NodeMatch, HostListLeaseError> {
    let list = sorted_node_list(nodes);
    if list.is_empty() {
        return Err(HostListLeaseError::EmptyList);
    }
    if list.len() > usize::from(MachineId::COUNT) {
        return Err(HostListLeaseError::TooManyNodes { count: list.len() });
    }
    let keys: Vec<(Key, &str)> = identifiers
        .iter()
        .filter_map(|id| key(id.as_ref()).map(|k| (k, id.as_ref())))
        .collect();
    let mut matches: Vec<NodeMatch> = list
        .iter()
        .enumerate()
        .filter_map(|(index, entry)| {
            let entry_key = key(entry)?;
            let (_, identifier) = keys.iter().find(|(k, _)| *k == entry_key)?;
            Some(NodeMatch {
                machine_id: MachineId::new(u16::try_from(index).ok()?).ok()?,
                entry: entry.clone(),
                identifier: (*identifier).to_owned(),
            })
        })
        .collect();
    match matches.len() {
        0 => Err(HostListLeaseError::NoMatch {
            identifiers: identifiers.iter().map(|i| i.as_ref().to_owned()).collect(),
        }),
        1 => Ok(matches.remove(0)),
        _ => Err(HostListLeaseError::Ambiguous { matches }),
    }
}

/// Machine ID = this host's index in a node list shared by all nodes. Deterministic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostListStrategy {
    matched: NodeMatch,
    floor: Option<crate::FloorFile>,
}

impl HostListStrategy {
    /// Matches this host's [`SystemIdentifiers`] against `nodes`.
    ///
    /// # Errors
    /// See [`match_node`], plus [`HostListLeaseError::Identifiers`].
    pub fn new<S: AsRef<str>>(nodes: &[S]) -> Result<Self, HostListLeaseError> {
        Self::with_source(nodes, &SystemIdentifiers::new())
    }

    /// Matches the identifiers from `source` against `nodes`.
    ///
    /// # Errors
    /// See [`match_node`], plus whatever `source` reports.
    pub fn with_source<S: AsRef<str>, I: IdentifierSource + ?Sized>(
        nodes: &[S],
        source: &I,
    ) -> Result<Self, HostListLeaseError> {
        let identifiers = source.identifiers()?;
        Ok(Self {
            matched: match_node(nodes, &identifiers)?,
            floor: None,
        })
    }

    /// The machine ID this node uses.
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.matched.machine_id
    }

    /// The list entry and identifier that matched.
    #[must_use]
    pub const fn matched(&self) -> &NodeMatch {
        &self.matched
    }
}

fixed_id_strategy!(HostListStrategy, "hosts");

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NODES: [&str; 4] = ["node-c", "10.0.0.2", "node-a.example.com", "node-b"];

    fn id(nodes: &[&str], identifiers: &[&str]) -> Result<u16, HostListLeaseError> {
        match_node(nodes, identifiers).map(|m| m.machine_id.get())
    }

    #[test]
    fn sorts_and_deduplicates_by_bytes() {
        assert_eq!(
            sorted_node_list(&["b", "a", "B", "b", "a"]),
            ["B", "a", "b"]
        );
    }

    #[test]
    fn index_in_the_sorted_list_is_the_id() {
        // Sorted: 10.0.0.2, node-a.example.com, node-b, node-c
        assert_eq!(id(&NODES, &["node-b", "192.168.1.9"]).unwrap(), 2);
        assert_eq!(id(&NODES, &["host", "10.0.0.2"]).unwrap(), 0);
        assert_eq!(id(&NODES, &["node-a", "node-a.example.com"]).unwrap(), 1);
        assert_eq!(id(&NODES, &["node-c"]).unwrap(), 3);
        let m = match_node(&NODES, &["x", "NODE-A.Example.com."]).unwrap();
        assert_eq!(m.entry, "node-a.example.com");
        assert_eq!(m.identifier, "NODE-A.Example.com.");
    }

    #[test]
    fn addresses_compare_by_value() {
        let nodes = ["2001:db8::1", "2001:db8::2"];
        assert_eq!(id(&nodes, &["2001:0db8:0:0:0:0:0:2"]).unwrap(), 1);
        assert!(matches!(
            id(&nodes, &["2001:db8::3"]),
            Err(HostListLeaseError::NoMatch { .. })
        ));
    }

    #[test]
    fn no_match_lists_the_identifiers() {
        let err = id(&NODES, &["node-z", "10.9.9.9"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "none of this host's identifiers (node-z, 10.9.9.9) is in the node list; add this \
             host's name, fqdn or one of its addresses to the list shared by all nodes"
        );
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        assert!(matches!(
            id(&NODES, &[]),
            Err(HostListLeaseError::NoMatch { .. })
        ));
        // Empty strings match nothing, not even an empty entry.
        assert!(matches!(
            id(&["", "a"], &[""]),
            Err(HostListLeaseError::NoMatch { .. })
        ));
    }

    #[test]
    fn several_matching_entries_are_ambiguous() {
        let err = id(&NODES, &["node-b", "10.0.0.2"]).unwrap_err();
        let HostListLeaseError::Ambiguous { matches } = &err else {
            panic!("{err}")
        };
        assert_eq!(matches.len(), 2);
        assert!(
            err.to_string()
                .contains("\"10.0.0.2\" at index 0, \"node-b\" at index 2")
        );
        assert!(err.to_string().contains("keep exactly one entry per host"));
        // Case variants are distinct entries with distinct indices: ambiguous too.
        assert!(matches!(
            id(&["Node-B", "node-b"], &["node-b"]),
            Err(HostListLeaseError::Ambiguous { .. })
        ));
    }

    #[test]
    fn list_size_limits() {
        assert!(matches!(
            id(&[], &["a"]),
            Err(HostListLeaseError::EmptyList)
        ));
        let nodes: Vec<String> = (0..513).map(|i| format!("node-{i:03}")).collect();
        let err = match_node(&nodes, &["node-000"]).unwrap_err();
        assert!(
            matches!(err, HostListLeaseError::TooManyNodes { count: 513 }),
            "{err}"
        );
        // Duplicates do not count against the limit.
        let mut nodes: Vec<String> = (0..512).map(|i| format!("node-{i:03}")).collect();
        nodes.extend(nodes.clone());
        assert_eq!(
            match_node(&nodes, &["node-511"]).unwrap().machine_id.get(),
            511
        );
    }

    #[test]
    fn source_is_injectable_and_its_errors_propagate() {
        let strategy = HostListStrategy::with_source(&NODES, &["node-c"]).unwrap();
        assert_eq!(strategy.machine_id().get(), 3);
        assert_eq!(strategy.matched().entry, "node-c");

        struct Broken;
        impl IdentifierSource for Broken {
            fn identifiers(&self) -> Result<Vec<String>, HostListLeaseError> {
                Err(HostListLeaseError::Identifiers {
                    what: "hostname",
                    source: io::Error::other("boom"),
                })
            }
        }
        let err = HostListStrategy::with_source(&NODES, &Broken).unwrap_err();
        assert_eq!(err.to_string(), "cannot read this host's hostname");
        assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "boom");
    }

    #[test]
    fn system_identifiers_find_this_host() {
        let identifiers = SystemIdentifiers::without_fqdn().identifiers().unwrap();
        let host = hostname::get().unwrap().into_string().unwrap();
        assert_eq!(identifiers[0], host);
        assert!(
            identifiers
                .iter()
                .all(|i| i.parse::<IpAddr>().is_ok_and(|ip| !ip.is_loopback()) || *i == host)
        );
        let strategy = HostListStrategy::new(&["some-other-host", host.as_str()]).unwrap();
        assert_eq!(strategy.matched().identifier, host);
        // The FQDN lookup may fail without DNS; the hostname still comes first.
        let with_fqdn = SystemIdentifiers::new().identifiers().unwrap();
        assert_eq!(with_fqdn[0], host);
    }

    proptest! {
        /// Every node of a list finds its own index, whatever order each node lists them in.
        #[test]
        fn each_node_gets_its_own_index(mut names in proptest::collection::btree_set("[a-z]{1,8}", 1..40), seed in any::<u64>()) {
            let sorted: Vec<String> = std::mem::take(&mut names).into_iter().collect();
            let mut shuffled = sorted.clone();
            let len = shuffled.len();
            shuffled.rotate_left(usize::try_from(seed % len as u64).unwrap());
            for (index, name) in sorted.iter().enumerate() {
                let got = match_node(&shuffled, &[name.as_str()]).unwrap().machine_id.get();
                prop_assert_eq!(usize::from(got), index);
            }
        }
    }
}
