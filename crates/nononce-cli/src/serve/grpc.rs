//! The gRPC API (`proto/nononce/v1/nonces.proto`), on the HTTP router's port: the operations of
//! `http.rs` on the same [`Api`], behind the same tokens (the `authorization: Bearer ...`
//! metadata is the HTTP header) and counted in the same metrics, under operations named
//! `grpc_*`.
//!
//! Nonces travel as their big-endian bytes, one after another. A streaming call generates one
//! batch at a time on a blocking thread (64-bit counter nonces may wait for the clock) into a
//! bounded channel: a slow client slows the generation rather than filling memory, no thread
//! is held while the client catches up, and a client that goes away stops it. A batch of
//! counter nonces is expanded from counter ranges (`stream_batch`): about half the server time
//! per nonce of one call per nonce.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

use super::api::Api;
use super::http::{INLINE_COUNT, MAX_BODY};
use super::request::{ApiError, MAX_COUNT, MAX_RANGE, MAX_STREAM, check_count, parse_bits};
use crate::codec::{AnyNonce, Input, Kind};

/// The code generated from the `.proto`, checked in (the `nononce-grpc-code` crate generates it
/// again and its test fails when it differs).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!("nononce.v1.rs");
}

use proto::nonces_server::{Nonces, NoncesServer};
use proto::{CounterRange, DecodeRequest, Decoded, NonceBatch, NoncesRequest, RangeRequest};

/// The most nonces one streamed batch holds: 32 KiB of 64-bit nonces, half a millisecond of a
/// 64-bit counter.
pub const BATCH: u64 = 4096;

/// Batches generated ahead of what the client has read.
const AHEAD: usize = 4;

/// The `status` recorded for a stream whose client went away before its end (as proxies log
/// a client that closed the request).
const CLIENT_GONE: u16 = 499;

/// The gRPC service's routes on `api`, to merge into the HTTP router: every method of
/// `nononce.v1.Nonces` (an unknown one answers UNIMPLEMENTED).
pub fn router(api: Arc<Api>) -> axum::Router {
    // A request is a few numbers or a nonce: the HTTP body limit, not tonic's 4 MiB, keeps a
    // huge one from being read at all.
    let service = NoncesServer::new(Service { api }).max_decoding_message_size(MAX_BODY);
    axum::Router::new().route_service(
        &format!("/{}/{{*method}}", proto::nonces_server::SERVICE_NAME),
        service,
    )
}

/// The status of an API error: the code nearest its HTTP status, the same sentence.
impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        let code = match e.status {
            400 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            429 => Code::ResourceExhausted,
            503 => Code::Unavailable,
            _ => Code::Internal,
        };
        Self::new(code, e.message)
    }
}

struct Service {
    api: Arc<Api>,
}

/// A request's `kind`; KIND_UNSPECIFIED is counter, as a missing `kind` is over HTTP.
fn kind(value: i32) -> Result<Kind, ApiError> {
    match proto::Kind::try_from(value) {
        Ok(proto::Kind::Unspecified | proto::Kind::Counter) => Ok(Kind::Counter),
        Ok(proto::Kind::Sortable) => Ok(Kind::Sortable),
        Ok(proto::Kind::Encrypted) => Ok(Kind::Encrypted),
        Err(_) => Err(ApiError::bad_request(format!(
            "unknown kind {value}: use KIND_COUNTER, KIND_SORTABLE or KIND_ENCRYPTED"
        ))),
    }
}

/// A request's `bits`; 0 (not set) is `default`.
fn bits(value: u32, default: u16) -> Result<u16, ApiError> {
    if value == 0 {
        Ok(default)
    } else {
        parse_bits(&value.to_string())
    }
}

