//! Steps of a run: commands (mostly cargo) and xtask's own checks, timed, each recorded in the
//! table every run ends with.
//!
//! A step runs in the foreground (its output streamed) or in the background beside others
//! (its output in `target/xtask/logs/<step>.log`, the end of it printed when it fails). Every
//! step's output is scanned for the test runners' own summaries, so the table says how many
//! tests each step ran.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::Instant;

/// One command of a run.
pub struct Step {
    pub name: String,
    program: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: Option<PathBuf>,
    /// The `nice` increment it runs with (0: the default priority).
    nice: u8,
}

impl Step {
    /// `cargo ARGS`.
    pub fn cargo(name: impl Into<String>, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            program: None,
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            dir: None,
            nice: 0,
        }
    }

    /// `cargo` with the arguments of `line`, split at spaces.
    pub fn cargo_line(name: impl Into<String>, line: &str) -> Self {
        Self::cargo(name, &line.split_whitespace().collect::<Vec<_>>())
    }

    /// `program ARGS`.
    pub fn program(name: impl Into<String>, program: PathBuf, args: &[&str]) -> Self {
        Self {
            program: Some(program),
            ..Self::cargo(name, args)
        }
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    pub fn envs(mut self, vars: &[(String, String)]) -> Self {
        self.env.extend(vars.iter().cloned());
        self
    }

    pub fn dir(mut self, dir: PathBuf) -> Self {
        self.dir = Some(dir);
        self
    }

    /// Runs at a lower CPU priority: compiling beside tests that wait on timers, the tests
    /// get the cores when they need them.
    pub fn nice(mut self) -> Self {
        self.nice = 10;
        self
    }

    /// Runs at the lowest CPU priority: a build in a folder of its own, which only fills the
    /// cores that the steps in the workspace's folder, one at a time behind its lock, leave
    /// idle. At the same priority the two took turns on the cores and the lock's steps, the
    /// run's longest chain, ran at half speed.
    pub fn background(mut self) -> Self {
        self.nice = 19;
        self
    }

    /// The step's command, under `sh`, which prints the CPU time of everything the step ran
    /// once it ends (`times`: the shell's children, waited for), after [`CPU_MARK`].
    fn command(&self, base_env: &[(String, String)]) -> Command {
        let program = self.program.clone().unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        });
        let mut cmd = Command::new("sh");
        cmd.args(["-c", CPU_SCRIPT, "sh"]);
        if self.nice > 0 {
            cmd.args(["nice", "-n", &self.nice.to_string()]);
        }
        cmd.arg(program);
        crate::workspace::clean_env(&mut cmd);
        cmd.args(&self.args)
            .current_dir(self.dir.clone().unwrap_or_else(crate::workspace::root));
        for (k, v) in base_env.iter().chain(&self.env) {
            cmd.env(k, v);
        }
        cmd
    }

    fn describe(&self) -> String {
        let program = self.program.as_ref().map_or_else(
            || "cargo".to_owned(),
            |p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            },
        );
        format!("{program} {}", self.args.join(" "))
    }
}

/// Printed on its own line before `times`' two lines (the shell's own CPU time, then its
/// children's), when a step's command ends.
const CPU_MARK: &str = "xtask: step CPU time";

/// Runs the command given as arguments, then prints [`CPU_MARK`] and `times`, and exits with
/// the command's status. `times` runs in the shell itself: a subshell would report none of it.
const CPU_SCRIPT: &str = r#""$@"; status=$?; echo "xtask: step CPU time"; times; exit $status"#;

/// How a step ended.
#[derive(Clone)]
enum Outcome {
    Ok,
    Failed(String),
}

/// One row of the table.
struct Record {
    name: String,
    started: f64,
    secs: f64,
    /// User and system CPU seconds of everything the step ran, when it reported them.
    cpu: Option<f64>,
    tests: Option<u64>,
    outcome: Outcome,
}

/// The steps of one run, and their table.
pub struct Steps {
    started: Instant,
    records: Mutex<Vec<Record>>,
    logs: PathBuf,
    /// Set by the first failure: no step starts after it.
    failed: AtomicBool,
    /// Variables every step of the run gets (a step's own win).
    env: Vec<(String, String)>,
}

