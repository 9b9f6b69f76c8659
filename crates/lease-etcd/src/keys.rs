//! The key layout under the prefix, and the floor's text form.

use lease_core::MachineId;

/// The default key prefix.
pub(crate) const DEFAULT_PREFIX: &str = "/nononce/leases/";
/// Floor keys live under `<prefix>floor/`.
const FLOOR_DIR: &str = "floor/";
/// The initialization marker's key, `<prefix>initialized`: on no lease, written by
/// [`StoreAdmin::migrate`](lease_core::StoreAdmin::migrate) or when a hold-off begins, and gone
/// with every other key when the prefix is deleted.
const MARKER: &str = "initialized";
/// The initialization marker's value (anything will do: only its presence counts).
pub(crate) const MARKER_VALUE: &str = "nononce machine-id leases";
/// The hold-off key, `<prefix>hold-off`: on an etcd lease of the amnesia hold-off, while it
/// exists no ID is claimed.
const HOLD_OFF: &str = "hold-off";
/// A floor is stored as exactly this many decimal digits (leading zeros), so that etcd's
/// byte-wise value comparison in a transaction orders floors as numbers.
const FLOOR_DIGITS: usize = 20;

/// The lease key of `id`: `<prefix><id>`.
pub(crate) fn lease_key(prefix: &str, id: MachineId) -> String {
    format!("{prefix}{id}")
}

/// The floor key of `id`: `<prefix>floor/<id>`.
pub(crate) fn floor_key(prefix: &str, id: MachineId) -> String {
    format!("{prefix}{FLOOR_DIR}{id}")
}

/// The initialization marker's key: `<prefix>initialized`.
pub(crate) fn marker_key(prefix: &str) -> String {
    format!("{prefix}{MARKER}")
}

/// The hold-off key: `<prefix>hold-off`.
pub(crate) fn hold_off_key(prefix: &str) -> String {
    format!("{prefix}{HOLD_OFF}")
}

/// A floor in its stored form: 20 digits with leading zeros.
pub(crate) fn encode_floor(ms: u64) -> String {
    format!("{ms:0FLOOR_DIGITS$}")
}

/// A stored floor, if the value is in the stored form.
pub(crate) fn parse_floor(value: &[u8]) -> Option<u64> {
    if value.len() != FLOOR_DIGITS || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// What a key under the prefix is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The lease key of an ID.
    Lease(MachineId),
    /// The floor key of an ID.
    Floor(MachineId),
    /// The initialization marker.
    Marker,
    /// The hold-off key.
    HoldOff,
    /// Something else (not this strategy's).
    Other,
}

/// Classifies a key returned by a prefix read.
pub(crate) fn classify(prefix: &str, key: &[u8]) -> Entry {
    let Some(rest) = key.strip_prefix(prefix.as_bytes()) else {
        return Entry::Other;
    };
    if rest == MARKER.as_bytes() {
        return Entry::Marker;
    }
    if rest == HOLD_OFF.as_bytes() {
        return Entry::HoldOff;
    }
    match rest.strip_prefix(FLOOR_DIR.as_bytes()) {
        Some(id) => parse_id(id).map_or(Entry::Other, Entry::Floor),
        None => parse_id(rest).map_or(Entry::Other, Entry::Lease),
    }
}

/// A canonical decimal machine ID (no sign, no leading zeros).
fn parse_id(text: &[u8]) -> Option<MachineId> {
    let leading_zero = text.len() > 1 && text[0] == b'0';
    if text.len() > 3 || leading_zero || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Empty text does not parse.
    MachineId::new(std::str::from_utf8(text).ok()?.parse().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u16) -> MachineId {
        MachineId::new(n).unwrap()
    }

    #[test]
    fn layout() {
        let p = "/nononce/leases/";
        assert_eq!(lease_key(p, id(7)), "/nononce/leases/7");
        assert_eq!(floor_key(p, id(511)), "/nononce/leases/floor/511");
        assert_eq!(classify(p, b"/nononce/leases/0"), Entry::Lease(id(0)));
        assert_eq!(classify(p, b"/nononce/leases/511"), Entry::Lease(id(511)));
        assert_eq!(classify(p, b"/nononce/leases/floor/3"), Entry::Floor(id(3)));
        assert_eq!(marker_key(p), "/nononce/leases/initialized");
        assert_eq!(hold_off_key(p), "/nononce/leases/hold-off");
        assert_eq!(classify(p, marker_key(p).as_bytes()), Entry::Marker);
        assert_eq!(classify(p, hold_off_key(p).as_bytes()), Entry::HoldOff);
        for other in [
            "/nononce/leases/512",
            "/nononce/leases/07",
            "/nononce/leases/-1",
            "/nononce/leases/",
            "/nononce/leases/floor/",
            "/nononce/leases/floor/x",
            "/nononce/leases/a/1",
            "/nononce/leases/floor/initialized",
            "/nononce/leases/initialized/",
            "/other/1",
        ] {
            assert_eq!(classify(p, other.as_bytes()), Entry::Other, "{other}");
        }
    }

    #[test]
    fn floors_order_as_bytes_and_as_numbers() {
        assert_eq!(encode_floor(0), "00000000000000000000");
        assert_eq!(encode_floor(u64::MAX), "18446744073709551615");
        assert_eq!(
            parse_floor(encode_floor(1_893_456_000_000).as_bytes()),
            Some(1_893_456_000_000)
        );
        assert_eq!(parse_floor(b"123"), None);
        assert_eq!(parse_floor(b"0000000000000000000x"), None);
        assert_eq!(parse_floor(b"99999999999999999999"), None);
        let max = u64::MAX;
        let values = [0, 9, 10, 999, 1_000, 1_893_456_000_000, max - 1, max];
        for a in values {
            for b in values {
                assert_eq!(encode_floor(a).cmp(&encode_floor(b)), a.cmp(&b));
            }
        }
    }
}