fn input(value: i32) -> Result<Input, ApiError> {
    match proto::Input::try_from(value) {
        Ok(proto::Input::Auto) => Ok(Input::Auto),
        Ok(proto::Input::Hex) => Ok(Input::Hex),
        Ok(proto::Input::Base64url) => Ok(Input::Base64url),
        Ok(proto::Input::Int) => Ok(Input::Int),
        Err(_) => Err(ApiError::bad_request(format!(
            "unknown input {value}: use INPUT_AUTO, INPUT_HEX, INPUT_BASE64URL or INPUT_INT"
        ))),
    }
}

fn authorization<T>(request: &Request<T>) -> Option<&[u8]> {
    request
        .metadata()
        .get("authorization")
        .map(tonic::metadata::MetadataValue::as_bytes)
}

/// Appends each nonce's big-endian bytes to `out`.
fn put_bytes(nonces: &[AnyNonce], out: &mut Vec<u8>) {
    for nonce in nonces {
        match nonce {
            AnyNonce::N64(n) => out.extend_from_slice(n.as_bytes()),
            AnyNonce::N96(n) => out.extend_from_slice(n.as_bytes()),
            AnyNonce::N128(n) => out.extend_from_slice(n.as_bytes()),
        }
    }
}

fn batch(bits: u16, nonces: &[AnyNonce]) -> NonceBatch {
    let mut bytes = Vec::with_capacity(nonces.len() * usize::from(bits / 8));
    put_bytes(nonces, &mut bytes);
    NonceBatch {
        bits: bits.into(),
        nonces: bytes,
    }
}

/// The `bits / 8` big-endian bytes of a nonce of `bits` bits given as an integer.
fn integer_bytes(bits: u16, value: u128) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    put_integer(bits, value, &mut out);
    out
}

fn put_integer(bits: u16, value: u128, out: &mut Vec<u8>) {
    out.extend_from_slice(&value.to_be_bytes()[16 - usize::from(bits / 8)..]);
}

/// One streamed batch of `n` nonces. Counter nonces come as counter ranges, expanded here: one
/// reservation per range instead of one call per nonce, the same values a client expanding
/// the range would compute (a 64-bit range may be short: the rest comes from the next one).
fn stream_batch(api: &Api, kind: Kind, bits: u16, n: NonZeroU64) -> Result<NonceBatch, ApiError> {
    if kind != Kind::Counter {
        return api.nonces(kind, bits, n).map(|nonces| batch(bits, &nonces));
    }
    let mut bytes =
        Vec::with_capacity(usize::try_from(n.get()).unwrap_or(0) * usize::from(bits / 8));
    let mut left = n.get();
    while let Some(want) = NonZeroU64::new(left) {
        let range = api.range(bits, want)?;
        for i in 0..range.len() {
            put_integer(bits, range.nth(i).unwrap_or_default(), &mut bytes);
        }
        left -= range.len();
    }
    Ok(NonceBatch {
        bits: bits.into(),
        nonces: bytes,
    })
}

/// Records a call's outcome and turns it into a response.
fn finish<T>(
    api: &Api,
    operation: &'static str,
    started: Instant,
    result: Result<T, ApiError>,
) -> Result<Response<T>, Status> {
    let status = result.as_ref().map_or_else(|e| e.status, |_| 200);
    api.metrics()
        .request(operation, status, started.elapsed().as_secs_f64());
    result.map(Response::new).map_err(Status::from)
}

fn internal(e: &tokio::task::JoinError) -> ApiError {
    ApiError::new(500, "internal", format!("generation failed: {e}"))
}

impl Service {
    async fn nonces(&self, request: &Request<NoncesRequest>) -> Result<NonceBatch, ApiError> {
        let r = request.get_ref();
        let kind = kind(r.kind)?;
        let bits = bits(r.bits, 64)?;
        let count = check_count(r.count, MAX_COUNT)?;
        self.api
            .tokens()
            .check(authorization(request), Some(kind), count.get())?;
        let nonces = if count.get() <= INLINE_COUNT {
            self.api.nonces(kind, bits, count)?
        } else {
            let api = Arc::clone(&self.api);
            tokio::task::spawn_blocking(move || api.nonces(kind, bits, count))
                .await
                .map_err(|e| internal(&e))??
        };
        Ok(batch(bits, &nonces))
    }