impl Steps {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            records: Mutex::new(Vec::new()),
            logs: crate::workspace::target_dir().join("xtask/logs"),
            failed: AtomicBool::new(false),
            env: Vec::new(),
        }
    }

    /// Gives every step of the run `key=value`.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Runs a step in the foreground, its output streamed (and kept in its log).
    pub fn run(&self, step: &Step) -> Result<(), String> {
        self.not_failed()?;
        eprintln!("==> {}: {}", step.name, step.describe());
        self.execute(step, true)
    }

    /// Runs a step beside others: its output only in its log.
    pub fn run_logged(&self, step: &Step) -> Result<(), String> {
        self.not_failed()?;
        eprintln!(
            "==> {} (log: {}): {}",
            step.name,
            self.log_path(&step.name).display(),
            step.describe()
        );
        self.execute(step, false)
    }

    /// `Err` once a step has failed: the run stops starting steps.
    fn not_failed(&self) -> Result<(), String> {
        if self.failed.load(Ordering::SeqCst) {
            Err("not started: an earlier step failed".into())
        } else {
            Ok(())
        }
    }

    /// Runs steps one after another, stopping at the first failure.
    pub fn run_all(&self, steps: &[Step]) -> Result<(), String> {
        steps.iter().try_for_each(|step| self.run(step))
    }

    /// Runs a check of xtask's own (no command line of its own), reported like a step.
    pub fn check(
        &self,
        name: &str,
        check: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        self.not_failed()?;
        eprintln!("==> {name}");
        let started = Instant::now();
        let result = check();
        self.record(name, started, Summary::default(), &result);
        result
    }

    /// [`Steps::check`] for a check that returns what later steps need.
    pub fn check_value<T>(
        &self,
        name: &str,
        check: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, String> {
        let mut value = None;
        self.check(name, || {
            value = Some(check()?);
            Ok(())
        })?;
        value.ok_or_else(|| format!("{name} gave nothing"))
    }

    fn log_path(&self, name: &str) -> PathBuf {
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.logs.join(format!("{file}.log"))
    }

    fn execute(&self, step: &Step, stream: bool) -> Result<(), String> {
        let started = Instant::now();
        let log_path = self.log_path(&step.name);
        let (result, summary) = run_logged(step, &self.env, &log_path, stream);
        if result.is_err() && !stream {
            print_tail(&step.name, &log_path);
        }
        self.record(&step.name, started, summary, &result);
        result
    }

    fn record(&self, name: &str, started: Instant, summary: Summary, result: &Result<(), String>) {
        let secs = started.elapsed().as_secs_f64();
        let outcome = match result {
            Ok(()) => {
                eprintln!("<== {name}: ok in {secs:.1} s");
                Outcome::Ok
            }
            Err(why) => {
                self.failed.store(true, Ordering::SeqCst);
                eprintln!("<== {name}: FAILED ({why}) after {secs:.1} s");
                Outcome::Failed(why.clone())
            }
        };
        lock(&self.records).push(Record {
            name: name.to_owned(),
            started: started.duration_since(self.started).as_secs_f64(),
            secs,
            cpu: summary.cpu,
            tests: summary.tests,
            outcome,
        });
    }

    /// The table of every step so far: when it started (seconds into the run), how long it
    /// took, how many tests it ran, how it ended; then the run's total.
    pub fn print_table(&self) {
        let mut records = lock(&self.records);
        records.sort_by(|a, b| a.started.total_cmp(&b.started));
        let width = records
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(4)
            .max(5);
        println!();
        println!(
            "{:<width$} {:>8} {:>8} {:>8} {:>6}  result",
            "step", "start s", "secs", "cpu s", "tests"
        );
        let mut tests_total = 0;
        let mut cpu_total = 0.0;
        for r in records.iter() {
            tests_total += r.tests.unwrap_or(0);
            cpu_total += r.cpu.unwrap_or(0.0);
            println!(
                "{:<width$} {:>8.1} {:>8.1} {:>8} {:>6}  {}",
                r.name,
                r.started,
                r.secs,
                r.cpu.map_or_else(|| "-".to_owned(), |c| format!("{c:.1}")),
                r.tests.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                match &r.outcome {
                    Outcome::Ok => "ok".to_owned(),
                    Outcome::Failed(why) => format!("FAILED: {why}"),
                }
            );
        }
        let failed = records
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
            .count();
        println!(
            "{:<width$} {:>8} {:>8.1} {:>8.1} {:>6}  {} steps, {failed} failed",
            "total",
            "",
            self.started.elapsed().as_secs_f64(),
            cpu_total,
            tests_total,
            records.len()
        );
    }
}

/// The value behind `mutex`, also after a panic of another holder.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a step's output says of it: the tests its runners ran, the CPU time it used.
#[derive(Default)]
struct Summary {
    tests: Option<u64>,
    cpu: Option<f64>,
}

