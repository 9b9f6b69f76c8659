//! The documentation of `nononce serve`, run against live servers: every example of
//! `docs/serve.md` and of `nononce serve --help`, and what a user meets first (the messages at
//! start, on a port in use, on SIGTERM, with `--quiet`).
//!
//! How the examples run, each source in a scratch directory of its own, with the binary under
//! test first on `PATH`:
//!
//! - a `nononce serve ...` line starts a server on a free loopback port (its `--listen` only
//!   names the port the examples call it by, 7300 without one) in place of the one started
//!   for that port before; `postgres://app@db/app` stands for a fresh, migrated table on the
//!   PostgreSQL test server;
//! - any other line of an `sh` block runs with `sh -c`, `localhost:PORT` and `127.0.0.1:PORT`
//!   naming the server started for `PORT`; it must succeed (a `curl` must get a 2xx, unless it
//!   says it prints an error), and a line ending in `# prints TEXT` must print TEXT; a line
//!   `NAME=VALUE` (or `export NAME=VALUE`) sets a variable for the lines and blocks after it, as in a shell, and a line
//!   opening a here-document (`<<EOF`) runs with the lines up to its end;
//! - a `python` block runs with `python3`, a `js` block with `node` (as an ES module);
//! - the scratch directory holds the repository's `.proto` files at their path in a checkout
//!   (`crates/nononce-cli/proto`), and `PYTHONPATH` is `NONONCE_TEST_PYTHONPATH` (grpcio and
//!   grpcio-tools): an example that uses gRPC fails without it, saying to run the tests under
//!   `cargo xtask with-services`;
//! - a `text` block is what the code block before it prints: the stdout of a `python` or `js`
//!   block or of an `sh` block's last line, or, after `nononce serve`, its stderr up to the
//!   serving line. In expected text `…` stands for any text.
//!
//! A missing `curl`, `python3`, `node` or `openssl` fails the test that needs it.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::serve::Served;
use crate::common::*;
use crate::docs::{SERVE_DOC, matches, root, script_line};

/// The port the examples call a server by when they give no `--listen`.
const DEFAULT_PORT: &str = "7300";

/// The store the examples name, stood for by a fresh table on the PostgreSQL test server.
const STORE_PLACEHOLDER: &str = "postgres://app@db/app";

/// Where a checkout keeps the service's `.proto` files, which the gRPC examples compile.
const PROTO_DIR: &str = "crates/nononce-cli/proto";

/// A fenced code block: the line its fence is on, its language, its text.
struct Block {
    line: usize,
    lang: String,
    text: String,
}

fn fenced_blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(lang)) => {
                open = Some(Block {
                    line: n + 1,
                    lang: lang.trim().to_owned(),
                    text: String::new(),
                });
            }
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    out
}

/// The servers the examples of one source started, by the port they call each by.
struct Session {
    dir: tempfile::TempDir,
    servers: Vec<(String, Served)>,
    store: Option<String>,
    /// How many lines and blocks ran, by what ran them.
    ran: Vec<&'static str>,
    /// The variables `NAME=VALUE` lines set, for every command after them.
    vars: BTreeMap<String, String>,
}

