//! What a run records for its picture ([`nononce_timeline::Timeline`]), kept only when one is
//! asked for ([`crate::run_seed_with_timeline`]): a seed of a sweep records nothing. Per node,
//! its lease windows (enable to disable, exit or the deadline in force, in true time); the
//! faults with the node they hit and, for those that last, their end; the first finding of
//! each kind.

use nononce_timeline::{Fault, Finding, Mark, Timeline, Window};

use crate::check::Violation;

/// The record of one run.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    windows: Vec<Window>,
    /// Per node, its open window (an index into `windows`).
    open: Vec<Option<usize>>,
    faults: Vec<Fault>,
    marks: Vec<Mark>,
    /// The node and end of the fault being applied, as it names them.
    struck: (Option<u16>, Option<u64>),
}

impl Recorder {
    fn open_mut(&mut self, node: u16) -> Option<&mut Window> {
        let i = (*self.open.get(usize::from(node))?)?;
        self.windows.get_mut(i)
    }

    /// `node`'s factories enabled with `id` at `now` until `deadline` (true time): a window
    /// open before it ends here.
    pub(crate) fn enable(&mut self, node: u16, id: u16, now: u64, deadline: u64) {
        self.disable(node, now);
        let slot = usize::from(node);
        if self.open.len() <= slot {
            self.open.resize(slot + 1, None);
        }
        self.open[slot] = Some(self.windows.len());
        self.windows.push(Window {
            machine_id: id,
            node: u32::from(node),
            start_ms: now,
            end_ms: deadline.max(now),
        });
    }

    /// `node`'s deadline moved to `deadline` (true time).
    pub(crate) fn extend(&mut self, node: u16, deadline: u64) {
        if let Some(w) = self.open_mut(node) {
            w.end_ms = deadline.max(w.start_ms);
        }
    }

    /// `node`'s factories stopped at `now` (disabled, or its process gone): its window ends
    /// then, or at its deadline if that came first.
    pub(crate) fn disable(&mut self, node: u16, now: u64) {
        if let Some(w) = self.open_mut(node) {
            w.end_ms = w.end_ms.min(now).max(w.start_ms);
        }
        if let Some(open) = self.open.get_mut(usize::from(node)) {
            *open = None;
        }
    }

    /// The fault being applied hit `node`, and lasts until `until` (true time).
    pub(crate) fn struck(&mut self, node: Option<u16>, until: Option<u64>) {
        self.struck = (node, until);
    }

    /// The fault `kind` was applied at `now` (`None`: it found nothing to hit).
    pub(crate) fn fault(&mut self, kind: Option<&str>, now: u64) {
        let (node, until) = std::mem::take(&mut self.struck);
        if let Some(kind) = kind {
            self.faults.push(Fault {
                kind: kind.to_owned(),
                node: node.map(u32::from),
                start_ms: now,
                end_ms: until,
            });
        }
    }

    /// A check failed at `now` on a nonce of `node` with machine ID `id`: marked if it is the
    /// first of its kind.
    pub(crate) fn found(&mut self, violation: &Violation, node: u16, id: Option<u16>, now: u64) {
        let finding = match violation {
            Violation::Duplicate(_) => Finding::Duplicate,
            Violation::OutOfWindow(_) => Finding::OutOfWindow,
            Violation::Overlap(_) => Finding::Overlap,
            Violation::Unexpected(_) => Finding::Unexpected,
        };
        if self.marks.iter().all(|m| m.finding != finding) {
            self.marks.push(Mark {
                finding,
                machine_id: id,
                node: Some(u32::from(node)),
                at_ms: now,
            });
        }
    }

    /// The picture's data, the run `length_ms` long, under `title`.
    pub(crate) fn finish(self, title: String, length_ms: u64) -> Timeline {
        Timeline {
            title,
            length_ms,
            windows: self.windows,
            faults: self.faults,
            marks: self.marks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_end_at_the_disable_or_the_deadline_whichever_comes_first() {
        let mut r = Recorder::default();
        r.enable(2, 7, 100, 1_000);
        r.extend(2, 2_000);
        r.disable(2, 1_500);
        // Frozen past its deadline: the window ends at the deadline.
        r.enable(2, 7, 1_600, 3_000);
        r.disable(2, 9_000);
        r.enable(0, 1, 50, 500);
        r.struck(Some(0), Some(800));
        r.fault(Some("partition"), 400);
        r.struck(Some(1), None);
        r.fault(None, 450);
        let dup = Violation::Duplicate(String::new());
        r.found(&dup, 2, Some(7), 1_700);
        r.found(&dup, 0, Some(1), 1_800);
        let t = r.finish("t".into(), 10_000);
        let spans: Vec<_> = t
            .windows
            .iter()
            .map(|w| (w.node, w.start_ms, w.end_ms))
            .collect();
        assert_eq!(spans, [(2, 100, 1_500), (2, 1_600, 3_000), (0, 50, 500)]);
        assert_eq!(t.faults.len(), 1);
        assert_eq!((t.faults[0].node, t.faults[0].end_ms), (Some(0), Some(800)));
        assert_eq!(t.marks.len(), 1);
        assert_eq!(t.marks[0].at_ms, 1_700);
    }
}
