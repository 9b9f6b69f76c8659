//! The picture of one run of nononce's fleet simulation or chaos harness, as SVG.
//!
//! A [`Timeline`] is what a run recorded, in milliseconds from its start: every lease window a
//! node held ([`Window`]: a machine ID, the node, when its factories were enabled and when they
//! stopped), the faults injected ([`Fault`]: a kind, the node it hit if one, a start and, for
//! faults that last, an end) and the first finding of each kind ([`Mark`]: a duplicate, a
//! nonce outside its window, ...). [`Timeline::svg`] draws it: one lane per machine ID the run
//! used, each window a bar coloured by its node, each fault a shaded band across every lane
//! labelled with its kind above the lanes, each finding a red line and marker on its lane,
//! the time of the run (s) along the bottom and a legend for the nodes, the fault kinds and
//! the findings below it.
//!
//! `nononce-sim` and `nononce-chaos` fill it from what they record; `--report DIR` on
//! `cargo xtask sim` and `cargo xtask chaos` writes one picture per backend, named by
//! [`report_path`]. Nothing is recorded for it unless a picture is asked for.
//!
//! ```
//! use nononce_timeline::{Fault, Finding, Mark, Timeline, Window};
//!
//! let timeline = Timeline {
//!     title: "example: two nodes, one partition".into(),
//!     length_ms: 10_000,
//!     windows: vec![
//!         Window { machine_id: 3, node: 0, start_ms: 0, end_ms: 6_000 },
//!         Window { machine_id: 3, node: 1, start_ms: 5_500, end_ms: 10_000 },
//!     ],
//!     faults: vec![Fault {
//!         kind: "partition".into(),
//!         node: Some(0),
//!         start_ms: 2_000,
//!         end_ms: Some(6_000),
//!     }],
//!     marks: vec![Mark {
//!         finding: Finding::Duplicate,
//!         machine_id: Some(3),
//!         node: Some(1),
//!         at_ms: 5_800,
//!     }],
//! };
//! let svg = timeline.svg().unwrap();
//! assert!(svg.contains("id 3"));
//! assert!(svg.contains("first duplicate: id 3, node 1 at 5.8 s"));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A lease window: the factories of `node` enabled with `machine_id` from `start_ms` until
/// `end_ms` (their disable, or the deadline they were last given, whichever came first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The machine ID.
    pub machine_id: u16,
    /// The node that held it.
    pub node: u32,
    /// When the factories were enabled (ms from the run's start).
    pub start_ms: u64,
    /// When they stopped allowing nonces (ms from the run's start).
    pub end_ms: u64,
}

/// A fault injected into the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What it was, in the run's own words (`partition`, `coordinator`, `clock_step`, ...):
    /// faults of one kind share a colour.
    pub kind: String,
    /// The node it hit, if it hit one.
    pub node: Option<u32>,
    /// When it began (ms from the run's start).
    pub start_ms: u64,
    /// When it was healed, for a fault that lasts; `None` for one that happens at an instant
    /// (a kill, a clock step, a wipe).
    pub end_ms: Option<u64>,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Finding {
    /// A value issued twice.
    Duplicate,
    /// A nonce outside every window its node held.
    OutOfWindow,
    /// Two holders of one machine ID whose timestamps overlap (the hazard behind a duplicate).
    Overlap,
    /// A factory error that should be impossible.
    Unexpected,
}

impl Finding {
    /// The finding in words.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::OutOfWindow => "out of window",
            Self::Overlap => "overlapping holders",
            Self::Unexpected => "unexpected error",
        }
    }
}

/// The first finding of its kind: where and when the run first went wrong that way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// What was found.
    pub finding: Finding,
    /// The machine ID of the nonce (its lane), if known.
    pub machine_id: Option<u16>,
    /// The node that issued it, if known.
    pub node: Option<u32>,
    /// When (ms from the run's start).
    pub at_ms: u64,
}

impl Mark {
    /// The text beside the marker: `first duplicate: id 3, node 1 at 5.8 s`.
    #[must_use]
    pub fn label(&self) -> String {
        let mut out = format!("first {}:", self.finding.name());
        if let Some(id) = self.machine_id {
            out.push_str(&format!(" id {id},"));
        }
        if let Some(node) = self.node {
            out.push_str(&format!(" node {node}"));
        }
        let out = out.trim_end_matches(',');
        format!("{out} at {} s", seconds(self.at_ms))
    }
}

