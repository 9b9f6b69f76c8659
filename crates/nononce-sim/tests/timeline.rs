//! The picture of a run (`--report`): a guard switched off draws the duplicate it lets
//! through; a passing run draws its lanes and no finding.

use nononce_sim::{Clocks, Config, Guards, first_duplicate, run_seed_with_timeline};
use nononce_timeline::texts;

/// The findings' red, as the SVG writes it.
const RED: &str = "fill=\"#D62728\"";

#[test]
fn without_the_floor_the_picture_marks_the_first_duplicate_on_its_lane() {
    let mut guards = Guards::ALL;
    guards.floor = false;
    let config = Config {
        guards,
        clocks: Some(Clocks::Wide),
        stop_at_first: false,
        ..Config::default()
    };
    let found = first_duplicate(1..=200, &config).expect("no seed in 1..=200 repeated a value");
    let (report, timeline) = run_seed_with_timeline(found.seed, &config);
    assert_eq!(report, found, "recording the picture changed the run");
    let mark = timeline
        .marks
        .iter()
        .find(|m| m.finding == nononce_timeline::Finding::Duplicate)
        .expect("the duplicate is marked");
    let id = mark.machine_id.expect("a duplicate nonce has a machine ID");
    let svg = timeline.svg().unwrap();
    let texts = texts(&svg);
    let label = texts
        .iter()
        .find(|t| t.starts_with("first duplicate: "))
        .unwrap_or_else(|| panic!("no duplicate label among {texts:?}"));
    assert!(label.contains(&format!("id {id},")), "{label}");
    // Its lane is drawn, and the marker and its line are red.
    assert!(texts.contains(&format!("id {id}")), "{texts:?}");
    assert!(svg.contains(RED), "no red marker");
    assert!(
        svg.contains("<polygon") || svg.contains("<path"),
        "no marker shape"
    );
}

#[test]
fn a_passing_run_draws_a_lane_per_id_used_and_no_finding() {
    let (report, timeline) = run_seed_with_timeline(3, &Config::default());
    assert!(!report.failed() && report.nonces > 0, "{report}");
    let lanes = timeline.lanes();
    assert!(!lanes.is_empty());
    let svg = timeline.svg().unwrap();
    let texts = texts(&svg);
    let drawn: Vec<&String> = texts.iter().filter(|t| t.starts_with("id ")).collect();
    let expected: Vec<String> = lanes.iter().map(|id| format!("id {id}")).collect();
    assert_eq!(drawn, expected.iter().collect::<Vec<_>>());
    assert!(texts.iter().any(|t| t == "time of the run (s)"));
    assert!(!texts.iter().any(|t| t.starts_with("first ")), "{texts:?}");
    assert!(!svg.contains(RED));
}
