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
        "node list is empty; list every node as NAME=ID (its hostname, fqdn or address and its \
         machine id), the same on all nodes"
    )]
    EmptyList,
    /// The list gives no IDs: a node's ID would be its place in the list, which moves when an
    /// entry is inserted.
    #[error(
        "node list entries have no machine ids: an id taken from a node's place in the list moves \
         to another host when an entry is inserted, and during the rollout of the new list two \
         hosts run with it; write each entry as NAME=ID. The same list with the ids its nodes \
         use today: {explicit}"
    )]
    ImplicitIds {
        /// The list with each entry's ID written out, comma-separated.
        explicit: String,
    },
    /// The list gives no IDs and has more distinct entries than there are machine IDs.
    #[error(
        "node list has {count} distinct entries, more than the {ids} machine ids; use a dynamic \
         lease strategy for this many nodes",
        ids = MachineId::COUNT
    )]
    TooManyNodes {
        /// The number of distinct entries.
        count: usize,
    },
    /// An entry is not `NAME=ID` with an ID in `0..=511`.
    #[error(
        "node list entry {entry:?} {problem}; write each entry as NAME=ID with an id in 0..={max}, \
         for example node-a=0",
        max = MachineId::MAX
    )]
    InvalidEntry {
        /// The entry, as written.
        entry: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// Two entries name one node (names compared case-insensitively, addresses by value).
    #[error(
        "node list entries {first:?} and {second:?} name the same node; keep one entry per node"
    )]
    DuplicateNode {
        /// The earlier entry.
        first: String,
        /// The later entry.
        second: String,
    },
    /// Two entries give one machine ID.
    #[error(
        "node list entries {first:?} and {second:?} give the same machine id; give each node its \
         own id, and never give a removed node's id to another node while the removed one may \
         still run"
    )]
    DuplicateId {
        /// The earlier entry.
        first: String,
        /// The later entry.
        second: String,
    },
    /// None of this host's identifiers is in the list.
    #[error(
        "none of this host's identifiers ({}) is in the node list; add this host's name, fqdn or \
         one of its addresses, with an id no other node has, to the list shared by all nodes",
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
        .matches.iter().map(|m| format!("{:?} with id {}", m.entry, m.machine_id)).collect::<Vec<_>>().join(", ")
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
    /// The machine ID the entry gives.
    pub machine_id: MachineId,
    /// The entry's node name or address, as written in the list (without its `=ID`).
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
        let unreadable = |what| move |source| HostListLeaseError::Identifiers { what, source };
        let not_unicode =
            || io::Error::new(io::ErrorKind::InvalidData, "hostname is not valid unicode");
        let host = hostname::get()
            .and_then(|host| host.into_string().map_err(|_| not_unicode()))
            .map_err(unreadable("hostname"))?;
        let mut identifiers = vec![host.clone()];
        if self.fqdn
            && let Some(fqdn) = canonical_name(&host)
        {
            identifiers.push(fqdn);
        }
        let interfaces = if_addrs::get_if_addrs().map_err(unreadable("interface addresses"))?;
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

/// One entry of the node list: a node and the machine ID the list gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    /// The node's name or address, as written (without surrounding whitespace).
    pub node: String,
    /// Its machine ID.
    pub machine_id: MachineId,
}

/// Reads a node list of `NAME=ID` entries, every entry checked: a well-formed entry, an ID in
/// `0..=511`, no node and no ID twice (nodes compared as [`match_node`] compares them).
///
/// IDs are written in the list, never derived from an entry's place in it: inserting an entry
/// would move the IDs after it to other hosts. A list without IDs is refused with the same list
/// written out with the IDs its nodes run with today (their places in the list sorted by bytes),
/// ready to paste in.
///
/// # Errors
/// A [`HostListLeaseError`] naming the entry and the fix.
pub fn parse_node_list<S: AsRef<str>>(nodes: &[S]) -> Result<Vec<NodeEntry>, HostListLeaseError> {
    if nodes.is_empty() {
        return Err(HostListLeaseError::EmptyList);
    }
    if !nodes.iter().any(|entry| entry.as_ref().contains('=')) {
        return Err(implicit_ids(nodes));
    }
    let mut entries: Vec<(Key, &str, NodeEntry)> = Vec::with_capacity(nodes.len());
    for written in nodes {
        let written = written.as_ref();
        let invalid = |problem| HostListLeaseError::InvalidEntry {
            entry: written.to_owned(),
            problem,
        };
        let (node, id) = written
            .split_once('=')
            .ok_or_else(|| invalid("has no machine id"))?;
        let (node, id) = (node.trim(), id.trim());
        let node_key = key(node).ok_or_else(|| invalid("has no node name"))?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("has a machine id that is not a number"));
        }
        let machine_id = id
            .parse::<u16>()
            .ok()
            .and_then(|id| MachineId::new(id).ok())
            .ok_or_else(|| invalid("has a machine id above the largest"))?;
        if let Some((_, first, _)) = entries.iter().find(|(k, _, _)| *k == node_key) {
            return Err(HostListLeaseError::DuplicateNode {
                first: (*first).to_owned(),
                second: written.to_owned(),
            });
        }
        if let Some((_, first, _)) = entries.iter().find(|(_, _, e)| e.machine_id == machine_id) {
            return Err(HostListLeaseError::DuplicateId {
                first: (*first).to_owned(),
                second: written.to_owned(),
            });
        }
        let node = node.to_owned();
        entries.push((node_key, written, NodeEntry { node, machine_id }));
    }
    Ok(entries.into_iter().map(|(_, _, entry)| entry).collect())
}