/// One run's record, ready to draw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The caption: which run, which backend, which seed.
    pub title: String,
    /// How long the run lasted (ms): the time axis ends there.
    pub length_ms: u64,
    /// Every lease window.
    pub windows: Vec<Window>,
    /// Every fault.
    pub faults: Vec<Fault>,
    /// The first finding of each kind (none for a run that passed).
    pub marks: Vec<Mark>,
}

/// A picture that could not be drawn or written.
#[derive(Debug)]
pub enum DrawError {
    /// The drawing library refused (a bug in the layout: please report it with the run).
    Draw(String),
    /// The file could not be written.
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for DrawError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Draw(e) => write!(f, "drawing the timeline failed: {e}"),
            Self::Write { path, source } => write!(
                f,
                "writing the timeline to {} failed: {source}; check that the folder given to \
                 --report can be created and written",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DrawError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Draw(_) => None,
            Self::Write { source, .. } => Some(source),
        }
    }
}

/// Where `--report DIR` puts the picture of `command`'s run on `backend`:
/// `DIR/<command>-<backend>.svg`.
///
/// ```
/// # use std::path::Path;
/// let path = nononce_timeline::report_path(Path::new("out"), "chaos", "redis8");
/// assert_eq!(path, Path::new("out/chaos-redis8.svg"));
/// ```
#[must_use]
pub fn report_path(dir: &Path, command: &str, backend: &str) -> PathBuf {
    dir.join(format!("{command}-{backend}.svg"))
}

/// `ms` as seconds with one decimal.
fn seconds(ms: u64) -> String {
    format!("{}.{}", ms / 1000, ms % 1000 / 100)
}

// Layout, in pixels. Text sizes are given as plotters takes them (it writes size / 1.24).
const WIDTH: u32 = 1200;
const ROW: i32 = 22;
const CAPTION: i32 = 34;
const AXIS: i32 = 44;
const LANE_LABELS: i32 = 64;
const RIGHT: i32 = 24;
const LEGEND_ROW: i32 = 20;
const TEXT: f64 = 15.0;
const SMALL: f64 = 13.5;
/// A generous width of one character of `TEXT`, for laying labels out without overlaps.
const CHAR_PX: i32 = 7;
/// Fault label rows above the lanes; labels that fit in none are left to the legend.
const MAX_FAULT_ROWS: usize = 4;
/// The narrowest band a fault of an instant is drawn as.
const INSTANT_PX: i32 = 3;

/// Node colours: distinct, none of them the findings' red.
const NODE_COLOURS: [(u8, u8, u8); 16] = [
    (78, 121, 167),
    (242, 142, 43),
    (89, 161, 79),
    (176, 122, 161),
    (118, 183, 178),
    (237, 201, 72),
    (156, 117, 95),
    (255, 157, 167),
    (31, 119, 180),
    (140, 86, 75),
    (23, 190, 207),
    (188, 189, 34),
    (127, 127, 127),
    (148, 103, 189),
    (44, 160, 44),
    (186, 176, 172),
];

/// Fault kind colours, drawn translucent behind the windows.
const FAULT_COLOURS: [(u8, u8, u8); 12] = [
    (106, 61, 154),
    (255, 127, 0),
    (31, 120, 180),
    (51, 160, 44),
    (177, 89, 40),
    (227, 26, 200),
    (0, 150, 150),
    (120, 120, 0),
    (90, 90, 90),
    (200, 160, 0),
    (0, 80, 160),
    (160, 0, 80),
];

const FINDING: RGBColor = RGBColor(214, 39, 40);
const BAND_ALPHA: f64 = 0.13;

fn node_colour(node: u32) -> RGBColor {
    let (r, g, b) = NODE_COLOURS[node as usize % NODE_COLOURS.len()];
    RGBColor(r, g, b)
}

/// `colour` darkened, for text on white.
fn darker(colour: RGBColor) -> RGBColor {
    let dim = |c: u8| u8::try_from(u16::from(c) * 3 / 5).unwrap_or(c);
    RGBColor(dim(colour.0), dim(colour.1), dim(colour.2))
}

