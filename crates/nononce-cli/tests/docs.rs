//! The documentation of the `nononce` command, run: a change that alters what the command
//! does or says fails here until the docs follow.
//!
//! What is run, each in a fresh scratch directory, with the binary under test first on `PATH`:
//!
//! - every `sh` code block of `README.md` and `docs/*.md` that runs `nononce`, line by line
//!   (`cargo run -p nononce-cli -- ` stands for `nononce `; other `cargo` lines build or test
//!   the workspace and are left out);
//! - the examples of every `--help` (the lines after `Example:` / `Examples:`).
//!
//! `docs/serve.md`, `nononce serve --help` and any block that starts `nononce serve` are run
//! by `serve_docs.rs` instead: their examples need a server running beside them.
//! - every row of the bad-input tables of `docs/reliability.md` and `docs/operations.md` (the
//!   tables with a "what you get" column): the first code span holding a `nononce` command is
//!   run with `sh -c`, and the "what you get" cell says what it must print: its first code
//!   span starting `nononce: `, else its last code span. A `nononce: ` span is the last line
//!   of stderr (earlier lines may only be
//!   progress lines) and the status is 1, or 2 when the cell says "status 2"; any other span
//!   is the last line of stdout, and the status 0. A row without a command must name, in a
//!   "where" column, a test file that exists (or say "read, not run").
//!
//! A script line ending in `# prints TEXT` must print exactly TEXT. In expected text `…`
//! stands for any text (times, tokens, paths); everything else is compared exactly. An
//! `export NAME=...` line is evaluated once and its value kept for the lines after it.
//!
//! The examples name placeholder servers, replaced here by the test servers:
//! `postgres://app@db/app` and `mysql://root@db/app` by a fresh, migrated table on PostgreSQL
//! and MariaDB, `redis://cache:6379` by
//! a fresh hash on Redis 8 (amnesia guard off: the shared test servers restart),
//! `etcd://etcd:2379` by a fresh key prefix on the etcd test server. The variables `$PG`,
//! `$REDIS` and `$REDIS7` hold the PostgreSQL, Redis 8 and Redis 7 URLs, `$ETCD` the etcd
//! server's `host:port` list.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

/// Run by `serve_docs.rs`, beside the servers its examples talk to.
pub(crate) const SERVE_DOC: &str = "docs/serve.md";

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One thing to run.
#[derive(Debug)]
enum Example {
    /// Lines run in order in one directory; `prints` is a line's exact stdout.
    Script {
        origin: String,
        lines: Vec<(String, Option<String>)>,
    },
    /// A table row: a command and what it must print.
    Row {
        origin: String,
        command: String,
        expected: String,
        status: i32,
    },
}

/// Splits a script line into the command and its `# prints` text.
pub(crate) fn script_line(line: &str) -> (String, Option<String>) {
    match line.split_once("# prints ") {
        Some((command, prints)) => (command.trim().to_owned(), Some(prints.trim().to_owned())),
        None => (line.trim().to_owned(), None),
    }
}

fn is_nononce_command(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    // `VAR=value nononce ...` sets a variable for the command.
    let first = words.iter().position(|w| !w.contains('='));
    first.is_some_and(|i| words[i] == "nononce")
        || text.contains(" nononce ")
        || text.starts_with("nononce ")
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| !p.ends_with(SERVE_DOC))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A markdown file's name from the workspace root, and its text.
fn read_doc(path: &Path) -> (String, String) {
    let name = path.strip_prefix(root()).unwrap_or(path).display();
    (name.to_string(), std::fs::read_to_string(path).unwrap())
}

