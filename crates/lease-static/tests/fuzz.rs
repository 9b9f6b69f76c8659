//! Fuzzing by property test: the StatefulSet variable parser and the host-list parser/matcher.
//!
//! Arbitrary strings plus structure-aware inputs (pod names with odd ordinals, node lists of
//! names and addresses in several spellings, inputs up to 1 MiB), each checked against the
//! documented rules. Cases: `NONONCE_FUZZ_CASES` (256 when unset; the 1 MiB target runs 1/64 of
//! them); `cargo xtask fuzz` runs more.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use lease_static::hosts::{match_node, parse_node_list};
use lease_static::{HostListLeaseError, StatefulSetLeaseError, StatefulSetStrategy};
use proptest::prelude::*;

const MIB: usize = 1 << 20;
/// Generous: linear work on 1 MiB takes milliseconds; anything quadratic takes hours.
const BIG_INPUT_BUDGET: Duration = Duration::from_secs(5);

/// `NONONCE_FUZZ_CASES` (default 256) cases, `1/divisor` of them for expensive inputs.
fn config(divisor: u32) -> ProptestConfig {
    let cases = std::env::var("NONONCE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases((cases / divisor).max(4))
}

/// The documented rule: offset + the value's trailing ASCII digits, if that is 0..=511.
fn expected_id(value: &str, offset: u16) -> Result<u16, Option<String>> {
    let digits = &value[value.trim_end_matches(|c: char| c.is_ascii_digit()).len()..];
    if digits.is_empty() {
        return Err(None);
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 3 {
        return Err(Some(digits.to_owned()));
    }
    let ordinal: u32 = significant.parse().unwrap_or(0);
    let id = ordinal + u32::from(offset);
    if id <= 511 {
        Ok(u16::try_from(id).unwrap())
    } else {
        Err(Some(digits.to_owned()))
    }
}

fn check_statefulset(variable: &str, value: &str, offset: u16) -> Result<(), TestCaseError> {
    let got = StatefulSetStrategy::from_value(variable, value, offset);
    match (got, expected_id(value, offset)) {
        (Ok(s), Ok(id)) => {
            prop_assert_eq!(s.machine_id().get(), id);
            prop_assert_eq!(s.variable(), variable);
        }
        (Err(e), Err(None)) => {
            prop_assert_eq!(
                &e,
                &StatefulSetLeaseError::NoTrailingDigits {
                    variable: variable.to_owned(),
                    value: value.to_owned()
                }
            );
            // The message quotes the value once, Debug-escaped (at most 6 bytes per input
            // byte, as in `\u{7f}`): bounded by the input.
            let message = e.to_string();
            prop_assert!(message.len() <= 6 * value.len() + variable.len() + 200);
        }
        (Err(e), Err(Some(digits))) => {
            prop_assert_eq!(
                &e,
                &StatefulSetLeaseError::OutOfRange {
                    variable: variable.to_owned(),
                    ordinal: digits.clone(),
                    offset
                }
            );
            prop_assert!(e.to_string().len() <= digits.len() + variable.len() + 200);
        }
        (got, expected) => {
            prop_assert!(
                false,
                "{value:?} + {offset}: got {got:?}, expected {expected:?}"
            );
        }
    }
    Ok(())
}

/// Pod-name-like values: a prefix, then digits with leading zeros, huge ordinals, Unicode
/// digits or trailing junk.
fn pod_name() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            "[a-z][a-z0-9-]{0,20}-",
            any::<String>(),
            Just(String::new()),
        ],
        prop_oneof![
            (0u32..1024).prop_map(|n| n.to_string()),
            "0{1,30}[0-9]{1,4}",
            "[0-9]{5,40}",
            Just("٣".to_owned()),
            Just("７".to_owned()),
            "[0-9]{0,3}[ \n\t-]",
            Just(String::new()),
        ],
    )
        .prop_map(|(prefix, ordinal)| format!("{prefix}{ordinal}"))
}

fn offset() -> impl Strategy<Value = u16> {
    prop_oneof![0u16..=600, any::<u16>(), Just(u16::MAX)]
}

/// The documented comparison: addresses by value, names ASCII-case-insensitively without
/// surrounding whitespace or one trailing dot; empty names match nothing.
#[derive(Debug, PartialEq, Eq)]
enum RefKey {
    Ip(IpAddr),
    Name(String),
}

