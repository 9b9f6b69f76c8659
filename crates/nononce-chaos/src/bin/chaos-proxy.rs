//! `chaos-proxy --upstream ADDR --count N`: N TCP proxies on free loopback ports, one per chaos
//! node, all forwarding to ADDR (see `nononce_chaos::proxy`).
//!
//! Prints `ports P1 P2 ...` once listening, then takes one command per stdin line and answers
//! `ok` or `error ...`:
//!
//! - `mode I|all pass|stall|reset|delay:MS`
//! - `upstream I|all HOST:PORT`
//!
//! Exits when stdin closes, so it never outlives the orchestrator.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use nononce_chaos::proxy::{Mode, Proxy};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(Parser)]
#[command(about = "TCP proxies for the nononce chaos harness")]
struct Cli {
    /// Where every proxy forwards to at first.
    #[arg(long)]
    upstream: SocketAddr,
    /// How many proxies.
    #[arg(long, default_value_t = 1)]
    count: usize,
}

fn main() -> ExitCode {
    nononce_chaos::block_on("chaos-proxy", run(Cli::parse()))
}

async fn run(cli: Cli) -> Result<(), String> {
    let mut proxies = Vec::with_capacity(cli.count);
    for _ in 0..cli.count {
        proxies.push(
            Proxy::start(cli.upstream)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let mut out = tokio::io::stdout();
    let ports: Vec<String> = proxies
        .iter()
        .map(|p| p.addr().port().to_string())
        .collect();
    let say = |line: String| format!("{line}\n").into_bytes();
    out.write_all(&say(format!("ports {}", ports.join(" "))))
        .await
        .map_err(|e| e.to_string())?;
    out.flush().await.map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let answer = match command(&proxies, &line) {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("error {e}"),
        };
        if out.write_all(&say(answer)).await.is_err() || out.flush().await.is_err() {
            break;
        }
    }
    Ok(())
}

fn command(proxies: &[Proxy], line: &str) -> Result<(), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [verb, which, arg] = words[..] else {
        return Err(format!("expected three words: {line:?}"));
    };
    let targets: Vec<&Proxy> = if which == "all" {
        proxies.iter().collect()
    } else {
        let i: usize = which
            .parse()
            .map_err(|_| format!("bad proxy index {which:?}"))?;
        vec![proxies.get(i).ok_or_else(|| format!("no proxy {i}"))?]
    };
    match verb {
        "mode" => {
            let mode: Mode = arg.parse()?;
            targets.iter().for_each(|p| p.set(mode));
        }
        "upstream" => {
            let addr: SocketAddr = arg.parse().map_err(|e| format!("{arg}: {e}"))?;
            targets.iter().for_each(|p| p.set_upstream(addr));
        }
        _ => return Err(format!("unknown command {verb:?}: use mode or upstream")),
    }
    Ok(())
}