/// The `sh` blocks that run `nononce`.
fn code_blocks(path: &Path) -> Vec<Example> {
    let (name, text) = read_doc(path);
    let mut out = Vec::new();
    let mut block: Option<(usize, Vec<String>)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut block {
            None if line.trim_start() == "```sh" => block = Some((n + 1, Vec::new())),
            None => {}
            Some((start, lines)) => {
                if line.trim_start().starts_with("```") {
                    let lines: Vec<(String, Option<String>)> = lines
                        .iter()
                        .map(|l| l.replace("cargo run -p nononce-cli -- ", "nononce "))
                        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                        .filter(|l| !l.trim_start().starts_with("cargo "))
                        .map(|l| script_line(&l))
                        .collect();
                    // A block that starts `nononce serve` would never end: serve_docs.rs
                    // runs it, with a server beside it.
                    let serves = lines.iter().any(|(l, _)| l.starts_with("nononce serve"));
                    if !serves && lines.iter().any(|(l, _)| is_nononce_command(l)) {
                        out.push(Example::Script {
                            origin: format!("{name}:{start}"),
                            lines,
                        });
                    }
                    block = None;
                } else {
                    lines.push(line.to_owned());
                }
            }
        }
    }
    out
}

/// The code spans of a markdown table cell (CommonMark: a run of N backticks up to the next
/// run of exactly N).
fn code_spans(cell: &str) -> Vec<String> {
    // The cell as runs of backticks and runs of anything else.
    let mut at = 0;
    let runs: Vec<&str> = cell
        .as_bytes()
        .chunk_by(|a, b| (*a == b'`') == (*b == b'`'))
        .map(|run| {
            at += run.len();
            &cell[at - run.len()..at]
        })
        .collect();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < runs.len() {
        let opens = runs[i].starts_with('`');
        let Some(close) = (i + 1..runs.len()).find(|&j| opens && runs[j] == runs[i]) else {
            i += 1;
            continue;
        };
        let span = runs[i + 1..close].concat();
        let inner = span.strip_prefix(' ').and_then(|s| s.strip_suffix(' '));
        spans.push(inner.unwrap_or(&span).to_owned());
        i = close + 1;
    }
    spans
}

/// The cells of a table row, `\|` unescaped.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_owned()).collect()
}

/// The rows of the bad-input tables (those with a "what you get" column).
fn table_rows(path: &Path) -> Vec<Example> {
    let (name, text) = read_doc(path);
    let lines: Vec<(usize, &str)> = text.lines().enumerate().collect();
    let is_row = |line: &str| line.trim_start().starts_with('|');
    let mut out = Vec::new();
    // Each table is a run of rows; any other line is a run of its own, with no rows to read.
    for table in lines.chunk_by(|(_, a), (_, b)| is_row(a) && is_row(b)) {
        let header = cells(table[0].1);
        let Some(got) = header.iter().position(|h| h == "what you get") else {
            continue;
        };
        let where_column = header.iter().position(|h| h == "where");
        // The rows after the header and its separator.
        for (n, line) in table.iter().skip(2) {
            let row = cells(line);
            let origin = format!("{name}:{}", n + 1);
            let command = row
                .iter()
                .take(got)
                .flat_map(|c| code_spans(c))
                .find(|s| is_nononce_command(s));
            let Some(command) = command else {
                let place = where_column
                    .and_then(|w| row.get(w))
                    .cloned()
                    .unwrap_or_default();
                let named = code_spans(&place).iter().any(|s| test_file_exists(s));
                assert!(
                    named || place.contains("read, not run"),
                    "{origin}: a row without a nononce command must name an existing test file in its \"where\" column: {place:?}"
                );
                continue;
            };
            let cell = &row[got];
            let spans = code_spans(cell);
            let expected = spans
                .iter()
                .find(|s| s.starts_with("nononce: "))
                .or(spans.last())
                .cloned()
                .unwrap_or_else(|| panic!("{origin}: no code span in \"what you get\""));
            let failure = expected.starts_with("nononce: ");
            let status = match (failure, cell.contains("status 2")) {
                (false, _) => 0,
                (true, true) => 2,
                (true, false) => 1,
            };
            out.push(Example::Row {
                origin,
                command,
                expected,
                status,
            });
        }
    }
    out
}