fn text_width(text: &str) -> i32 {
    i32::try_from(text.chars().count())
        .unwrap_or(i32::MAX / CHAR_PX)
        .saturating_mul(CHAR_PX)
}

fn draw_error(e: impl fmt::Display) -> DrawError {
    DrawError::Draw(e.to_string())
}

/// A fault's label and where it goes: its row above the lanes, if one has room.
struct Placed {
    text: String,
    row: Option<usize>,
}

impl Timeline {
    /// The machine IDs the run used, lowest first: those of its windows and its findings.
    #[must_use]
    pub fn lanes(&self) -> Vec<u16> {
        let ids: BTreeSet<u16> = self
            .windows
            .iter()
            .map(|w| w.machine_id)
            .chain(self.marks.iter().filter_map(|m| m.machine_id))
            .collect();
        ids.into_iter().collect()
    }

    /// The run's length in ms: `length_ms`, or the latest time recorded if that is later.
    fn span_ms(&self) -> u64 {
        let windows = self.windows.iter().map(|w| w.end_ms.max(w.start_ms));
        let faults = self
            .faults
            .iter()
            .map(|f| f.end_ms.unwrap_or(f.start_ms).max(f.start_ms));
        let marks = self.marks.iter().map(|m| m.at_ms);
        windows
            .chain(faults)
            .chain(marks)
            .fold(self.length_ms, u64::max)
            .max(1)
    }

