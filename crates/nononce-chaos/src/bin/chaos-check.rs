//! Checks a chaos run directory: `chaos-check DIR [--json FILE] [--report OUT --backend NAME]`
//! (`--report`: also draws the run's timeline into `OUT/chaos-NAME.svg`), or the duplicated-ordinal
//! scenario with `chaos-check DIR --guard --bound-ms N`. Exits 1 on a failed check.
//! `chaos-check --dump FILE` prints one node file's lease records (nonces as counts).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(about = "nononce chaos checker")]
struct Cli {
    /// The run directory with the node files (`*.bin`) and `faults.jsonl`.
    dir: PathBuf,
    /// Also write the full report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Check the duplicated-ordinal (conflict guard) scenario instead.
    #[arg(long)]
    guard: bool,
    /// Guard scenario: the later node must stop within this many ms of its first enable.
    #[arg(long, default_value_t = 10_000)]
    bound_ms: u64,
    /// Print the records of the node file DIR instead of checking.
    #[arg(long)]
    dump: bool,
    /// Also draw the run's timeline (lease windows, faults, the first duplicate or
    /// out-of-window nonce) into this folder, as `chaos-<backend>.svg`.
    #[arg(long, requires = "backend")]
    report: Option<PathBuf>,
    /// The backend the run was on: names the picture and its caption.
    #[arg(long)]
    backend: Option<String>,
    /// More words for the caption (the seed, say).
    #[arg(long, default_value = "")]
    caption: String,
}

/// One line per record, runs of nonces folded into one line; times as node clock and machine
/// clock (ms since the file's first record).
fn dump(path: &std::path::Path) -> std::io::Result<()> {
    use nononce_chaos::Record;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let file = std::fs::File::open(path)?;
    let mut first: Option<u64> = None;
    let mut nonces = 0u64;
    let mut ticks = 0u64;
    nononce_chaos::record::read_all(std::io::BufReader::new(file), |r| {
        let at = r.stamp();
        let t0 = *first.get_or_insert(at.machine_ms());
        match r {
            Record::Nonce { .. } => nonces += 1,
            Record::Tick { .. } => ticks += 1,
            other => {
                if nonces > 0 || ticks > 0 {
                    writeln!(out, "    {nonces} nonces in {ticks} batches")?;
                    (nonces, ticks) = (0, 0);
                }
                writeln!(
                    out,
                    "{:>8} ms  node clock {} (offset {:+})  {other:?}",
                    at.machine_ms().saturating_sub(t0),
                    at.at_ms,
                    at.offset_ms
                )?;
            }
        }
        Ok(())
    })?;
    if nonces > 0 {
        writeln!(out, "    {nonces} nonces in {ticks} batches")?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.dump {
        return match dump(&cli.dir) {
            // A pager or `head` that stops reading is not an error.
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("chaos-check: {}: {e}", cli.dir.display());
                ExitCode::from(2)
            }
        };
    }
    let checked = if cli.guard {
        nononce_chaos::check_guard(&cli.dir, cli.bound_ms).map(|r| {
            (
                r.passed(),
                serde_json::to_string_pretty(&r),
                format!(
                    "guard: later node stopped after {} ms (bound {} ms), conflict seen {}, earlier kept its id {}, later node's nonces {}, duplicates between them {} ({})\n",
                    r.later_stopped_after_ms
                        .map_or_else(|| "never".to_owned(), |v| v.to_string()),
                    r.bound_ms,
                    r.later_saw_conflict,
                    r.earlier_kept_id,
                    r.later_nonces,
                    r.duplicates,
                    if r.passed() { "PASS" } else { "FAIL" }
                ),
            )
        })
    } else if let (Some(out), Some(backend)) = (&cli.report, &cli.backend) {
        let title = format!("chaos run on {backend} {}", cli.caption);
        nononce_chaos::check_with_timeline(&cli.dir, title.trim_end().to_owned()).and_then(
            |(r, timeline)| {
                let path = nononce_timeline::report_path(out, "chaos", backend);
                let verdict = if r.passed() { "passed" } else { "FAILED" };
                let mut timeline = timeline;
                timeline.title.push_str(&format!(" ({verdict})"));
                timeline.write_svg(&path).map_err(|e| {
                    let e = std::io::Error::other(e.to_string());
                    nononce_chaos::check::CheckError::Io {
                        path: path.clone(),
                        source: e,
                    }
                })?;
                println!("timeline: {}", path.display());
                Ok((r.passed(), serde_json::to_string_pretty(&r), r.summary()))
            },
        )
    } else {
        nononce_chaos::check(&cli.dir)
            .map(|r| (r.passed(), serde_json::to_string_pretty(&r), r.summary()))
    };
    let (passed, json, text) = match checked {
        Ok(checked) => checked,
        Err(e) => {
            eprintln!("chaos-check: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{text}");
    if let (Some(path), Ok(json)) = (cli.json, json)
        && let Err(e) = std::fs::write(&path, json)
    {
        eprintln!("chaos-check: {}: {e}", path.display());
    }
    ExitCode::from(u8::from(!passed))
}