/// The refusal of a list without IDs: the same list with the IDs its nodes derive from it
/// today (their indices in the list sorted by bytes and de-duplicated), ready to paste in.
fn implicit_ids<S: AsRef<str>>(nodes: &[S]) -> HostListLeaseError {
    let sorted: BTreeSet<&str> = nodes.iter().map(AsRef::as_ref).collect();
    if sorted.len() > usize::from(MachineId::COUNT) {
        return HostListLeaseError::TooManyNodes {
            count: sorted.len(),
        };
    }
    let explicit = sorted
        .iter()
        .enumerate()
        .map(|(index, node)| format!("{}={index}", node.trim()))
        .collect::<Vec<_>>()
        .join(",");
    HostListLeaseError::ImplicitIds { explicit }
}

/// Finds this host in the node list: the pure core of [`HostListStrategy`].
///
/// The list is read by [`parse_node_list`]; the machine ID is that of the one entry that
/// matches any of `identifiers`.
///
/// # Errors
/// Those of [`parse_node_list`], [`HostListLeaseError::NoMatch`], or
/// [`HostListLeaseError::Ambiguous`] when several entries match.
pub fn match_node<S: AsRef<str>, I: AsRef<str>>(
    nodes: &[S],
    identifiers: &[I],
) -> Result<NodeMatch, HostListLeaseError> {
    let list = parse_node_list(nodes)?;
    let keys: Vec<(Key, &str)> = identifiers
        .iter()
        .filter_map(|id| key(id.as_ref()).map(|k| (k, id.as_ref())))
        .collect();
    let mut matches: Vec<NodeMatch> = list
        .into_iter()
        .filter_map(|entry| {
            let entry_key = key(&entry.node)?;
            let (_, identifier) = keys.iter().find(|(k, _)| *k == entry_key)?;
            Some(NodeMatch {
                machine_id: entry.machine_id,
                entry: entry.node,
                identifier: (*identifier).to_owned(),
            })
        })
        .collect();
    // By ID, so every node reports the same, whatever its order of the list.
    matches.sort_by_key(|m| m.machine_id);
    match matches.len() {
        0 => Err(HostListLeaseError::NoMatch {
            identifiers: identifiers.iter().map(|i| i.as_ref().to_owned()).collect(),
        }),
        1 => Ok(matches.remove(0)),
        _ => Err(HostListLeaseError::Ambiguous { matches }),
    }
}