    /// The picture as an SVG document.
    ///
    /// # Errors
    /// The drawing library refused (not expected: every size is bounded).
    #[allow(clippy::cast_precision_loss)] // coordinates: ms to pixels
    #[allow(clippy::too_many_lines)] // one picture, drawn layer by layer
    pub fn svg(&self) -> Result<String, DrawError> {
        let lanes = self.lanes();
        let lane_of: BTreeMap<u16, usize> =
            lanes.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let span = self.span_ms();
        let plot_width = i32::try_from(WIDTH).unwrap_or(1200) - LANE_LABELS - RIGHT;
        let to_px = |ms: u64| -> i32 {
            let x = ms.min(span) as f64 / span as f64 * f64::from(plot_width);
            // Within the plot's width: the conversion cannot overflow.
            #[allow(clippy::cast_possible_truncation)]
            let x = x.round() as i32;
            x
        };

        // Fault colours by kind, in order of name; labels packed into rows above the lanes.
        let kinds: BTreeSet<&str> = self.faults.iter().map(|f| f.kind.as_str()).collect();
        let kind_colour: BTreeMap<&str, RGBColor> = kinds
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let (r, g, b) = FAULT_COLOURS[i % FAULT_COLOURS.len()];
                (k, RGBColor(r, g, b))
            })
            .collect();
        let mut faults: Vec<&Fault> = self.faults.iter().collect();
        faults.sort_by_key(|f| (f.start_ms, f.kind.as_str()));
        let mut row_ends: Vec<i32> = Vec::new();
        let placed: Vec<Placed> = faults
            .iter()
            .map(|f| {
                let text = match f.node {
                    Some(node) => format!("{} n{node}", f.kind),
                    None => f.kind.clone(),
                };
                let x = to_px(f.start_ms);
                let end = x + text_width(&text);
                let row = match row_ends.iter().position(|&e| e + 6 <= x) {
                    Some(r) => Some(r),
                    None if row_ends.len() < MAX_FAULT_ROWS && end <= plot_width + RIGHT => {
                        row_ends.push(i32::MIN);
                        Some(row_ends.len() - 1)
                    }
                    None => None,
                };
                if let Some(r) = row {
                    row_ends[r] = end;
                }
                Placed { text, row }
            })
            .collect();
        let unlabelled = placed.iter().filter(|p| p.row.is_none()).count();
        let fault_rows = row_ends.len();

        // The legend's entries, flowed into rows below the axis.
        let mut legend: Vec<(String, Swatch)> = Vec::new();
        let nodes: BTreeSet<u32> = self.windows.iter().map(|w| w.node).collect();
        for &node in &nodes {
            legend.push((format!("node {node}"), Swatch::Bar(node_colour(node))));
        }
        for (&kind, &colour) in &kind_colour {
            legend.push((kind.to_owned(), Swatch::Band(colour)));
        }
        let findings: BTreeSet<Finding> = self.marks.iter().map(|m| m.finding).collect();
        for finding in findings {
            legend.push((format!("first {}", finding.name()), Swatch::Mark));
        }
        if unlabelled > 0 {
            legend.push((
                format!("({unlabelled} fault labels left out for room: see the colours)"),
                Swatch::None,
            ));
        }
        let legend_width = i32::try_from(WIDTH).unwrap_or(1200) - 2 * 12;
        let mut legend_rows: Vec<Vec<(String, Swatch)>> = vec![Vec::new()];
        let mut used = 0;
        for (text, swatch) in legend {
            let width = 26 + text_width(&text);
            if used + width > legend_width && used > 0 {
                legend_rows.push(Vec::new());
                used = 0;
            }
            used += width;
            if let Some(row) = legend_rows.last_mut() {
                row.push((text, swatch));
            }
        }
        if legend_rows.last().is_some_and(Vec::is_empty) {
            legend_rows.pop();
        }

        let lane_count = i32::try_from(lanes.len().max(1)).unwrap_or(512);
        let fault_rows_px = i32::try_from(fault_rows).unwrap_or(0) * ROW;
        let plot_height = fault_rows_px + lane_count * ROW;
        let legend_height = i32::try_from(legend_rows.len()).unwrap_or(0) * LEGEND_ROW + 16;
        let height = CAPTION + plot_height + AXIS + legend_height;
        let height_u = u32::try_from(height).map_err(draw_error)?;

        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (WIDTH, height_u)).into_drawing_area();
            root.fill(&WHITE).map_err(draw_error)?;
            let (top, bottom) = root.split_vertically(CAPTION + plot_height + AXIS);
            let mut chart = ChartBuilder::on(&top)
                .caption(&self.title, ("sans-serif", 20.0))
                .margin_right(RIGHT)
                .margin_top(4)
                .x_label_area_size(AXIS - 4)
                .y_label_area_size(LANE_LABELS)
                .build_cartesian_2d(0f64..span as f64 / 1000.0, 0f64..1f64)
                .map_err(draw_error)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(0)
                .x_desc("time of the run (s)")
                .x_label_formatter(&|s| {
                    if span >= 10_000 {
                        format!("{s:.0}")
                    } else {
                        format!("{s:.1}")
                    }
                })
                .label_style(("sans-serif", SMALL))
                .axis_desc_style(("sans-serif", TEXT))
                .light_line_style(WHITE.mix(0.0))
                .bold_line_style(BLACK.mix(0.08))
                .draw()
                .map_err(draw_error)?;
            let (xs, ys) = chart.plotting_area().get_pixel_range();
            let (left, top_y) = (xs.start, ys.start);
            let lanes_top = top_y + fault_rows_px;
            let lanes_bottom = lanes_top + lane_count * ROW;
            let lane_y = |lane: usize| lanes_top + i32::try_from(lane).unwrap_or(0) * ROW;
            let x_of = |ms: u64| left + to_px(ms);
            let text = |size: f64, colour: RGBColor, h: HPos| {
                ("sans-serif", size)
                    .into_font()
                    .color(&colour)
                    .pos(Pos::new(h, VPos::Center))
            };

            // Lanes: alternate shading, a label each.
            for (i, id) in lanes.iter().enumerate() {
                let y = lane_y(i);
                if i % 2 == 1 {
                    let shade = BLACK.mix(0.035).filled();
                    root.draw(&Rectangle::new([(left, y), (xs.end, y + ROW)], shade))
                        .map_err(draw_error)?;
                }
                let label = text(TEXT, BLACK, HPos::Right);
                root.draw_text(&format!("id {id}"), &label, (left - 6, y + ROW / 2))
                    .map_err(draw_error)?;
            }
            if lanes.is_empty() {
                let label = text(TEXT, BLACK, HPos::Left);
                let note = "no lease windows were recorded";
                root.draw_text(note, &label, (left + 8, lanes_top + ROW / 2))
                    .map_err(draw_error)?;
            }
            if fault_rows > 0 {
                let label = text(SMALL, BLACK, HPos::Right);
                root.draw_text("faults", &label, (left - 6, top_y + ROW / 2))
                    .map_err(draw_error)?;
                let line = BLACK.mix(0.25);
                root.draw(&PathElement::new(
                    [(left, lanes_top), (xs.end, lanes_top)],
                    line,
                ))
                .map_err(draw_error)?;
            }

            // Faults: a band across every lane, its label in its row above them.
            for (f, place) in faults.iter().zip(&placed) {
                let colour = kind_colour.get(f.kind.as_str()).copied().unwrap_or(BLACK);
                let x0 = x_of(f.start_ms);
                let x1 = f.end_ms.map_or(x0, x_of).max(x0 + INSTANT_PX);
                let band = colour.mix(BAND_ALPHA).filled();
                root.draw(&Rectangle::new([(x0, top_y), (x1, lanes_bottom)], band))
                    .map_err(draw_error)?;
                if let Some(row) = place.row {
                    let y = top_y + i32::try_from(row).unwrap_or(0) * ROW + ROW / 2;
                    let label = text(SMALL, darker(colour), HPos::Left);
                    root.draw_text(&place.text, &label, (x0 + 2, y))
                        .map_err(draw_error)?;
                }
            }

            // Windows: a bar per window, coloured by node, the node named where it fits.
            for w in &self.windows {
                let Some(&lane) = lane_of.get(&w.machine_id) else {
                    continue;
                };
                let (x0, y) = (x_of(w.start_ms), lane_y(lane));
                let x1 = x_of(w.end_ms.max(w.start_ms)).max(x0 + 1);
                let colour = node_colour(w.node);
                let bar = Rectangle::new([(x0, y + 4), (x1, y + ROW - 4)], colour.filled());
                root.draw(&bar).map_err(draw_error)?;
                let name = format!("n{}", w.node);
                if x1 - x0 >= text_width(&name) + 6 {
                    let label = text(SMALL, WHITE, HPos::Left);
                    root.draw_text(&name, &label, (x0 + 3, y + ROW / 2))
                        .map_err(draw_error)?;
                }
            }

            // Findings: a red line through every lane, a marker on the nonce's lane and its
            // label on a white ground beside it.
            for m in &self.marks {
                let x = x_of(m.at_ms);
                let line = FINDING.stroke_width(2);
                root.draw(&PathElement::new([(x, top_y), (x, lanes_bottom)], line))
                    .map_err(draw_error)?;
                let y = m
                    .machine_id
                    .and_then(|id| lane_of.get(&id))
                    .map_or(lanes_top + ROW / 2, |&lane| lane_y(lane) + ROW / 2);
                let marker = Polygon::new(
                    vec![(x, y - 7), (x + 7, y), (x, y + 7), (x - 7, y)],
                    FINDING.filled(),
                );
                root.draw(&marker).map_err(draw_error)?;
                let label = m.label();
                let width = text_width(&label);
                let right_of_marker = x + 12 + width <= xs.end;
                let (x0, h, ground_x) = if right_of_marker {
                    (x + 12, HPos::Left, x + 10)
                } else {
                    (x - 12, HPos::Right, x - 14 - width)
                };
                let ground = WHITE.mix(0.85).filled();
                root.draw(&Rectangle::new(
                    [
                        (ground_x, y - ROW / 2 + 2),
                        (ground_x + width + 4, y + ROW / 2 - 2),
                    ],
                    ground,
                ))
                .map_err(draw_error)?;
                root.draw_text(&label, &text(TEXT, FINDING, h), (x0, y))
                    .map_err(draw_error)?;
            }

            // The legend.
            for (r, row) in legend_rows.iter().enumerate() {
                let y = 8 + i32::try_from(r).unwrap_or(0) * LEGEND_ROW + LEGEND_ROW / 2;
                let mut x = 12;
                for (label, swatch) in row {
                    match swatch {
                        Swatch::Bar(colour) => bottom.draw(&Rectangle::new(
                            [(x, y - 5), (x + 18, y + 5)],
                            colour.filled(),
                        )),
                        Swatch::Band(colour) => bottom.draw(&Rectangle::new(
                            [(x, y - 8), (x + 18, y + 8)],
                            colour.mix(BAND_ALPHA * 2.0).filled(),
                        )),
                        Swatch::Mark => bottom.draw(&Polygon::new(
                            vec![(x + 9, y - 7), (x + 16, y), (x + 9, y + 7), (x + 2, y)],
                            FINDING.filled(),
                        )),
                        Swatch::None => Ok(()),
                    }
                    .map_err(draw_error)?;
                    let colour = if matches!(swatch, Swatch::Mark) {
                        FINDING
                    } else {
                        BLACK
                    };
                    bottom
                        .draw_text(label, &text(SMALL, colour, HPos::Left), (x + 22, y))
                        .map_err(draw_error)?;
                    x += 26 + text_width(label);
                }
            }
            root.present().map_err(draw_error)?;
        }
        Ok(out)
    }

    /// Draws the picture into `path` (its folder created if missing).
    ///
    /// # Errors
    /// As [`Timeline::svg`], or the file could not be written.
    pub fn write_svg(&self, path: &Path) -> Result<(), DrawError> {
        let svg = self.svg()?;
        let write = || {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, svg)
        };
        write().map_err(|source| DrawError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A legend entry's sample.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    Bar(RGBColor),
    Band(RGBColor),
    Mark,
    None,
}