    /// Checks a streaming call and charges its first batch to the caller's token: what fails
    /// here is the call's status, before any nonce.
    fn stream_start(
        &self,
        request: &Request<NoncesRequest>,
    ) -> Result<(Kind, u16, NonZeroU64), ApiError> {
        let r = request.get_ref();
        let kind = kind(r.kind)?;
        let bits = bits(r.bits, 64)?;
        let count = check_count(r.count, MAX_STREAM)?;
        self.api
            .tokens()
            .check(authorization(request), Some(kind), count.get().min(BATCH))?;
        Ok((kind, bits, count))
    }

    fn range(&self, request: &Request<RangeRequest>) -> Result<CounterRange, ApiError> {
        let r = request.get_ref();
        let bits = bits(r.bits, 96)?;
        let count = check_count(r.count, MAX_RANGE)?;
        self.api
            .tokens()
            .check(authorization(request), Some(Kind::Counter), count.get())?;
        let range = self.api.range(bits, count)?;
        Ok(CounterRange {
            bits: range.bits().into(),
            machine_id: range.machine_id().get().into(),
            timestamp_ms: range.timestamp_ms(),
            first_count: range.first_count(),
            count: range.len(),
            count_bits: range.count_bits(),
            first: integer_bytes(bits, range.first()),
            last: integer_bytes(bits, range.last()),
        })
    }

    fn decode(&self, request: &Request<DecodeRequest>) -> Result<Decoded, ApiError> {
        let r = request.get_ref();
        let input = input(r.input)?;
        let bits = match r.bits {
            0 => None,
            b => Some(parse_bits(&b.to_string())?),
        };
        self.api.tokens().check(authorization(request), None, 0)?;
        let (nonce, d) = self.api.decode(&r.nonce, input, bits).map_err(|mut e| {
            // HTTP's `input=hex`, `input=base64url` and `input=int`, in this API's words.
            e.message = e
                .message
                .replace("input=hex", "input INPUT_HEX")
                .replace("input=base64url", "input INPUT_BASE64URL")
                .replace("input=int", "input INPUT_INT");
            e
        })?;
        Ok(Decoded {
            nonce: nonce.hex(),
            bits: d.bits.into(),
            timestamp_ms: d.timestamp_ms,
            unix_ms: d.unix_ms,
            time: crate::codec::rfc3339(d.unix_ms).unwrap_or_default(),
            machine_id: d.machine_id.get().into(),
            count: d.count,
        })
    }
}

/// Generates `count` nonces into `tx`, a batch at a time, each once the client has room for
/// it; every batch after the first is charged to `authorization`'s token as it comes. Ends
/// with the error that stopped it, if any, as the stream's last item.
async fn stream(
    api: Arc<Api>,
    (kind, bits, count): (Kind, u16, NonZeroU64),
    authorization: Option<Vec<u8>>,
    tx: mpsc::Sender<Result<NonceBatch, Status>>,
    started: Instant,
) {
    let mut left = count.get();
    let status = loop {
        let Some(n) = NonZeroU64::new(left.min(BATCH)) else {
            break 200;
        };
        let Ok(room) = tx.reserve().await else {
            break CLIENT_GONE;
        };
        // The first batch was charged when the call was checked.
        if left < count.get()
            && let Err(e) = api
                .tokens()
                .check(authorization.as_deref(), Some(kind), n.get())
        {
            let status = e.status;
            room.send(Err(e.into()));
            break status;
        }
        let generated = {
            let api = Arc::clone(&api);
            tokio::task::spawn_blocking(move || stream_batch(&api, kind, bits, n))
                .await
                .map_err(|e| internal(&e))
                .and_then(|generated| generated)
        };
        match generated {
            Ok(batch) => {
                room.send(Ok(batch));
                left -= n.get();
            }
            Err(e) => {
                let status = e.status;
                room.send(Err(e.into()));
                break status;
            }
        }
    };
    api.metrics()
        .request("grpc_stream", status, started.elapsed().as_secs_f64());
}