/// Runs `step` with its output in `log` (and on the terminal when `stream`); returns its
/// outcome and what its output summed up.
fn run_logged(
    step: &Step,
    base_env: &[(String, String)],
    log: &PathBuf,
    stream: bool,
) -> (Result<(), String>, Summary) {
    if let Some(dir) = log.parent() {
        let _ = fs::create_dir_all(dir);
    }
    let file = match fs::File::create(log) {
        Ok(f) => Mutex::new(f),
        Err(e) => return (Err(format!("{}: {e}", log.display())), Summary::default()),
    };
    let mut cmd = step.command(base_env);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return (
                Err(format!("could not run {}: {e}", step.describe())),
                Summary::default(),
            );
        }
    };
    let counts = Mutex::new(TestCount::default());
    let cpu = Mutex::new(CpuTime::default());
    let (out, err) = (child.stdout.take(), child.stderr.take());
    thread::scope(|s| {
        let pump = |reader: Box<dyn Read + Send>, to_stderr: bool| {
            let (file, counts, cpu) = (&file, &counts, &cpu);
            s.spawn(move || {
                for line in BufReader::new(reader).split(b'\n').map_while(Result::ok) {
                    let text = String::from_utf8_lossy(&line);
                    if !to_stderr && lock(cpu).read(&text) {
                        continue;
                    }
                    lock(counts).read(&text);
                    if stream {
                        if to_stderr {
                            eprintln!("{text}");
                        } else {
                            println!("{text}");
                        }
                    }
                    let mut f = lock(file);
                    let _ = writeln!(f, "{text}");
                }
            });
        };
        if let Some(out) = out {
            pump(Box::new(out), false);
        }
        if let Some(err) = err {
            pump(Box::new(err), true);
        }
    });
    let status = child.wait();
    let summary = Summary {
        tests: counts
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .total(),
        cpu: cpu
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .seconds,
    };
    let result = match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(s.to_string()),
        Err(e) => Err(format!("waiting for {}: {e}", step.describe())),
    };
    (result, summary)
}

/// The CPU time `sh`'s `times` reports after [`CPU_MARK`]: its second line, the children's
/// user and system time (`1m2.5s 0m0.25s`; dash prints fewer decimals than bash).
#[derive(Default)]
struct CpuTime {
    /// Lines of `times` still to come.
    pending: u8,
    seconds: Option<f64>,
}

impl CpuTime {
    /// Reads one line of the step's standard output; whether it was part of the report (and
    /// so not the step's own output).
    fn read(&mut self, line: &str) -> bool {
        if line.trim() == CPU_MARK {
            self.pending = 2;
            return true;
        }
        match self.pending {
            0 => false,
            pending => {
                self.pending = pending - 1;
                if self.pending == 0 {
                    self.seconds = line
                        .split_whitespace()
                        .map(minutes_seconds)
                        .sum::<Option<f64>>();
                }
                true
            }
        }
    }
}

/// `1m2.5s` as seconds.
fn minutes_seconds(text: &str) -> Option<f64> {
    let (minutes, seconds) = text.strip_suffix('s')?.split_once('m')?;
    Some(minutes.parse::<f64>().ok()? * 60.0 + seconds.parse::<f64>().ok()?)
}

/// Tests run, from the runners' summaries: nextest's `Summary [...] N tests run: ...` and
/// libtest's `test result: ok. N passed; M failed; K ignored; ...` (doctests).
#[derive(Default)]
struct TestCount {
    nextest: Option<u64>,
    libtest: Option<u64>,
}

impl TestCount {
    fn read(&mut self, line: &str) {
        let line = line.trim();
        if line.starts_with("Summary [") {
            if let Some(n) = line
                .split("] ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
            {
                *self.nextest.get_or_insert(0) += n;
            }
        } else if let Some(rest) = line.strip_prefix("test result: ") {
            let number = |word: &str| {
                rest.split(';')
                    .filter_map(|part| {
                        let mut it = part.split_whitespace().rev();
                        (it.next() == Some(word)).then(|| it.next()?.parse::<u64>().ok())?
                    })
                    .sum::<u64>()
            };
            *self.libtest.get_or_insert(0) += number("passed") + number("failed");
        }
    }

    /// nextest prints each test's libtest output on failure: its own summary is the count.
    fn total(&self) -> Option<u64> {
        self.nextest.or(self.libtest)
    }
}

/// The last lines of a background step's log, when it failed.
fn print_tail(name: &str, log: &PathBuf) {
    const LINES: usize = 80;
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LINES);
    eprintln!(
        "---- {name}: the last {} lines of {} ----",
        lines.len() - from,
        log.display()
    );
    for line in &lines[from..] {
        eprintln!("{line}");
    }
    eprintln!("---- end of {name} ----");
}

#[cfg(test)]
mod tests {
    use super::{CPU_MARK, CpuTime, TestCount};

    #[test]
    fn cpu_time_is_the_childrens_line_of_times() {
        for (own, children, seconds) in [
            ("0m0.001s 0m0.002s", "1m2.500s 0m0.250s", 62.75),
            ("0m0.00s 0m0.00s", "0m3.25s 0m1.00s", 4.25),
        ] {
            let mut cpu = CpuTime::default();
            assert!(!cpu.read("Finished `dev` profile"));
            assert!(cpu.read(CPU_MARK));
            assert!(cpu.read(own));
            assert!(cpu.read(children));
            assert!(!cpu.read("anything after"));
            assert_eq!(cpu.seconds, Some(seconds));
        }
        assert_eq!(CpuTime::default().seconds, None);
    }

    #[test]
    fn counts_come_from_the_runners_summaries() {
        let mut c = TestCount::default();
        c.read("test result: ok. 3 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.1s");
        c.read("test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s");
        assert_eq!(c.total(), Some(8));
        c.read("     Summary [ 181.385s] 723 tests run: 719 passed, 4 failed, 2 skipped");
        assert_eq!(c.total(), Some(723));
        assert_eq!(TestCount::default().total(), None);
    }
}