/// Whether some crate has the test file `tests/NAME.rs` (or a source file `src/...`).
fn test_file_exists(span: &str) -> bool {
    let span = span.split_whitespace().next().unwrap_or("");
    if !(span.starts_with("tests/") || span.starts_with("src/")) {
        return false;
    }
    std::fs::read_dir(root().join("crates"))
        .unwrap()
        .any(|c| c.unwrap().path().join(span).is_file())
}

/// The examples of every `--help`, found by walking the "Commands:" lists.
fn help_examples() -> Vec<Example> {
    let mut out = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let mut args = path.clone();
        args.push("--help".into());
        let help = run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let origin = format!("nononce {}", args.join(" "));
        // Each section runs from its unindented heading to the next unindented line.
        let mut lines = Vec::new();
        let mut section = "";
        for line in help.lines() {
            let Some(entry) = line.strip_prefix("  ") else {
                section = line;
                continue;
            };
            match (section, entry.split_whitespace().next()) {
                ("Commands:", Some(sub)) if sub != "help" && sub != "serve" => {
                    todo.push([path.clone(), vec![sub.to_owned()]].concat());
                }
                ("Examples:" | "Example:", _) => lines.push(script_line(entry)),
                _ => {}
            }
        }
        assert!(!lines.is_empty(), "{origin} has no examples");
        out.push(Example::Script { origin, lines });
    }
    out
}

/// Whether `text` is `pattern`, `…` standing for any text.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Makes a fresh test store.
type Fresh = fn() -> String;

/// The placeholders of the examples, each with the fresh test store it stands for. A
/// deployment's database has its lease table: the placeholders' tables are migrated.
const PLACEHOLDERS: [(&str, Fresh); 4] = [
    ("postgres://app@db/app", || sql_store(&pg_url())),
    ("mysql://root@db/app", || sql_store(&mysql_url())),
    ("redis://cache:6379", || redis_store(&redis8_url())),
    ("etcd://etcd:2379", || {
        format!("etcd://{}/nononce-doc/{}/", etcd_hosts(), unique("d"))
    }),
];

/// The test stores behind the placeholders (in the order of [`PLACEHOLDERS`]), fresh for one
/// example.
#[derive(Default)]
struct Servers([Option<String>; 4]);

impl Servers {
    fn apply(&mut self, command: &str) -> String {
        let mut command = command.to_owned();
        for ((placeholder, fresh), url) in PLACEHOLDERS.iter().zip(&mut self.0) {
            if command.contains(placeholder) {
                let url = url.get_or_insert_with(fresh);
                command = command.replace(placeholder, &format!("'{url}'"));
            }
        }
        command
    }

    /// Drops the SQL tables.
    fn clean(&self) {
        for store in self.0[..2].iter().flatten() {
            drop_table(store);
        }
    }
}