fn ref_key(text: &str) -> Option<RefKey> {
    let text = text.trim();
    if let Ok(ip) = text.parse() {
        return Some(RefKey::Ip(ip));
    }
    let name = text.strip_suffix('.').unwrap_or(text);
    (!name.is_empty()).then(|| RefKey::Name(name.to_ascii_lowercase()))
}

/// How the documented rules read a node list: its entries as `(key, id, name)`, or which
/// refusal.
#[derive(Debug, PartialEq, Eq)]
enum RefRefusal {
    Empty,
    ImplicitIds(usize),
    TooMany(usize),
    Invalid(String),
    DuplicateNode(String),
    DuplicateId(String),
}

fn ref_parse(nodes: &[String]) -> Result<Vec<(RefKey, u16, String)>, RefRefusal> {
    if nodes.is_empty() {
        return Err(RefRefusal::Empty);
    }
    if !nodes.iter().any(|n| n.contains('=')) {
        let distinct: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
        return Err(if distinct.len() > 512 {
            RefRefusal::TooMany(distinct.len())
        } else {
            RefRefusal::ImplicitIds(distinct.len())
        });
    }
    let mut out: Vec<(RefKey, u16, String)> = Vec::new();
    for entry in nodes {
        let invalid = || RefRefusal::Invalid(entry.clone());
        let (name, id) = entry.split_once('=').ok_or_else(invalid)?;
        let key = ref_key(name).ok_or_else(invalid)?;
        let id = id.trim();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(invalid());
        }
        let significant = id.trim_start_matches('0');
        if significant.len() > 3 {
            return Err(invalid());
        }
        let id: u16 = significant.parse().unwrap_or(0);
        if id > 511 {
            return Err(invalid());
        }
        if out.iter().any(|(k, _, _)| *k == key) {
            return Err(RefRefusal::DuplicateNode(entry.clone()));
        }
        if out.iter().any(|(_, i, _)| *i == id) {
            return Err(RefRefusal::DuplicateId(entry.clone()));
        }
        out.push((key, id, name.trim().to_owned()));
    }
    Ok(out)
}

fn check_hosts(nodes: &[String], identifiers: &[String]) -> Result<(), TestCaseError> {
    let got = match_node(nodes, identifiers);
    let list = match ref_parse(nodes) {
        Ok(list) => list,
        Err(refusal) => {
            let got = got.expect_err("a list the rules refuse");
            // The parser alone says the same, and the message stays bounded by the input.
            prop_assert_eq!(
                parse_node_list(nodes).unwrap_err().to_string(),
                got.to_string()
            );
            let input: usize = nodes.iter().map(|n| n.len() + 1).sum();
            prop_assert!(got.to_string().len() <= 12 * input + 400);
            match (&refusal, &got) {
                (RefRefusal::Empty, HostListLeaseError::EmptyList) => {}
                (RefRefusal::TooMany(n), HostListLeaseError::TooManyNodes { count }) => {
                    prop_assert_eq!(n, count);
                }
                (RefRefusal::ImplicitIds(n), HostListLeaseError::ImplicitIds { explicit }) => {
                    prop_assert_eq!(explicit.matches('=').count(), *n);
                }
                (RefRefusal::Invalid(e), HostListLeaseError::InvalidEntry { entry, .. })
                | (
                    RefRefusal::DuplicateNode(e),
                    HostListLeaseError::DuplicateNode { second: entry, .. },
                )
                | (
                    RefRefusal::DuplicateId(e),
                    HostListLeaseError::DuplicateId { second: entry, .. },
                ) => {
                    prop_assert_eq!(e, entry);
                }
                _ => prop_assert!(false, "rules: {:?}, got: {}", refusal, got),
            }
            return Ok(());
        }
    };
    prop_assert!((1..=512).contains(&list.len()));
    let keys: Vec<RefKey> = identifiers.iter().filter_map(|i| ref_key(i)).collect();
    let mut matching: Vec<u16> = list
        .iter()
        .filter(|(k, _, _)| keys.contains(k))
        .map(|(_, id, _)| *id)
        .collect();
    matching.sort_unstable();
    match got {
        Ok(m) => {
            prop_assert_eq!(matching.as_slice(), &[m.machine_id.get()]);
            let (_, _, name) = list
                .iter()
                .find(|(_, id, _)| *id == m.machine_id.get())
                .unwrap();
            prop_assert_eq!(&m.entry, name);
            prop_assert!(identifiers.contains(&m.identifier));
            prop_assert_eq!(ref_key(&m.identifier), ref_key(&m.entry));
        }
        Err(HostListLeaseError::NoMatch {
            identifiers: echoed,
        }) => {
            prop_assert!(matching.is_empty());
            prop_assert_eq!(&echoed, identifiers);
        }
        Err(HostListLeaseError::Ambiguous { matches }) => {
            let ids: Vec<u16> = matches.iter().map(|m| m.machine_id.get()).collect();
            prop_assert_eq!(ids, matching);
        }
        Err(e) => prop_assert!(false, "unexpected error {}", e),
    }
    Ok(())
}