#[tonic::async_trait]
impl Nonces for Service {
    async fn get_nonces(
        &self,
        request: Request<NoncesRequest>,
    ) -> Result<Response<NonceBatch>, Status> {
        let started = Instant::now();
        let result = self.nonces(&request).await;
        finish(&self.api, "grpc_nonces", started, result)
    }

    type StreamNoncesStream = ReceiverStream<Result<NonceBatch, Status>>;

    async fn stream_nonces(
        &self,
        request: Request<NoncesRequest>,
    ) -> Result<Response<Self::StreamNoncesStream>, Status> {
        let started = Instant::now();
        let checked = match self.stream_start(&request) {
            Ok(checked) => checked,
            Err(e) => return finish(&self.api, "grpc_stream", started, Err(e)),
        };
        let (tx, rx) = mpsc::channel(AHEAD);
        let authorization = authorization(&request).map(<[u8]>::to_vec);
        tokio::spawn(stream(
            Arc::clone(&self.api),
            checked,
            authorization,
            tx,
            started,
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<CounterRange>, Status> {
        let started = Instant::now();
        let result = self.range(&request);
        finish(&self.api, "grpc_range", started, result)
    }

    async fn decode(&self, request: Request<DecodeRequest>) -> Result<Response<Decoded>, Status> {
        let started = Instant::now();
        let result = Service::decode(self, &request);
        finish(&self.api, "grpc_decode", started, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_their_sentence_under_the_nearest_code() {
        for (status, code) in [
            (400, Code::InvalidArgument),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::NotFound),
            (415, Code::Internal),
            (429, Code::ResourceExhausted),
            (500, Code::Internal),
            (503, Code::Unavailable),
        ] {
            let e = ApiError::new(
                status,
                "any",
                format!("what went wrong {status}: what to do"),
            );
            let s = Status::from(e);
            assert_eq!(s.code(), code, "{status}");
            assert_eq!(s.message(), format!("what went wrong {status}: what to do"));
        }
    }

    #[test]
    fn unset_fields_take_the_http_defaults_and_unknown_values_are_refused() {
        assert_eq!(kind(0), Ok(Kind::Counter));
        assert_eq!(kind(proto::Kind::Sortable as i32), Ok(Kind::Sortable));
        assert_eq!(kind(proto::Kind::Encrypted as i32), Ok(Kind::Encrypted));
        assert_eq!(kind(-1).unwrap_err().status, 400);
        assert_eq!(bits(0, 96), Ok(96));
        assert_eq!(bits(128, 64), Ok(128));
        assert_eq!(bits(65, 64), parse_bits("65"));
        assert_eq!(input(0), Ok(Input::Auto));
        assert_eq!(input(proto::Input::Int as i32), Ok(Input::Int));
        assert_eq!(input(4).unwrap_err().status, 400);
    }

    #[test]
    fn nonces_and_range_ends_are_their_big_endian_bytes() {
        let nonces = [
            AnyNonce::N96(nononce::Nonce96::from_u128(0x0102_0304_0506_0708_090a_0b0c).unwrap()),
            AnyNonce::N96(nononce::Nonce96::from_u128(0x0d).unwrap()),
        ];
        let b = batch(96, &nonces);
        assert_eq!(b.bits, 96);
        assert_eq!(b.nonces[..12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(b.nonces[12..], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13]);
        assert_eq!(
            integer_bytes(64, 0x0102_0304_0506_0708),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(integer_bytes(128, 1).len(), 16);
    }
}