/// Machine ID = the ID a node list shared by all nodes gives this host (`NAME=ID` entries, see
/// [`parse_node_list`]). Deterministic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostListStrategy {
    matched: NodeMatch,
    floor: Option<crate::FloorFile>,
    timing: crate::Timing,
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
        // The list first: its errors do not depend on this host.
        parse_node_list(nodes)?;
        let identifiers = source.identifiers()?;
        Ok(Self {
            matched: match_node(nodes, &identifiers)?,
            floor: None,
            timing: crate::Timing::default(),
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

    const NODES: [&str; 4] = [
        "node-c=3",
        "10.0.0.2=511",
        "node-a.example.com=0",
        "node-b=7",
    ];

    fn id(nodes: &[&str], identifiers: &[&str]) -> Result<u16, HostListLeaseError> {
        match_node(nodes, identifiers).map(|m| m.machine_id.get())
    }

    /// Every pair of different hosts of `hosts` that `before` and `after` (two versions of the
    /// node list, running side by side during a rollout) give one ID: `(host under before,
    /// host under after, id)`. A list that is refused gives no ID.
    fn ids_shared_across(
        before: &[&str],
        after: &[&str],
        hosts: &[&str],
    ) -> Vec<(String, String, u16)> {
        let id_in =
            |list: &[&str], host: &str| match_node(list, &[host]).ok().map(|m| m.machine_id.get());
        let mut shared = Vec::new();
        for old in hosts {
            for new in hosts.iter().filter(|new| *new != old) {
                if let (Some(a), Some(b)) = (id_in(before, old), id_in(after, new))
                    && a == b
                {
                    shared.push(((*old).to_owned(), (*new).to_owned(), a));
                }
            }
        }
        shared
    }

    #[test]
    fn inserting_a_host_gives_no_running_id_to_another_host() {
        let hosts = ["a", "b", "c"];
        // `b` added to `[a, c]`: under the old list `c` runs with some ID; under the new one
        // no other host may get it while both lists run.
        assert_eq!(ids_shared_across(&["a", "c"], &["a", "b", "c"], &hosts), []);
        assert_eq!(
            ids_shared_across(&["a=0", "c=1"], &["a=0", "b=2", "c=1"], &hosts),
            []
        );
    }

    #[test]
    fn a_list_without_ids_is_refused_with_the_ids_it_gives_today() {
        let err = id(&["node-c", "10.0.0.2", "node-a", "node-c"], &["node-a"]).unwrap_err();
        let HostListLeaseError::ImplicitIds { explicit } = &err else {
            panic!("{err}")
        };
        // Sorted by bytes and de-duplicated, as nodes derived them.
        assert_eq!(explicit, "10.0.0.2=0,node-a=1,node-c=2");
        assert!(
            err.to_string()
                .ends_with("write each entry as NAME=ID. The same list with the ids its nodes use today: 10.0.0.2=0,node-a=1,node-c=2"),
            "{err}"
        );
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        // Pasted back in, every node keeps the ID it had.
        let explicit: Vec<&str> = explicit.split(',').collect();
        assert_eq!(id(&explicit, &["node-a"]).unwrap(), 1);
        assert_eq!(id(&explicit, &["10.0.0.2"]).unwrap(), 0);
        // More distinct entries than IDs: no list to offer.
        let nodes: Vec<String> = (0..513).map(|i| format!("node-{i:03}")).collect();
        assert!(matches!(
            match_node(&nodes, &["node-000"]),
            Err(HostListLeaseError::TooManyNodes { count: 513 })
        ));
    }

    #[test]
    fn the_id_is_the_one_written_beside_the_entry() {
        assert_eq!(id(&NODES, &["node-b", "192.168.1.9"]).unwrap(), 7);
        assert_eq!(id(&NODES, &["host", "10.0.0.2"]).unwrap(), 511);
        assert_eq!(id(&NODES, &["node-a", "node-a.example.com"]).unwrap(), 0);
        assert_eq!(id(&NODES, &["node-c"]).unwrap(), 3);
        let m = match_node(&NODES, &["x", "NODE-A.Example.com."]).unwrap();
        assert_eq!(m.entry, "node-a.example.com");
        assert_eq!(m.identifier, "NODE-A.Example.com.");
        // Whitespace around the name and the ID is not part of them.
        assert_eq!(id(&[" node-a = 5 "], &["node-a"]).unwrap(), 5);
        let list = parse_node_list(&["b=1", "a=0"]).unwrap();
        let list: Vec<_> = list
            .iter()
            .map(|e| (e.node.as_str(), e.machine_id.get()))
            .collect();
        assert_eq!(list, [("b", 1), ("a", 0)]);
    }

    #[test]
    fn malformed_entries_are_refused_by_name() {
        let message = |nodes: &[&str]| parse_node_list(nodes).unwrap_err().to_string();
        assert_eq!(
            message(&["a=0", "b"]),
            "node list entry \"b\" has no machine id; write each entry as NAME=ID with an id in \
             0..=511, for example node-a=0"
        );
        assert!(message(&["a=0", "=1"]).starts_with("node list entry \"=1\" has no node name"));
        assert!(message(&["a=0", ".=1"]).starts_with("node list entry \".=1\" has no node name"));
        for bad in ["b=", "b=x", "b=-1", "b=+1", "b=1.0", "b=1=2", "b=٣"] {
            assert!(
                message(&["a=0", bad]).starts_with(&format!(
                    "node list entry {bad:?} has a machine id that is not a number"
                )),
                "{bad}"
            );
        }
        for bad in ["b=512", "b=65536", "b=99999999999999999999"] {
            assert!(
                message(&[bad]).starts_with(&format!(
                    "node list entry {bad:?} has a machine id above the largest"
                )),
                "{bad}"
            );
        }
        assert_eq!(id(&["b=511", "a=0"], &["b"]).unwrap(), 511);
        assert_eq!(id(&["b=007"], &["b"]).unwrap(), 7);
    }

    #[test]
    fn a_node_or_an_id_given_twice_is_refused() {
        let err = parse_node_list(&["a=0", "b=1", "B.=2"]).unwrap_err();
        assert!(
            matches!(&err, HostListLeaseError::DuplicateNode { first, second } if first == "b=1" && second == "B.=2"),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "node list entries \"b=1\" and \"B.=2\" name the same node; keep one entry per node"
        );
        // The same entry twice is a node given twice too.
        for nodes in [["a=0", "a=0"], ["2001:db8::1=0", "2001:0db8:0:0:0:0:0:1=1"]] {
            let err = parse_node_list(&nodes).unwrap_err();
            assert!(
                matches!(err, HostListLeaseError::DuplicateNode { .. }),
                "{err}"
            );
        }
        let err = parse_node_list(&["a=0", "b=1", "c=01"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node list entries \"b=1\" and \"c=01\" give the same machine id; give each node its \
             own id, and never give a removed node's id to another node while the removed one may \
             still run"
        );
    }

    #[test]
    fn addresses_compare_by_value() {
        let nodes = ["2001:db8::1=4", "2001:db8::2=9"];
        assert_eq!(id(&nodes, &["2001:0db8:0:0:0:0:0:2"]).unwrap(), 9);
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
             host's name, fqdn or one of its addresses, with an id no other node has, to the list \
             shared by all nodes"
        );
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        for (nodes, identifiers) in [(&NODES[..], &[][..]), (&["a=0"], &[""])] {
            let err = id(nodes, identifiers).unwrap_err();
            assert!(matches!(err, HostListLeaseError::NoMatch { .. }), "{err}");
        }
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
                .contains("\"node-b\" with id 7, \"10.0.0.2\" with id 511"),
            "{err}"
        );
        assert!(err.to_string().contains("keep exactly one entry per host"));
    }

    #[test]
    fn an_empty_list_is_refused() {
        let err = id(&[], &["a"]).unwrap_err();
        assert!(matches!(err, HostListLeaseError::EmptyList));
        assert!(err.to_string().contains("NAME=ID"));
        // 512 entries: every ID once.
        let nodes: Vec<String> = (0..512).map(|i| format!("node-{i:03}={i}")).collect();
        assert_eq!(
            match_node(&nodes, &["node-511"]).unwrap().machine_id.get(),
            511
        );
    }

    #[test]
    fn source_is_injectable_and_its_errors_propagate() {
        let strategy = HostListStrategy::with_source(&NODES, &["node-c"]).unwrap();
        assert_eq!(strategy.machine_id().get(), 3);
        // The list is checked before this host's identifiers are read.
        assert!(matches!(
            HostListStrategy::with_source(&["a"], &Broken),
            Err(HostListLeaseError::ImplicitIds { .. })
        ));
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
        let me = format!("{host}=1");
        let strategy = HostListStrategy::new(&["some-other-host=0", me.as_str()]).unwrap();
        assert_eq!(strategy.matched().identifier, host);
        // The FQDN lookup may fail without DNS; the hostname still comes first.
        let with_fqdn = SystemIdentifiers::new().identifiers().unwrap();
        assert_eq!(with_fqdn[0], host);
    }

    proptest! {
        /// Every node of a list finds the ID written beside it, whatever order each node lists
        /// the entries in; inserting an entry with an unused ID moves no other node's ID.
        #[test]
        fn each_node_gets_its_own_id(
            names in proptest::collection::btree_set("[a-z]{1,8}", 2..40),
            ids in Just((0u16..512).collect::<Vec<_>>()).prop_shuffle(),
            seed in any::<u64>(),
        ) {
            let names: Vec<String> = names.into_iter().collect();
            let (inserted, names) = names.split_first().unwrap();
            let entries: Vec<String> =
                names.iter().zip(&ids).map(|(n, id)| format!("{n}={id}")).collect();
            let mut shuffled = entries.clone();
            let len = shuffled.len();
            shuffled.rotate_left(usize::try_from(seed % len as u64).unwrap());
            let mut edited = shuffled.clone();
            edited.insert(usize::try_from(seed % (len as u64 + 1)).unwrap(), format!("{inserted}={}", ids[len]));
            for (name, id) in names.iter().zip(&ids) {
                prop_assert_eq!(match_node(&shuffled, &[name.as_str()]).unwrap().machine_id.get(), *id);
                prop_assert_eq!(match_node(&edited, &[name.as_str()]).unwrap().machine_id.get(), *id);
            }
        }
    }
}