impl Session {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            servers: Vec::new(),
            store: None,
            ran: Vec::new(),
            vars: BTreeMap::new(),
        }
    }

    fn store(&mut self) -> String {
        self.store
            .get_or_insert_with(|| sql_store(&pg_url()))
            .clone()
    }

    /// Starts the server of a `nononce serve ARGS` line: its stderr up to the serving line,
    /// with the address it got written as the example's.
    fn serve(&mut self, line: &str) -> String {
        let mut port = DEFAULT_PORT.to_owned();
        let mut args = Vec::new();
        let mut words = line.split_whitespace().skip(2);
        while let Some(word) = words.next() {
            match word {
                "--listen" => {
                    let addr = words.next().expect("--listen without an address");
                    port = addr.rsplit(':').next().unwrap().to_owned();
                }
                STORE_PLACEHOLDER => args.push(self.store()),
                other => args.push(other.to_owned()),
            }
        }
        // Stopped (SIGTERM) before its successor starts, as a user would stop it.
        self.servers.retain(|(p, _)| *p != port);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let served = Served::start(self.dir.path(), &args);
        let banner = served
            .banner
            .replace(&served.addr(), &format!("127.0.0.1:{port}"));
        self.servers.push((port, served));
        self.ran.push("nononce serve");
        banner
    }

    /// `text` with each server's example address replaced by its real one.
    fn localize(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (port, served) in &self.servers {
            for host in ["localhost", "127.0.0.1"] {
                text = text.replace(&format!("{host}:{port}"), &served.addr());
            }
        }
        text
    }

    /// Runs `program ARGS` in the scratch directory; `code` is the text it runs, to tell
    /// whether it needs the gRPC packages.
    fn run(&self, program: &str, args: &[&str], code: &str) -> Output {
        let bin_dir = bin().parent().unwrap().to_owned();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("XDG_STATE_HOME", state_home())
            .env_remove("NONONCE_STORE")
            .envs(&self.vars);
        match std::env::var("NONONCE_TEST_PYTHONPATH") {
            Ok(packages) => {
                command.env("PYTHONPATH", packages);
            }
            Err(_) if code.contains("grpc") => panic!(
                "NONONCE_TEST_PYTHONPATH is not set, and `{code}` needs grpcio: run the tests under `cargo xtask with-services`, which installs it and sets it"
            ),
            Err(_) => {}
        }
        command
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} (is it installed?): {e}"))
    }

    /// The repository's `.proto` files, at their path in a checkout, for the gRPC examples.
    fn copy_protos(&self) {
        let from = root().join(PROTO_DIR);
        let to = self.dir.path().join(PROTO_DIR);
        let mut folders = vec![(from, to)];
        while let Some((from, to)) = folders.pop() {
            std::fs::create_dir_all(&to).unwrap();
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                let target = to.join(entry.file_name());
                if entry.file_type().unwrap().is_dir() {
                    folders.push((entry.path(), target));
                } else {
                    std::fs::copy(entry.path(), target).unwrap();
                }
            }
        }
    }

    /// Runs a `NAME=VALUE` (or `export NAME=VALUE`) line, as a shell would, keeping the variable for what comes after:
    /// whether `command` was one.
    fn assign(&mut self, origin: &str, command: &str) -> bool {
        let Some((name, value)) = command
            .strip_prefix("export ")
            .unwrap_or(command)
            .split_once('=')
        else {
            return false;
        };
        let is_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        // One word: a command substitution, or a value without spaces (`NAME=x command` sets
        // a variable for that command only, and is a command).
        let one_word = (value.starts_with("$(") && value.ends_with(')'))
            || !value.contains(char::is_whitespace);
        if !is_name || !one_word {
            return false;
        }
        let script = format!("{name}={value} && printf %s \"${name}\"");
        let out = self.run("sh", &["-c", &script], command);
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "{origin}: `{command}` set nothing ({}): {}",
            out.status,
            stderr(&out).trim()
        );
        self.vars.insert(
            name.to_owned(),
            String::from_utf8(out.stdout).expect("a variable that is text"),
        );
        self.ran.push("sh");
        true
    }

    /// Runs one line of a script: its stdout.
    fn line(&mut self, origin: &str, line: &str) -> String {
        let (command, prints) = script_line(line);
        // As docs.rs reads it: what the README runs from a checkout is the installed command.
        let command = command.replace("cargo run -p nononce-cli -- ", "nononce ");
        if command.starts_with("nononce serve") {
            assert!(
                prints.is_none(),
                "{origin}: `{line}`: a server prints no result"
            );
            return self.serve(&command);
        }
        let mut command = self.localize(&command);
        if prints.is_none() && self.assign(origin, &command) {
            return String::new();
        }
        if command.contains(STORE_PLACEHOLDER) {
            let store = self.store();
            command = command.replace(STORE_PLACEHOLDER, &format!("'{store}'"));
        }
        let is_curl = command.starts_with("curl ");
        if is_curl {
            // Quiet, and a status of 400 or more fails the line: unless it shows an error.
            let shows_error = prints
                .as_deref()
                .is_some_and(|p| p.starts_with("{\"error\""));
            let flags = if shows_error {
                "-sS"
            } else {
                "-sS --fail-with-body"
            };
            command = format!("curl {flags} {}", &command["curl ".len()..]);
            self.ran.push("curl");
        } else {
            self.ran.push("sh");
        }
        let out = self.run("sh", &["-c", &command], &command);
        let stdout = String::from_utf8_lossy(&out.stdout).trim_end().to_owned();
        assert!(
            out.status.success(),
            "{origin}: `{line}` failed ({}): {stdout}{}",
            out.status,
            stderr(&out).trim()
        );
        if let Some(prints) = prints {
            assert!(
                matches(&prints, &stdout),
                "{origin}: `{line}` printed\n  {stdout}\nnot\n  {prints}"
            );
        }
        stdout
    }

    /// Runs a program block with `program`, from a file named `file`: its stdout.
    fn program(&mut self, origin: &str, program: &'static str, file: &str, text: &str) -> String {
        let path = self.dir.path().join(file);
        std::fs::write(&path, self.localize(text)).unwrap();
        let out = self.run(program, &[file], text);
        assert!(
            out.status.success(),
            "{origin}: {program} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
        self.ran.push(program);
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    }

    fn count(&self, what: &str) -> usize {
        self.ran.iter().filter(|r| **r == what).count()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The servers first: they hold the table's rows.
        self.servers.clear();
        if let Some(store) = &self.store {
            drop_table(store);
        }
    }
}