fn shell(command: &str, dir: &Path, env: &[(String, String)]) -> Output {
    let bin_dir = bin().parent().unwrap().to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        // Each example a store of its own, in its own folder: examples run at once, and two
        // first uses of one new SQLite file at once can find it locked.
        .env("XDG_STATE_HOME", dir)
        .env_remove("NONONCE_STORE")
        .env("REDIS", redis8_url().trim_end_matches('/'))
        .env("REDIS7", redis7_url().trim_end_matches('/'))
        .env("PG", pg_url())
        .env("ETCD", etcd_hosts())
        .env_remove("POD")
        .env_remove("NONCE_KEY")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

/// Runs one example; the problems found.
fn check(example: &Example) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = Servers::default();
    let mut problems = Vec::new();
    match example {
        Example::Script { origin, lines } => {
            let mut env: Vec<(String, String)> = Vec::new();
            for (line, prints) in lines {
                let command = servers.apply(line);
                if let Some(assignment) = line.strip_prefix("export ") {
                    let name = assignment.split('=').next().unwrap().to_owned();
                    let out = shell(
                        &format!("{command}\nprintf %s \"${name}\""),
                        dir.path(),
                        &env,
                    );
                    env.push((name, String::from_utf8_lossy(&out.stdout).into_owned()));
                    continue;
                }
                let out = shell(&command, dir.path(), &env);
                let stdout = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() {
                    problems.push(format!(
                        "{origin}: `{line}` failed ({}): {}",
                        out.status,
                        stderr(&out).trim()
                    ));
                    break;
                }
                if let Some(prints) = prints
                    && !matches(prints, stdout.trim_end())
                {
                    problems.push(format!(
                        "{origin}: `{line}` printed\n  {}\nnot\n  {prints}",
                        stdout.trim_end()
                    ));
                }
            }
        }
        Example::Row {
            origin,
            command,
            expected,
            status,
        } => {
            // Rows write their own Redis keys (`key=doc_...`): start from nothing.
            for key in ["key=doc_", " doc_"]
                .into_iter()
                .flat_map(|prefix| command.split(prefix).skip(1))
            {
                let key: String = key
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                shell(
                    &format!("redis-cli -u \"$REDIS\" DEL doc_{key} >/dev/null"),
                    dir.path(),
                    &[],
                );
            }
            let out = shell(&servers.apply(command), dir.path(), &[]);
            let failure = expected.starts_with("nononce: ");
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
            let (stream, other) = if failure {
                (stderr, stdout.into_owned())
            } else {
                (stdout.into_owned(), stderr)
            };
            let lines: Vec<&str> = stream.lines().collect();
            let last = lines.last().copied().unwrap_or("");
            if out.status.code() != Some(*status) {
                problems.push(format!(
                    "{origin}: `{command}` exited with {} instead of {status}: {}{}",
                    out.status,
                    stream.trim(),
                    other.trim()
                ));
            } else if !matches(expected, last) {
                problems.push(format!(
                    "{origin}: `{command}` printed\n  {last}\nnot\n  {expected}"
                ));
            } else if failure
                && lines[..lines.len() - 1]
                    .iter()
                    .any(|l| !l.starts_with("nononce: waiting"))
            {
                problems.push(format!(
                    "{origin}: `{command}` printed more than its one line: {stream}"
                ));
            }
        }
    }
    servers.clean();
    problems
}

fn run_all(examples: &[Example]) {
    let problems: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = examples.iter().map(|e| s.spawn(|| check(e))).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        problems.is_empty(),
        "{} of {} examples disagree with the command:\n\n{}",
        problems.len(),
        examples.len(),
        problems.join("\n\n")
    );
}

#[test]
fn help_examples_work_as_written() {
    run_all(&help_examples());
}

#[test]
fn markdown_examples_work_as_written() {
    let examples: Vec<Example> = markdown_files()
        .iter()
        .flat_map(|p| code_blocks(p))
        .collect();
    assert!(examples.len() >= 3, "{examples:?}");
    run_all(&examples);
}

#[test]
fn bad_input_tables_say_what_the_command_says() {
    let mut examples = Vec::new();
    for doc in ["docs/reliability.md", "docs/operations.md"] {
        examples.extend(table_rows(&root().join(doc)));
    }
    assert!(examples.len() >= 30, "{}", examples.len());
    run_all(&examples);
}

#[test]
fn the_matcher() {
    assert!(matches("a…c", "abbbc"));
    assert!(matches("a…", "a"));
    assert!(!matches("a…c", "ab"));
    assert!(matches("x … y … z", "x 1 y 2 z"));
    assert!(!matches("x", "x "));
    assert_eq!(
        code_spans("a `one` and `` two `x` `` end"),
        vec!["one".to_owned(), "two `x`".to_owned()]
    );
    assert_eq!(cells("| a \\| b | `c` |"), vec!["a | b", "`c`"]);
}
