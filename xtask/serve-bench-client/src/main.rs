//! Streams 64-bit IDs from a gRPC server on loopback and prints how many arrived and how fast,
//! for `cargo xtask serve-bench`:
//!
//! ```text
//! serve-bench-client ferroid http://127.0.0.1:50051 STREAMS COUNT
//! serve-bench-client nononce http://127.0.0.1:7300 STREAMS COUNT
//! ```
//!
//! opens STREAMS connections at once, each asking for one stream of COUNT IDs (ferroid's
//! `StreamIds`; nononce's `StreamNonces` of 64-bit counter nonces), and prints one
//! line, `ids=N seconds=S unique=true`: the IDs received, the wall time from the first request
//! to the last ID, and whether all of them were distinct (checked after the clock stopped).
//! It fails when a stream ends short or an ID is not 8 bytes.

use std::process::ExitCode;
use std::time::Instant;

use ferroid_tonic_core::proto::StreamIdsRequest;
use ferroid_tonic_core::proto::id_generator_client::IdGeneratorClient;
use tonic::transport::Channel;

use nononce_v1::nonces_client::NoncesClient;
use nononce_v1::{Kind, NoncesRequest};

mod nononce_v1 {
    tonic::include_proto!("nononce.v1");
}

const USAGE: &str = "usage: serve-bench-client ferroid|nononce URL STREAMS COUNT";

/// The server streamed from.
#[derive(Clone, Copy)]
enum Server {
    Ferroid,
    Nononce,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.as_slice() {
        [server, url, streams, count] if server == "ferroid" || server == "nononce" => {
            let server = if server == "ferroid" {
                Server::Ferroid
            } else {
                Server::Nononce
            };
            match (streams.parse::<usize>(), count.parse::<u64>()) {
                (Ok(streams), Ok(count)) if streams > 0 && count > 0 => {
                    Ok((server, url.clone(), streams, count))
                }
                _ => Err(format!(
                    "STREAMS and COUNT must be positive integers, not \"{streams}\" and \"{count}\"\n{USAGE}"
                )),
            }
        }
        _ => Err(USAGE.to_owned()),
    };
    let (server, url, streams, count) = match parsed {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("serve-bench-client: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(server, &url, streams, count)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("serve-bench-client: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(server: Server, url: &str, streams: usize, count: u64) -> Result<String, String> {
    // Connected before the clock starts: the figure is the streaming, not the handshakes.
    let mut channels = Vec::with_capacity(streams);
    for _ in 0..streams {
        let channel = Channel::from_shared(url.to_owned())
            .map_err(|e| format!("{url} is not a URL: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        channels.push(channel);
    }
    let started = Instant::now();
    let tasks: Vec<_> = channels
        .into_iter()
        .map(|channel| match server {
            Server::Ferroid => tokio::spawn(ferroid_stream(
                IdGeneratorClient::new(channel).max_decoding_message_size(64 << 20),
                count,
            )),
            Server::Nononce => tokio::spawn(nononce_stream(
                NoncesClient::new(channel).max_decoding_message_size(64 << 20),
                count,
            )),
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.extend(task.await.map_err(|e| format!("a stream failed: {e}"))??);
    }
    let seconds = started.elapsed().as_secs_f64();
    let received = ids.len();
    ids.sort_unstable();
    ids.dedup();
    Ok(format!(
        "ids={received} seconds={seconds:.6} unique={}",
        ids.len() == received
    ))
}

/// One stream of `count` IDs, decoded from the little-endian 8-byte words of each chunk.
async fn ferroid_stream(
    mut client: IdGeneratorClient<Channel>,
    count: u64,
) -> Result<Vec<u64>, String> {
    let mut stream = client
        .stream_ids(StreamIdsRequest { count })
        .await
        .map_err(|e| format!("StreamIds failed: {e}"))?
        .into_inner();
    let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|e| format!("the stream broke: {e}"))?
    {
        let words = chunk.packed_ids.chunks_exact(8);
        if !words.remainder().is_empty() {
            return Err(format!(
                "a chunk of {} bytes is not a whole number of 8-byte IDs",
                chunk.packed_ids.len()
            ));
        }
        ids.extend(words.map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))));
    }
    if ids.len() as u64 == count {
        Ok(ids)
    } else {
        Err(format!(
            "asked for {count} IDs, the stream ended after {}",
            ids.len()
        ))
    }
}

/// One stream of `count` 64-bit counter nonces, decoded from the big-endian 8-byte words of
/// each batch.
async fn nononce_stream(mut client: NoncesClient<Channel>, count: u64) -> Result<Vec<u64>, String> {
    let request = NoncesRequest {
        kind: Kind::Counter.into(),
        bits: 64,
        count,
    };
    let mut stream = client
        .stream_nonces(request)
        .await
        .map_err(|e| format!("StreamNonces failed: {e}"))?
        .into_inner();
    let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    while let Some(batch) = stream
        .message()
        .await
        .map_err(|e| format!("the stream broke: {e}"))?
    {
        let words = batch.nonces.chunks_exact(8);
        if batch.bits != 64 || !words.remainder().is_empty() {
            return Err(format!(
                "a batch of {} bytes of {}-bit nonces is not a whole number of 64-bit nonces",
                batch.nonces.len(),
                batch.bits
            ));
        }
        ids.extend(words.map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes"))));
    }
    if ids.len() as u64 == count {
        Ok(ids)
    } else {
        Err(format!(
            "asked for {count} nonces, the stream ended after {}",
            ids.len()
        ))
    }
}
