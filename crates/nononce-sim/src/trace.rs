//! The last events of a run, kept cheaply and formatted only when a check fails, and a
//! fingerprint of every event, so two runs of one seed can be compared exactly.

use std::collections::VecDeque;
use std::fmt::Write as _;

/// One traced event: a template whose `{a}`, `{b}` and `{c}` are the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// True time (ms).
    pub at: u64,
    /// The node, if any.
    pub node: Option<u16>,
    /// What happened.
    pub what: &'static str,
    /// First number.
    pub a: u64,
    /// Second number.
    pub b: u64,
    /// Third number.
    pub c: u64,
}

impl Entry {
    /// The entry as one line.
    #[must_use]
    pub fn line(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "{:>12} ms ", self.at);
        match self.node {
            Some(n) => {
                let _ = write!(out, "node {n:>2}: ");
            }
            None => out.push_str("        "),
        }
        let mut rest = self.what;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let value = match rest.get(i..i + 3) {
                Some("{a}") => self.a,
                Some("{b}") => self.b,
                Some("{c}") => self.c,
                _ => {
                    out.push('{');
                    rest = &rest[i + 1..];
                    continue;
                }
            };
            let _ = write!(out, "{value}");
            rest = &rest[i + 3..];
        }
        out.push_str(rest);
        out
    }
}

/// A ring of the last events and a running fingerprint of all of them.
#[derive(Debug, Clone)]
pub struct Trace {
    ring: VecDeque<Entry>,
    len: usize,
    fingerprint: u64,
    events: u64,
}

impl Trace {
    /// Keeps the last `len` events.
    #[must_use]
    pub fn new(len: usize) -> Self {
        Self {
            ring: VecDeque::with_capacity(len.max(1)),
            len: len.max(1),
            fingerprint: 0xcbf2_9ce4_8422_2325,
            events: 0,
        }
    }

    /// Records an event.
    pub fn push(&mut self, entry: Entry) {
        let mut h = self.fingerprint;
        for x in [
            entry.at,
            entry.node.map_or(u64::MAX, u64::from),
            entry.a,
            entry.b,
            entry.c,
            u64::try_from(entry.what.len()).unwrap_or(0),
        ] {
            h = (h ^ x).wrapping_mul(0x0100_0000_01b3);
            h ^= h >> 29;
        }
        for byte in entry.what.bytes().take(12) {
            h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        self.fingerprint = h;
        self.events += 1;
        if self.ring.len() == self.len {
            self.ring.pop_front();
        }
        self.ring.push_back(entry);
    }

    /// The fingerprint of every event so far.
    #[must_use]
    pub const fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// How many events were recorded.
    #[must_use]
    pub const fn events(&self) -> u64 {
        self.events
    }

    /// The last events, one per line.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        for entry in &self.ring {
            out.push_str("  ");
            out.push_str(&entry.line());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_filled() {
        let e = Entry {
            at: 5,
            node: Some(3),
            what: "enable id={a} floor={b} deadline={c} {x}",
            a: 1,
            b: 2,
            c: 3,
        };
        assert!(
            e.line()
                .ends_with("node  3: enable id=1 floor=2 deadline=3 {x}")
        );
    }

    #[test]
    fn the_fingerprint_depends_on_every_event() {
        let e = Entry {
            at: 1,
            node: None,
            what: "x",
            a: 0,
            b: 0,
            c: 0,
        };
        let mut a = Trace::new(2);
        let mut b = Trace::new(2);
        a.push(e);
        b.push(Entry { a: 1, ..e });
        assert_ne!(a.fingerprint(), b.fingerprint());
        a.push(e);
        a.push(e);
        assert_eq!(a.events(), 3);
        assert_eq!(a.render().lines().count(), 2);
    }
}
