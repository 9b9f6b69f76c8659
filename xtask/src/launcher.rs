//! Server processes xtask starts itself: the test suite's Valkey, Redis and etcd, and the chaos
//! runs' private coordinators (PostgreSQL primary and replica, MariaDB, Valkey/Redis, etcd).
//!
//! A [`Server`] is a command line, a loopback port, a log file and a readiness check. It is
//! started in the foreground as a child of this process, its output in its log, and counts as
//! up once the check answers; it is killed on drop. Each start runs the same command again, on
//! the same port and files, so a server killed by a fault comes back as it was.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its check, unless [`Server::timeout`] says otherwise.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a kill waits for a server to stop and for its children to exit.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a server on the loopback port answers.
type Ready = Box<dyn Fn(u16) -> bool + Send + Sync>;

/// One server: how to start it, and its process while it runs.
pub struct Server {
    name: String,
    program: OsString,
    args: Vec<OsString>,
    /// Variables set (`Some`) or removed (`None`) on top of this process's environment.
    env: Vec<(OsString, Option<OsString>)>,
    dir: Option<PathBuf>,
    port: u16,
    log: PathBuf,
    ready: Ready,
    timeout: Duration,
    forks: bool,
    child: Option<Child>,
    /// How long its last start took to answer.
    ready_in: Duration,
}

impl Server {
    /// `name` (for messages) started as `command` (its program, arguments, environment and
    /// working folder), listening on loopback `port`, its output in `log`, ready for clients
    /// once `ready` holds for its port. Nothing runs until [`Server::start`].
    pub fn new(
        name: impl Into<String>,
        command: &Command,
        port: u16,
        log: PathBuf,
        ready: impl Fn(u16) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            program: command.get_program().to_owned(),
            args: command.get_args().map(ToOwned::to_owned).collect(),
            env: command
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
            dir: command.get_current_dir().map(Path::to_path_buf),
            port,
            log,
            ready: Box::new(ready),
            timeout: START_TIMEOUT,
            forks: false,
            child: None,
            ready_in: Duration::ZERO,
        }
    }

    /// How long a start may take to answer the check.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The server forks processes of its own (PostgreSQL's backends, a shell's server): a
    /// kill takes them too, see [`kill_tree`].
    pub fn forks(mut self) -> Self {
        self.forks = true;
        self
    }

    /// Starts the server with a fresh log and waits until it answers.
    pub fn start(mut self) -> Result<Self, String> {
        fs::File::create(&self.log).map_err(|e| format!("{}: {e}", self.log.display()))?;
        self.launch()?;
        Ok(self)
    }

    /// Kills the server if it runs, starts it again on the same port and files (its log goes
    /// on), and waits until it answers.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.launch()
    }

    /// `kill -9`, of the processes it forked too ([`Server::forks`]); it stays down until
    /// [`Server::restart`].
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.forks {
            kill_tree(&mut child);
            return;
        }
        if let Err(e) = child.kill() {
            eprintln!(
                "xtask: could not stop {} on port {}: {e}",
                self.name, self.port
            );
        }
        let _ = child.wait();
    }

    pub fn is_down(&self) -> bool {
        self.child.is_none()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long the last start took to answer.
    pub fn ready_in(&self) -> Duration {
        self.ready_in
    }

    fn launch(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (key, value) in &self.env {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                format!(
                    "could not start {} ({}): {e}",
                    self.name,
                    Path::new(&self.program).display()
                )
            })?;
        let child = self.child.insert(child);
        let started = Instant::now();
        while started.elapsed() < self.timeout {
            if (self.ready)(self.port) {
                self.ready_in = started.elapsed();
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "{} exited ({status}) before answering on port {}; see {}",
                    self.name,
                    self.port,
                    self.log.display()
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "{} did not answer on port {} within {} s; see {}",
            self.name,
            self.port,
            self.timeout.as_secs(),
            self.log.display()
        ))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `program` on the `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

/// `kill -9` of a server and of every process it forked (PostgreSQL's backends): the server
/// is stopped first so it forks no more, its children are killed by parent ID, then the server.
/// Servers stay in the harness's process group, so a Ctrl-C reaches them too (PostgreSQL shuts
/// down on SIGINT; MariaDB ignores it and runs under a shell that kills it).
///
/// A stop takes effect some time after `kill` returns: the children are listed only once the
/// server is seen stopped, and the kill waits until each of them has exited. A backend forked
/// for a reconnect after the list was taken outlived its server, kept its shared memory
/// attached, and PostgreSQL refused to start again on that data ("pre-existing shared memory
/// block is still in use").
fn kill_tree(child: &mut Child) {
    let pid = child.id();
    let signal = |args: &[&str]| {
        let _ = Command::new(args[0])
            .args(&args[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    if let Ok(None) = child.try_wait() {
        let id = pid.to_string();
        signal(&["kill", "-STOP", &id]);
        wait_for(KILL_TIMEOUT, || process_state(pid).is_none_or(|s| s == 'T'));
        signal(&["pkill", "-9", "-P", &id]);
        // Killed children stay zombies (their parent is stopped) but have let go of
        // everything they held.
        wait_for(KILL_TIMEOUT, || live_children(pid) == 0);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Polls `done` until it holds or `timeout` passed.
fn wait_for(timeout: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() && started.elapsed() < timeout {
        thread::sleep(Duration::from_millis(10));
    }
}

/// A process's state letter (`R`, `S`, `T`, `Z`, ...) and its parent ID, from `/proc`.
fn process_stat(pid: &str) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": the command may hold spaces and parentheses.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// The state of process `pid`, `None` when it is gone.
fn process_state(pid: u32) -> Option<char> {
    process_stat(&pid.to_string()).map(|(state, _)| state)
}

/// How many children of `parent` have not exited (zombies have).
fn live_children(parent: u32) -> usize {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| process_stat(entry.file_name().to_str()?))
        .filter(|&(state, ppid)| ppid == parent && state != 'Z' && state != 'X')
        .count()
}

#[cfg(test)]
mod tests {
    use super::Server;
    use std::fs;
    use std::path::PathBuf;
    use std::process::Command;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xtask-launcher-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_restart_appends_to_the_log_and_a_new_start_begins_a_fresh_one() {
        let dir = scratch("restart");
        let log = dir.join("server.log");
        let marker = dir.join("ready");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo $GREETING; touch ready; exec sleep 60"])
            .env("GREETING", "up")
            .current_dir(&dir);
        let sleeper = |log: &PathBuf| {
            let marker = marker.clone();
            Server::new("sleeper", &cmd, 1, log.clone(), move |_| marker.exists())
        };
        let mut server = sleeper(&log).start().unwrap();
        assert!(!server.is_down());
        server.kill();
        assert!(server.is_down());
        fs::remove_file(&marker).unwrap();
        server.restart().unwrap();
        drop(server);
        assert_eq!(fs::read_to_string(&log).unwrap(), "up\nup\n");
        fs::remove_file(&marker).unwrap();
        drop(sleeper(&log).start().unwrap());
        assert_eq!(fs::read_to_string(&log).unwrap(), "up\n");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_server_that_exits_before_it_answers_is_an_error_naming_its_log() {
        let dir = scratch("exits");
        let err = Server::new(
            "quitter",
            &Command::new("false"),
            7,
            dir.join("q.log"),
            |_| false,
        )
        .start()
        .err()
        .unwrap();
        assert!(err.starts_with("quitter exited"), "{err}");
        assert!(err.contains("port 7") && err.contains("q.log"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }
}