/// The `=ID` part of an entry: mostly valid IDs, some repeated, some out of range or not
/// numbers, some missing.
fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u16..512).prop_map(|id| format!("={id}")),
        2 => (0u16..4).prop_map(|id| format!("={id}")),
        1 => prop_oneof![
            Just("=512".to_owned()),
            Just("=".to_owned()),
            Just("=x".to_owned()),
            Just("= 007 ".to_owned()),
            Just("=-1".to_owned()),
            Just("=1=2".to_owned()),
            "=[0-9]{4,30}",
            Just(String::new()),
        ],
    ]
}

/// Entries of a node list: names of [`host_text`] with an [`id_text`].
fn entry_text() -> impl Strategy<Value = String> {
    (host_text(), id_text()).prop_map(|(name, id)| format!("{name}{id}"))
}

/// Host names and addresses in several spellings of the same few hosts, so matches, misses and
/// ambiguities all happen.
fn host_text() -> impl Strategy<Value = String> {
    let base = prop_oneof![
        Just("node-a".to_owned()),
        Just("node-b.example.com".to_owned()),
        Just("10.0.0.2".to_owned()),
        Just("2001:db8::1".to_owned()),
        Just("2001:0db8:0:0:0:0:0:1".to_owned()),
        Just("::ffff:10.0.0.2".to_owned()),
        Just("localhost".to_owned()),
        Just(String::new()),
        Just(".".to_owned()),
        "[a-z0-9.:-]{1,12}",
        any::<String>(),
    ];
    (base, 0u8..6).prop_map(|(s, spelling)| match spelling {
        0 => s.to_ascii_uppercase(),
        1 => format!("{s}."),
        2 => format!(" {s}\t"),
        3 => format!("{s}.."),
        _ => s,
    })
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn statefulset_arbitrary_values(variable in any::<String>(), value in any::<String>(), offset in offset()) {
        check_statefulset(&variable, &value, offset)?;
    }

    #[test]
    fn statefulset_pod_names(value in pod_name(), offset in offset()) {
        check_statefulset("POD_NAME", &value, offset)?;
    }

    /// Every in-range ordinal, however written, gives offset + ordinal.
    #[test]
    fn statefulset_valid_names_round_trip(prefix in "[a-z][a-z0-9-]{0,20}-", zeros in 0usize..40, ordinal in 0u16..512, offset in 0u16..512) {
        let value = format!("{prefix}{}{ordinal}", "0".repeat(zeros));
        let got = StatefulSetStrategy::from_value("POD_NAME", &value, offset).map(|s| s.machine_id().get());
        if ordinal + offset <= 511 {
            prop_assert_eq!(got, Ok(ordinal + offset));
        } else {
            let out_of_range = matches!(got, Err(StatefulSetLeaseError::OutOfRange { .. }));
            prop_assert!(out_of_range);
        }
    }

    #[test]
    fn hosts_arbitrary_lists(
        nodes in proptest::collection::vec(any::<String>(), 0..20),
        identifiers in proptest::collection::vec(any::<String>(), 0..6),
    ) {
        check_hosts(&nodes, &identifiers)?;
    }

    #[test]
    fn hosts_structured_lists(
        nodes in prop_oneof![
            proptest::collection::vec(entry_text(), 0..16),
            proptest::collection::vec(host_text(), 0..16),
        ],
        identifiers in proptest::collection::vec(host_text(), 0..5),
        rotate in any::<usize>(),
    ) {
        check_hosts(&nodes, &identifiers)?;
        // Every node may list the entries in its own order: a list is refused either way (the
        // error names the first bad entry found), and a list that is not gives each node the
        // same outcome.
        let mut rotated = nodes.clone();
        if !rotated.is_empty() {
            let len = rotated.len();
            rotated.rotate_left(rotate % len);
        }
        prop_assert_eq!(parse_node_list(&nodes).is_ok(), parse_node_list(&rotated).is_ok());
        if parse_node_list(&nodes).is_ok() {
            let a = match_node(&nodes, &identifiers).map_err(|e| e.to_string());
            let b = match_node(&rotated, &identifiers).map_err(|e| e.to_string());
            prop_assert_eq!(a, b);
        }
    }

    /// Lists around the 512-entry limit: written IDs run out at 512 entries; lists without
    /// IDs are refused with the IDs written out as long as there are enough.
    #[test]
    fn hosts_list_size_limit(distinct in 500usize..530, copies in 1usize..3, pick in any::<usize>()) {
        let names: Vec<String> = (0..distinct).map(|i| format!("n{i:04}")).collect();
        let me = names[pick % distinct].clone();
        let implicit: Vec<String> = names.iter().cycle().take(distinct * copies).cloned().collect();
        check_hosts(&implicit, std::slice::from_ref(&me))?;
        let explicit: Vec<String> = names.iter().enumerate().map(|(i, n)| format!("{n}={i}")).collect();
        check_hosts(&explicit, std::slice::from_ref(&me))?;
        let got = match_node(&explicit, &[me.as_str()]);
        if distinct <= 512 {
            prop_assert_eq!(usize::from(got.unwrap().machine_id.get()), pick % distinct);
        } else {
            let refused = matches!(got, Err(HostListLeaseError::InvalidEntry { entry, .. }) if entry == "n0512=512");
            prop_assert!(refused);
        }
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Values and lists up to 1 MiB: handled in linear time, output no larger than the input.
    #[test]
    fn huge_inputs_are_bounded(
        len in 1usize..=MIB,
        ordinal in 0u16..1024,
        unit in prop_oneof![Just('0'), Just('a'), Just(','), any::<char>()],
    ) {
        let started = Instant::now();
        let padding: String = std::iter::repeat_n(unit, len / unit.len_utf8()).collect();
        check_statefulset("POD_NAME", &padding, 0)?;
        check_statefulset("POD_NAME", &format!("{padding}{ordinal}"), 3)?;
        check_statefulset("POD_NAME", &format!("w-{}{ordinal}", "0".repeat(len)), 0)?;

        // One huge entry, and many small ones (split like the CLI's hosts: list).
        let many: Vec<String> = padding.split(',').map(str::to_owned).take(100_000).collect();
        check_hosts(&[padding.clone(), "node-a".into()], &["node-a".to_owned(), padding.clone()])?;
        check_hosts(&[format!("{padding}=1"), "node-a=0".into()], &["node-a".to_owned(), padding.clone()])?;
        check_hosts(&many, &["a".to_owned()])?;
        let numbered: Vec<String> = many.iter().enumerate().map(|(i, n)| format!("{n}={i}")).collect();
        check_hosts(&numbered, &["a".to_owned()])?;
        prop_assert!(started.elapsed() < BIG_INPUT_BUDGET, "{:?} for {} bytes", started.elapsed(), len);
    }
}

#[test]
fn thousands_of_entries_and_identifiers() {
    // 100 000 distinct entries: refused by count, not by time.
    let nodes: Vec<String> = (0..100_000).map(|i| format!("h{i}")).collect();
    let started = Instant::now();
    assert!(matches!(
        match_node(&nodes, &["h1"]),
        Err(HostListLeaseError::TooManyNodes { count: 100_000 })
    ));
    // With IDs, by the first ID out of range.
    let nodes: Vec<String> = (0..100_000).map(|i| format!("h{i}={i}")).collect();
    assert!(matches!(
        match_node(&nodes, &["h1"]),
        Err(HostListLeaseError::InvalidEntry { entry, .. }) if entry == "h512=512"
    ));
    // 512 entries against 100 000 identifiers: every entry compared with every identifier.
    let nodes: Vec<String> = (0..512).map(|i| format!("h{i}={i}")).collect();
    let identifiers: Vec<String> = (0..100_000).map(|i| format!("x{i}")).collect();
    assert!(matches!(
        match_node(&nodes, &identifiers),
        Err(HostListLeaseError::NoMatch { .. })
    ));
    assert!(
        started.elapsed() < BIG_INPUT_BUDGET * 6,
        "{:?}",
        started.elapsed()
    );
}