/// The labels of a drawn timeline (the texts of its SVG's `<text>` elements), for checks that
/// read the picture as a person would: a lane's ID, a fault's kind, the first finding.
pub fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split_once("</text>")?.0.trim().to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(machine_id: u16, node: u32, start_ms: u64, end_ms: u64) -> Window {
        Window {
            machine_id,
            node,
            start_ms,
            end_ms,
        }
    }

    #[test]
    fn only_the_ids_used_get_a_lane_and_a_passing_run_has_no_marker() {
        let timeline = Timeline {
            title: "passing".into(),
            length_ms: 20_000,
            windows: vec![window(7, 0, 0, 9_000), window(2, 1, 500, 20_000)],
            faults: vec![Fault {
                kind: "kill9".into(),
                node: Some(0),
                start_ms: 9_000,
                end_ms: None,
            }],
            marks: Vec::new(),
        };
        assert_eq!(timeline.lanes(), [2, 7]);
        let svg = timeline.svg().unwrap();
        let texts = texts(&svg);
        let lanes: Vec<&String> = texts.iter().filter(|t| t.starts_with("id ")).collect();
        assert_eq!(lanes, ["id 2", "id 7"]);
        assert!(texts.iter().any(|t| t == "kill9 n0"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "node 1"), "{texts:?}");
        assert!(!texts.iter().any(|t| t.starts_with("first ")), "{texts:?}");
        assert!(!svg.contains("#D62728"));
    }

    #[test]
    fn a_finding_is_marked_in_red_on_its_lane() {
        let timeline = Timeline {
            title: "failing".into(),
            length_ms: 10_000,
            windows: vec![window(4, 0, 0, 10_000), window(4, 1, 3_000, 10_000)],
            faults: Vec::new(),
            marks: vec![Mark {
                finding: Finding::OutOfWindow,
                machine_id: Some(4),
                node: Some(1),
                at_ms: 3_250,
            }],
        };
        let svg = timeline.svg().unwrap();
        assert!(
            texts(&svg).contains(&"first out of window: id 4, node 1 at 3.2 s".to_owned()),
            "{svg}"
        );
        assert!(svg.contains("#D62728"), "{svg}");
    }

    #[test]
    fn fault_labels_that_would_overlap_go_to_rows_of_their_own_or_to_the_legend() {
        let faults = (0..10)
            .map(|i| Fault {
                kind: format!("fault{i}"),
                node: None,
                start_ms: 1_000 + i,
                end_ms: Some(2_000),
            })
            .collect();
        let timeline = Timeline {
            title: "crowded".into(),
            length_ms: 60_000,
            windows: vec![window(1, 0, 0, 60_000)],
            faults,
            marks: Vec::new(),
        };
        let svg = timeline.svg().unwrap();
        let texts = texts(&svg);
        let labels = texts
            .iter()
            .filter(|t| t.starts_with("fault") && *t != "faults")
            .count();
        // Each kind in the legend; four of them labelled above the lanes too.
        assert_eq!(labels, 10 + MAX_FAULT_ROWS, "{texts:?}");
        assert!(texts.iter().any(|t| t.contains("6 fault labels left out")));
    }
}
