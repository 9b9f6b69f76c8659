//! The harness's binaries as the orchestrator (`cargo xtask chaos`) drives them: `chaos-proxy`'s
//! line protocol on stdin and stdout, and `chaos-check` on a file that is not a node's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::thread;

/// A loopback server that echoes every connection back; returns its address.
fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            thread::spawn(move || {
                let mut reader = stream.try_clone().unwrap();
                let mut writer = stream;
                let _ = std::io::copy(&mut reader, &mut writer);
            });
        }
    });
    addr
}

/// Sends `bytes` through a fresh connection to `port` and reads the answer until the other side
/// closes; `Err` when the connection is refused or reset.
fn round_trip(port: u16, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(bytes)?;
    stream.shutdown(Shutdown::Write)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(answer)
}

#[test]
fn the_proxy_forwards_obeys_its_commands_and_ends_with_its_stdin() {
    let upstream = echo_server();
    let mut proxy = Command::new(env!("CARGO_BIN_EXE_chaos-proxy"))
        .args(["--upstream", &upstream.to_string(), "--count", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = proxy.stdin.take().unwrap();
    let mut lines = BufReader::new(proxy.stdout.take().unwrap()).lines();
    let ports: Vec<u16> = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("ports ")
        .expect("the first line lists the ports")
        .split(' ')
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(ports.len(), 2);
    // Owns stdin: dropping it closes the proxy's stdin.
    let mut command = move |line: &str| {
        writeln!(stdin, "{line}").unwrap();
        lines.next().unwrap().unwrap()
    };

    for &port in &ports {
        assert_eq!(round_trip(port, b"lease 7").unwrap(), b"lease 7");
    }
    // One proxy resets its connections; the other still forwards.
    assert_eq!(command("mode 0 reset"), "ok");
    assert!(
        round_trip(ports[0], b"lease 7").map_or(true, |answer| answer.is_empty()),
        "a resetting proxy forwarded"
    );
    assert_eq!(round_trip(ports[1], b"lease 8").unwrap(), b"lease 8");
    assert_eq!(command("mode all pass"), "ok");
    assert_eq!(round_trip(ports[0], b"lease 9").unwrap(), b"lease 9");
    // Bad commands are answered, not fatal.
    assert!(command("mode 2 pass").starts_with("error no proxy 2"));
    assert!(command("mode all sideways").starts_with("error unknown proxy mode"));
    assert!(command("upstream all nowhere").starts_with("error nowhere"));
    assert_eq!(round_trip(ports[1], b"still").unwrap(), b"still");

    drop(command);
    assert!(
        proxy.wait().unwrap().success(),
        "exits when its stdin closes"
    );
}

#[test]
fn the_checker_refuses_a_file_that_is_not_a_node_file() {
    let dir = std::env::temp_dir().join(format!("chaos-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("node-0.bin"), [0xff; 32]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_chaos-check"))
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("node-0.bin"), "names the file: {stderr}");
}