/// Whether `text` is `expected`, line by line, `…` standing for any text within a line.
fn assert_output(origin: &str, expected: &str, text: &str) {
    let expected: Vec<&str> = expected.trim_end().lines().collect();
    let got: Vec<&str> = text.trim_end().lines().collect();
    let agree =
        expected.len() == got.len() && expected.iter().zip(&got).all(|(e, g)| matches(e, g));
    assert!(
        agree,
        "{origin}: printed\n{}\nnot\n{}",
        got.join("\n"),
        expected.join("\n")
    );
}

/// Runs the code blocks of `markdown` (from `name`) in order, in one session.
fn run_markdown(name: &str, markdown: &str) -> Session {
    let mut session = Session::new();
    session.copy_protos();
    // What the last code block printed, for a `text` block after it.
    let mut printed: Option<String> = None;
    for block in fenced_blocks(markdown) {
        let origin = format!("{name}:{}", block.line);
        match block.lang.as_str() {
            "sh" => {
                let mut last = String::new();
                for command in commands(&block.text) {
                    last = session.line(&origin, &command);
                }
                printed = Some(last);
            }
            "python" => {
                printed = Some(session.program(&origin, "python3", "example.py", &block.text));
            }
            "js" => {
                printed = Some(session.program(&origin, "node", "example.mjs", &block.text));
            }
            "text" => {
                let got = printed.take().unwrap_or_else(|| {
                    panic!("{origin}: a text block shows what the code block before it prints, and there is none")
                });
                assert_output(&origin, &block.text, &got);
                session.ran.push("text");
            }
            // Formulas and other illustrations: read, not run.
            "" => printed = None,
            other => panic!("{origin}: a ```{other} block: say how to run it in serve_docs.rs"),
        }
    }
    session
}

/// The commands of an `sh` block: its lines but for blank ones and comments, a line opening
/// a here-document (`<<EOF`, `<<'EOF'`) joined with the lines up to the one that ends it.
fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = script.lines();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut command = line.to_owned();
        if let Some((_, rest)) = line.split_once("<<") {
            let word = rest.split_whitespace().next().unwrap_or_default();
            let end = word.trim_start_matches('-').trim_matches(['\'', '"']);
            assert!(
                !end.is_empty(),
                "`{line}`: a here-document without its end word"
            );
            loop {
                let body = lines
                    .next()
                    .unwrap_or_else(|| panic!("`{line}`: the here-document never ends ({end})"));
                command.push('\n');
                command.push_str(body);
                if body.trim() == end {
                    break;
                }
            }
        }
        out.push(command);
    }
    out
}

/// Asserts that `session` ran at least `least` examples of each kind: a change to a
/// document's layout that hides them from this test fails here.
fn assert_ran(name: &str, session: &Session, least: &[(&str, usize)]) {
    for &(what, least) in least {
        assert!(
            session.count(what) >= least,
            "{name}: {} {what} examples ran, not at least {least}",
            session.count(what)
        );
    }
}

#[test]
fn serve_md_examples_work_as_written() {
    let markdown = std::fs::read_to_string(root().join(SERVE_DOC)).unwrap();
    let session = run_markdown(SERVE_DOC, &markdown);
    assert_ran(
        SERVE_DOC,
        &session,
        &[
            ("nononce serve", 7),
            ("curl", 14),
            ("sh", 4),
            ("python3", 5),
            ("node", 1),
            ("text", 8),
        ],
    );
}

/// The README's section on `nononce serve`, from its heading to the next.
#[test]
fn readme_serve_section_works_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let heading = "## Serve nonces to other languages";
    let start = readme.find(heading).expect("the README's serve section");
    let rest = &readme[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let session = run_markdown("README.md (serve section)", section);
    assert_ran(
        "README.md",
        &session,
        &[("nononce serve", 1), ("curl", 1), ("text", 1)],
    );
}

/// The lines after `Examples:` of `nononce serve --help`, up to the next unindented line.
fn help_examples() -> Vec<String> {
    let help = run_ok(&["serve", "--help"]);
    help.lines()
        .skip_while(|l| *l != "Examples:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_owned())
        .collect()
}

#[test]
fn serve_help_examples_work_as_written() {
    let examples = help_examples();
    let mut session = Session::new();
    for line in &examples {
        session.line("nononce serve --help", line);
    }
    let curls = examples.iter().filter(|l| l.starts_with("curl ")).count();
    assert!(curls >= 5, "{examples:?}");
    assert_eq!(session.count("curl"), curls);
    assert!(session.count("nononce serve") >= 4, "{examples:?}");
    assert!(session.count("sh") >= 3, "{examples:?}");
}

/// A port in use fails at once, in one line naming the option to change, with no machine ID
/// leased (nor a store file left behind).
#[test]
fn port_in_use_fails_at_once_holding_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = std_nononce()
        .args(["serve", "--listen", &addr])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let message = assert_one_line_failure(&out, "serve on a port in use");
    assert_eq!(
        message.trim_end(),
        format!(
            "nononce: cannot listen on {addr}: the port is in use (another nononce serve?): pick another with --listen"
        )
    );
    assert!(!default_store_file().exists());
}

