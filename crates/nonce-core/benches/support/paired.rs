//! Ratios of two timed loops measured in alternating rounds (included by the facade's
//! `paired` benchmark).
//!
//! Criterion measures each benchmark on its own, seconds apart; on a shared virtual machine
//! the host's load and clock speed move between them, and a ratio of two separately measured
//! rows inherits every such move (the same 2-thread row gave 1.37x in one run and 1.98x in the
//! next). Here both sides of a ratio run in short rounds, alternately (A then B, then B then
//! A), so both sides see the same stretch of the host's weather.
//!
//! The figure a goal is read from, [`Ratio::fastest`], compares each side's fastest tenth of
//! rounds: on this machine a disturbance (another guest taking a virtual CPU, an interrupt)
//! only ever adds time, and a 2-thread round is hit whenever either of its two CPUs is, so
//! the slow rounds measure the host, and more so for the 2-thread side. This is the
//! reasoning of Python's `timeit` ("the lowest value gives a lower bound for how fast your
//! machine can run the code"), with a tenth instead of the single fastest round so that one
//! lucky round does not decide. The median and quartiles of the per-round ratios are
//! reported beside it, to show how much the host moved.

use std::time::{Duration, Instant};

/// How long one side of one round runs.
pub const ROUND: Duration = Duration::from_millis(10);

/// A ratio of two loops' costs over a run of rounds.
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    /// The baseline's cost over the candidate's, each the tenth percentile of its rounds'.
    pub fastest: f64,
    /// Median and quartiles of the per-round ratios.
    pub median: f64,
    pub lower_quartile: f64,
    pub upper_quartile: f64,
    pub rounds: usize,
    /// The baseline's and the candidate's cost in ns per call: the tenth percentile of each
    /// side's rounds, the two figures `fastest` divides.
    pub baseline_ns: f64,
    pub candidate_ns: f64,
}

/// A loop to be timed: given a number of calls, it makes them and returns the time per call
/// it measured (for several threads: the aggregate, elapsed time over all calls made).
pub trait Timed {
    fn per_call(&mut self, calls: u64) -> f64;
}

impl<F: FnMut(u64) -> Duration> Timed for F {
    // Out of line: each loop is compiled once, not once per call site (baseline first or
    // second), so both orders of a round time the same code at the same place.
    #[inline(never)]
    #[allow(
        clippy::cast_precision_loss,
        reason = "call counts stay far below 2^52, where f64 is exact"
    )]
    fn per_call(&mut self, calls: u64) -> f64 {
        self(calls).as_secs_f64() / calls as f64
    }
}

/// The number of calls that take about `round` (doubling from 1000 until one run does).
fn calibrate(side: &mut impl Timed, round: Duration) -> u64 {
    let mut calls = 1_000u64;
    loop {
        let started = Instant::now();
        side.per_call(calls);
        let took = started.elapsed();
        if took >= round / 4 || calls >= 1 << 40 {
            let scaled = u128::from(calls) * round.as_nanos() / took.as_nanos().max(1);
            return u64::try_from(scaled).unwrap_or(u64::MAX).max(1);
        }
        calls *= 2;
    }
}

/// `cost(baseline) / cost(candidate)` per round, over `rounds` rounds of about `round` per
/// side: above 1 when the candidate is faster. For a scaling ratio the baseline is 1 thread
/// and the candidate 2 (aggregate time per call), so the ratio is the speed-up.
pub fn ratio(
    rounds: usize,
    round: Duration,
    mut baseline: impl Timed,
    mut candidate: impl Timed,
) -> Ratio {
    // One warm-up run of each side, then calls sized to the round.
    let base_calls = calibrate(&mut baseline, round);
    let cand_calls = calibrate(&mut candidate, round);
    let (mut base_costs, mut cand_costs): (Vec<f64>, Vec<f64>) = (0..rounds)
        .map(|i| {
            if i % 2 == 0 {
                let base = baseline.per_call(base_calls);
                (base, candidate.per_call(cand_calls))
            } else {
                let cand = candidate.per_call(cand_calls);
                (baseline.per_call(base_calls), cand)
            }
        })
        .unzip();
    let mut ratios: Vec<f64> = base_costs
        .iter()
        .zip(&cand_costs)
        .map(|(base, cand)| base / cand)
        .collect();
    let baseline_ns = quantile(&mut base_costs, 1, 10) * 1e9;
    let candidate_ns = quantile(&mut cand_costs, 1, 10) * 1e9;
    Ratio {
        fastest: baseline_ns / candidate_ns,
        median: quantile(&mut ratios, 1, 2),
        lower_quartile: quantile(&mut ratios, 1, 4),
        upper_quartile: quantile(&mut ratios, 3, 4),
        rounds,
        baseline_ns,
        candidate_ns,
    }
}

/// The value `num / den` of the way up `values` (sorted here), rounded down to a round.
fn quantile(values: &mut [f64], num: usize, den: usize) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) * num / den]
}
