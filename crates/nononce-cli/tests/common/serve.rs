//! A running `nononce serve`, and an HTTP client for it.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use super::std_nononce;

/// `nononce serve` on a free loopback port, started in `dir`; stopped with SIGTERM on drop.
pub struct Served {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` (or `https://`).
    pub base: String,
    /// What it printed on stderr up to its "serving on" line.
    pub banner: String,
    stderr: Option<BufReader<std::process::ChildStderr>>,
}

impl Served {
    /// Starts `nononce serve --listen 127.0.0.1:0 ARGS` in `dir` and waits until it serves.
    // The child is waited for by `Drop` once returned, and before the panic when it exits early.
    #[allow(clippy::zombie_processes)]
    pub fn start(dir: &Path, args: &[&str]) -> Self {
        let mut child = std_nononce()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut banner = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("serve {args:?} exited ({status}) before serving: {banner}");
            }
            banner.push_str(&line);
            if let Some(rest) = line.trim().strip_prefix("nononce: serving on ") {
                let base = rest.split_whitespace().next().unwrap().to_owned();
                return Self {
                    child: Some(child),
                    base,
                    banner,
                    stderr: Some(stderr),
                };
            }
        }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        self.base.split("://").nth(1).unwrap().to_owned()
    }

    /// GET `path`: the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        get(&self.url(path), None)
    }

    /// GET `path` with `Authorization: Bearer TOKEN`.
    pub fn get_with_token(&self, path: &str, token: &str) -> (u16, String) {
        get(&self.url(path), Some(token))
    }

    /// GET `path` as JSON, requiring 200.
    pub fn json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The process ID, for signals.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends `signal` (a name for `kill -s`) and waits: the exit status and the rest of stderr.
    pub fn signal(mut self, signal: &str) -> (ExitStatus, String) {
        let status = stop(&mut self.child.take().unwrap(), signal);
        let mut rest = String::new();
        self.stderr
            .take()
            .unwrap()
            .read_to_string(&mut rest)
            .unwrap();
        (status, rest)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
        }
    }
}

/// Sends `signal` (a name for `kill -s`) to `child` and waits for it to exit.
pub fn stop(child: &mut Child, signal: &str) -> ExitStatus {
    let sent = std::process::Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait().unwrap()
}

/// Stops `child` with SIGTERM, if it still runs, and reaps it: for `Drop`, which must not panic.
pub fn terminate(child: &mut Child) {
    let _ = std::process::Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// An HTTP client that reports every status as it is (none is an error).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// GET `url`, with a bearer token when given: the status and the body.
pub fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = agent().get(url);
    if let Some(token) = token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .unwrap();
    (status, body)
}

/// POST `body` (JSON) to `url`: the status and the body.
pub fn post_json(url: &str, body: &str) -> (u16, String) {
    let mut response = agent()
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap();
    (status, body)
}