/// A `--listen` that is not an address says what it takes, before anything starts.
#[test]
fn listen_without_an_address_says_what_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    let out = std_nononce()
        .args(["serve", "--listen", ":7300"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let message = assert_one_line_exit(&out, "serve --listen :7300", 2);
    assert_eq!(
        message.trim_end(),
        "nononce: invalid value ':7300' for '--listen <ADDR>': give an IP address and a port: 127.0.0.1:7300 (this host only), 0.0.0.0:7300 (every interface) or [::]:7300 (see `nononce serve --help`)"
    );
    assert!(!default_store_file().exists());
}

/// SIGTERM: status 143, and one line naming each machine ID given back and its kind.
#[test]
fn sigterm_says_which_machine_ids_were_released() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &[]);
    assert!(
        matches(
            "nononce: serving on http://127.0.0.1:… (counter on machine id …, sortable on machine id …)",
            served.banner.trim_end()
        ),
        "{}",
        served.banner
    );
    let ready = served.json("/readyz");
    let id = |i: usize| ready["leases"][i]["machine_id"].as_u64().unwrap();
    let (status, rest) = served.signal("TERM");
    assert_eq!(status.code(), Some(143));
    assert_eq!(
        rest.trim_end(),
        format!(
            "nononce: stopped by SIGTERM: released machine id {} (counter), {} (sortable); free for another server after the 10 s release guard",
            id(0),
            id(1)
        )
    );
}

/// A release the store refuses (its table dropped under the server) is reported, even with
/// `--quiet`, with when the ID is free again; the exit status is still the signal's.
#[test]
fn a_failed_release_is_reported_even_when_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let store = sql_store(&pg_url());
    let server = QuietServer::start(dir.path(), &["--store", &store]);
    let ready = wait_until_answered(&format!("http://{}/readyz", server.addr));
    drop_table(&store);
    let (status, said) = server.stop("TERM");
    assert_eq!(ready, Some(200));
    assert_eq!(status.code(), Some(143));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    for (line, kind) in lines.iter().zip(["counter", "sortable"]) {
        assert!(
            matches(
                &format!(
                    "nononce: could not release machine id … ({kind}): table `…` does not exist in store …; it is free again when its lease runs out (within 2 min)"
                ),
                line
            ),
            "{line}"
        );
    }
}

/// GETs `url` until it answers, a bounded number of times: its status.
fn wait_until_answered(url: &str) -> Option<u16> {
    // Leasing two IDs from a fresh store is quick; the bound only keeps a broken server from
    // hanging the test.
    for _ in 0..300 {
        if let Ok(status) = agent_once(url) {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

/// `nononce serve --quiet --listen ADDR ARGS` on a port free a moment ago (`--quiet` prints
/// no serving line to learn a port from), in `dir`; stopped with SIGTERM on drop.
struct QuietServer {
    child: Option<std::process::Child>,
    addr: std::net::SocketAddr,
}

impl QuietServer {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = std_nononce()
            .args(["serve", "--quiet", "--listen", &addr.to_string()])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self {
            child: Some(child),
            addr,
        }
    }

    /// Sends `signal` and waits: the exit status and all it said on stderr.
    fn stop(mut self, signal: &str) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let status = crate::common::serve::stop(&mut child, signal);
        let mut said = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut said)
            .unwrap();
        (status, said)
    }
}

impl Drop for QuietServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::common::serve::terminate(&mut child);
        }
    }
}

/// `--quiet`: nothing on stderr from start to SIGINT, while it serves.
#[test]
fn quiet_serves_and_stops_without_a_word() {
    let dir = tempfile::tempdir().unwrap();
    let server = QuietServer::start(dir.path(), &[]);
    let answered = wait_until_answered(&format!("http://{}/readyz", server.addr));
    let (status, said) = server.stop("INT");
    assert_eq!(answered, Some(200));
    assert_eq!(status.code(), Some(130));
    assert_eq!(said, "");
    // Released all the same.
    let held = held(&default_store());
    assert_eq!(held.len(), 2, "{held:?}");
    for (_, left) in held {
        assert!(left <= RELEASE_GUARD_S, "{left}");
    }
}

/// One GET: its status, or the connection's error.
fn agent_once(url: &str) -> Result<u16, ureq::Error> {
    crate::common::serve::agent()
        .get(url)
        .call()
        .map(|r| r.status().as_u16())
}
