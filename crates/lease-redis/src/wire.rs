//! The hash layout shared with NoNoncense: `"<id>" => token` and `"token.<id>.<token>" => "<id>"`.

use base64ct::{Base64UrlUnpadded, Encoding};
use lease_core::MachineId;

/// The hash NoNoncense uses.
pub(crate) const DEFAULT_KEY: &str = "no_noncense_leases";

/// A new lease token: 16 random bytes, base64url without padding (22 characters).
pub(crate) fn new_token() -> String {
    let mut bytes = [0u8; 16];
    rand::fill(&mut bytes);
    Base64UrlUnpadded::encode_string(&bytes)
}

/// The ownership marker field of lease `(id, token)`.
pub(crate) fn marker(id: MachineId, token: &str) -> String {
    format!("token.{id}.{token}")
}

/// The machine ID a hash field names, if it is an ID field: canonical decimal `0..=511`
/// (no sign, no leading zero). Markers (`token.…`) and foreign fields give `None`.
pub(crate) fn parse_id_field(field: &[u8]) -> Option<MachineId> {
    if field.is_empty() || field.len() > 3 || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if field.len() > 1 && field[0] == b'0' {
        return None;
    }
    let value = field
        .iter()
        .fold(0u16, |acc, digit| acc * 10 + u16::from(digit - b'0'));
    MachineId::new(value).ok()
}

/// The IDs not named by any ID field among `fields`.
pub(crate) fn free_ids<F: AsRef<[u8]>>(fields: &[F]) -> Vec<MachineId> {
    let mut taken = [false; MachineId::COUNT as usize];
    for field in fields {
        if let Some(id) = parse_id_field(field.as_ref()) {
            taken[usize::from(id.get())] = true;
        }
    }
    (0..MachineId::COUNT)
        .filter(|&id| !taken[usize::from(id)])
        .filter_map(|id| MachineId::new(id).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_22_url_safe_characters_and_differ() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 22);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(a, b);
        assert_eq!(Base64UrlUnpadded::decode_vec(&a).unwrap().len(), 16);
    }

    #[test]
    fn only_canonical_ids_in_range_are_id_fields() {
        for (field, id) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("42", Some(42)),
            ("511", Some(511)),
        ] {
            assert_eq!(parse_id_field(field.as_bytes()).map(MachineId::get), id);
        }
        for field in [
            "",
            "512",
            "1000",
            "007",
            "00",
            "-1",
            "+1",
            " 1",
            "1a",
            "token.1.abc",
            "nononce",
        ] {
            assert_eq!(parse_id_field(field.as_bytes()), None, "{field:?}");
        }
    }

    #[test]
    fn free_ids_ignore_markers_and_foreign_fields() {
        let fields = ["0", "token.0.x", "token.1.y", "2", "abc", "512", "03"];
        let free = free_ids(&fields);
        assert_eq!(free.len(), 510);
        assert_eq!(free[0].get(), 1);
        assert_eq!(free[1].get(), 3);
    }

    #[test]
    fn marker_layout_matches_nononcense() {
        let id = MachineId::new(17).unwrap();
        assert_eq!(marker(id, "abc"), "token.17.abc");
    }
}
