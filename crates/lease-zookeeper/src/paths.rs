//! The znode layout under the root, and the text forms of a floor and a guard.

use lease_core::MachineId;

/// The default root znode.
pub(crate) const DEFAULT_ROOT: &str = "/nononce";

/// The znodes of one root:
///
/// ```text
/// <root>/leases/<id>     ephemeral while held: the holder's token
/// <root>/guards/<id>     ephemeral on a session of the release guard's length, after a
///                        release: "guard <ms>"
/// <root>/floors/<id>     persistent: the ID's timestamp floor, decimal ms
/// <root>/initialized     persistent: the initialization marker
/// <root>/hold-off        persistent, during a hold-off only: its length, "hold-off <ms>"
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    root: String,
}

impl Layout {
    /// The layout under `root` (a valid absolute znode path without a trailing slash).
    pub(crate) fn new(root: &str) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    /// The root znode.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// `<root>/leases`: one child per held or guarded ID.
    pub(crate) fn leases(&self) -> String {
        format!("{}/leases", self.root)
    }

    /// `<root>/guards`: one child per ID in its release guard.
    pub(crate) fn guards(&self) -> String {
        format!("{}/guards", self.root)
    }

    /// `<root>/guards/<id>`.
    pub(crate) fn guard(&self, id: MachineId) -> String {
        format!("{}/guards/{id}", self.root)
    }

    /// `<root>/floors`: one child per ID that has a floor.
    pub(crate) fn floors(&self) -> String {
        format!("{}/floors", self.root)
    }

    /// `<root>/leases/<id>`.
    pub(crate) fn lease(&self, id: MachineId) -> String {
        format!("{}/leases/{id}", self.root)
    }

    /// `<root>/floors/<id>`.
    pub(crate) fn floor(&self, id: MachineId) -> String {
        format!("{}/floors/{id}", self.root)
    }

    /// `<root>/initialized`.
    pub(crate) fn marker(&self) -> String {
        format!("{}/initialized", self.root)
    }

    /// `<root>/hold-off`.
    pub(crate) fn hold_off(&self) -> String {
        format!("{}/hold-off", self.root)
    }
}

/// The initialization marker's data (only its presence counts).
pub(crate) const MARKER_DATA: &[u8] = b"nononce machine-id leases";

/// The machine ID a child of `<root>/leases` or `<root>/floors` names, if it names one.
pub(crate) fn child_id(name: &str) -> Option<MachineId> {
    // "7", never "07" or "+7": one name per ID.
    if name.is_empty() || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    if !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    MachineId::new(name.parse().ok()?).ok()
}

/// A floor's stored form: decimal ms.
pub(crate) fn encode_floor(ms: u64) -> Vec<u8> {
    ms.to_string().into_bytes()
}

/// A stored floor, if the data is one.
pub(crate) fn parse_floor(data: &[u8]) -> Option<u64> {
    if data.is_empty() || data.len() > 20 || !data.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(data).ok()?.parse().ok()
}

/// A guard's data: `guard <ms>`, how long the released ID stays blocked.
pub(crate) fn encode_guard(ms: u64) -> Vec<u8> {
    format!("guard {ms}").into_bytes()
}

/// A hold-off's data: `hold-off <ms>`.
pub(crate) fn encode_hold_off(ms: u64) -> Vec<u8> {
    format!("hold-off {ms}").into_bytes()
}

/// The length in a guard's or a hold-off's data (`<word> <ms>`), if it holds one.
pub(crate) fn parse_length(word: &str, data: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(data).ok()?;
    let ms = text.strip_prefix(word)?.strip_prefix(' ')?;
    parse_floor(ms.as_bytes())
}

/// Whether `root` is a znode path this crate accepts: absolute, not `/` itself (the root must
/// be a znode of its own), no trailing `/`, no empty, `.` or `..` segment, not under
/// `/zookeeper`, and none of the characters ZooKeeper refuses.
pub(crate) fn valid_root(root: &str) -> Result<(), String> {
    let Some(rest) = root.strip_prefix('/') else {
        return Err(format!("root `{root}` must start with `/`"));
    };
    if rest.is_empty() {
        return Err("root `/` is not allowed: give a znode of its own, such as /nononce".into());
    }
    if rest == "zookeeper" || rest.starts_with("zookeeper/") {
        return Err(format!(
            "root `{root}` is under /zookeeper, which ZooKeeper reserves"
        ));
    }
    for segment in rest.split('/') {
        match segment {
            "" => {
                return Err(format!(
                    "root `{root}` has an empty segment or a trailing `/`"
                ));
            }
            "." | ".." => return Err(format!("root `{root}` has a `{segment}` segment")),
            _ => {}
        }
        if segment
            .chars()
            .any(|c| c.is_control() || c == '\u{fffe}' || c == '\u{ffff}')
        {
            return Err(format!(
                "root `{root}` has a character ZooKeeper refuses in a path"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u16) -> MachineId {
        MachineId::new(n).unwrap()
    }

    #[test]
    fn layout() {
        let l = Layout::new("/nononce");
        assert_eq!(l.lease(id(7)), "/nononce/leases/7");
        assert_eq!(l.floor(id(511)), "/nononce/floors/511");
        assert_eq!(l.marker(), "/nononce/initialized");
        assert_eq!(l.hold_off(), "/nononce/hold-off");
        assert_eq!(l.leases(), "/nononce/leases");
        assert_eq!(l.floors(), "/nononce/floors");
    }

    #[test]
    fn children_name_ids_one_way() {
        assert_eq!(child_id("0"), Some(id(0)));
        assert_eq!(child_id("511"), Some(id(511)));
        for bad in ["512", "07", "+7", "", "x", "7 ", "-1"] {
            assert_eq!(child_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn stored_forms_round_trip() {
        assert_eq!(
            parse_floor(&encode_floor(1_764_950_400_000)),
            Some(1_764_950_400_000)
        );
        assert_eq!(parse_floor(&encode_floor(u64::MAX)), Some(u64::MAX));
        for bad in [&b""[..], b"12a", b"-1", b"99999999999999999999999"] {
            assert_eq!(parse_floor(bad), None);
        }
        assert_eq!(parse_length("guard", &encode_guard(10_000)), Some(10_000));
        assert_eq!(
            parse_length("hold-off", &encode_hold_off(40_000)),
            Some(40_000)
        );
        assert_eq!(parse_length("guard", b"0123abc"), None);
        assert_eq!(parse_length("guard", &encode_hold_off(1)), None);
    }

    #[test]
    fn roots() {
        for good in [
            "/nononce",
            "/a/b-c/d_e",
            "/team.ids",
            "/zookeepers/zookeeper",
        ] {
            assert_eq!(valid_root(good), Ok(()), "{good}");
        }
        for bad in [
            "nononce",
            "/",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/zookeeper/x",
        ] {
            assert!(valid_root(bad).is_err(), "{bad}");
        }
    }
}
