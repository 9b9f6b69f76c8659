//! The HTTP/JSON API under `/v1`, and `/healthz`, `/readyz`, `/metrics` (docs/openapi.yaml
//! describes it; docs/serve.md shows it in use).

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};

use super::api::Api;
use super::listener::BodyTimeout;
use super::request::{
    ApiError, MAX_COUNT, MAX_RANGE, check_count, parse_bits, parse_count, parse_kind,
};
use crate::codec::{AnyNonce, Format, Input, Kind};

/// The largest request body taken (`POST /v1/decode`).
pub const MAX_BODY: usize = 64 * 1024;

/// The most nonces one `POST /v1/decode` reads.
pub const MAX_DECODE: usize = 1000;

/// Above this many nonces a request generates on a blocking thread: 64-bit counter nonces may
/// wait for the clock.
pub(super) const INLINE_COUNT: u64 = 1024;

type Shared = Arc<Api>;

/// The routes, on `api`.
pub fn router(api: Shared) -> Router {
    Router::new()
        .route("/v1/nonces", get(nonces))
        .route("/v1/nonces/range", get(range))
        .route("/v1/decode", axum::routing::post(decode_post))
        .route("/v1/decode/{nonce}", get(decode_get))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(api)
}

/// An error as JSON: `{"error": {"code": ..., "message": ...}}`.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (status, json_body(body.to_string())).into_response();
        let retry_after = self
            .retry_after
            .or((status == StatusCode::SERVICE_UNAVAILABLE
                || status == StatusCode::TOO_MANY_REQUESTS)
                .then_some(1));
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

fn json_body(text: String) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        text,
    )
}

/// The query's parameters, each named in `known` at most once.
fn params<'q>(
    query: Option<&'q str>,
    known: &[&'static str],
) -> Result<Vec<(&'static str, Cow<'q, str>)>, ApiError> {
    let mut out: Vec<(&'static str, Cow<'q, str>)> = Vec::new();
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let Some(&known_name) = known.iter().find(|k| **k == name) else {
            return Err(ApiError::bad_request(format!(
                "unknown parameter \"{}\": use {}",
                crate::codec::shown(&name),
                known.join(", ")
            )));
        };
        if out.iter().any(|(n, _)| *n == known_name) {
            return Err(ApiError::bad_request(format!(
                "parameter {known_name} is given twice: give it once"
            )));
        }
        out.push((known_name, value));
    }
    Ok(out)
}

fn param<'a>(params: &'a [(&'static str, Cow<'_, str>)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_ref())
}

fn parse_format(text: &str) -> Result<Format, ApiError> {
    super::request::parse_choice("format", text)
}

fn parse_input(text: &str) -> Result<Input, ApiError> {
    super::request::parse_choice("input", text)
}

/// Records the request's outcome and turns it into a response.
fn finish(
    api: &Api,
    operation: &'static str,
    started: Instant,
    result: Result<Response, ApiError>,
) -> Response {
    let response = result.unwrap_or_else(IntoResponse::into_response);
    api.metrics().request(
        operation,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

fn authorization(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
}

async fn nonces(
    State(api): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let started = Instant::now();
    let result = nonces_inner(&api, &headers, query.as_deref()).await;
    finish(&api, "nonces", started, result)
}

async fn nonces_inner(
    api: &Shared,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let params = params(query, &["kind", "bits", "count", "format"])?;
    let kind = param(&params, "kind").map_or(Ok(Kind::Counter), parse_kind)?;
    let bits = param(&params, "bits").map_or(Ok(64), parse_bits)?;
    let count =
        param(&params, "count").map_or(Ok(NonZeroU64::MIN), |c| parse_count(c, MAX_COUNT))?;
    let format = param(&params, "format").map_or(Ok(Format::Hex), parse_format)?;
    api.tokens()
        .check(authorization(headers), Some(kind), count.get())?;
    let nonces = if count.get() <= INLINE_COUNT {
        api.nonces(kind, bits, count)?
    } else {
        let api = Arc::clone(api);
        tokio::task::spawn_blocking(move || api.nonces(kind, bits, count))
            .await
            .map_err(|e| ApiError::new(500, "internal", format!("generation failed: {e}")))??
    };
    Ok(json_body(nonce_list(&nonces, format)).into_response())
}

/// `{"nonces":["...",...]}`, written directly: every entry is hex, base64url or digits, which
/// JSON takes as they are.
fn nonce_list(nonces: &[AnyNonce], format: Format) -> String {
    let mut out = String::with_capacity(16 + nonces.len() * 36);
    out.push_str("{\"nonces\":[");
    for (i, n) in nonces.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(&n.format(format));
        out.push('"');
    }
    out.push_str("]}");
    out
}

async fn range(
    State(api): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let started = Instant::now();
    let result = (|| {
        let params = params(query.as_deref(), &["bits", "count", "format"])?;
        let bits = param(&params, "bits").map_or(Ok(96), parse_bits)?;
        let count = match param(&params, "count") {
            Some(c) => parse_count(c, MAX_RANGE)?,
            None => check_count(1_000_000, MAX_RANGE)?,
        };
        let format = param(&params, "format").map_or(Ok(Format::Hex), parse_format)?;
        api.tokens()
            .check(authorization(&headers), Some(Kind::Counter), count.get())?;
        let range = api.range(bits, count)?;
        let encode = |v: u128| any_nonce(bits, v).format(format);
        let body = serde_json::json!({
            "bits": range.bits(),
            "machine_id": range.machine_id().get(),
            "timestamp_ms": range.timestamp_ms(),
            "first_count": range.first_count().to_string(),
            "count": range.len(),
            "count_bits": range.count_bits(),
            "first": encode(range.first()),
            "last": encode(range.last()),
        });
        Ok(json_body(body.to_string()).into_response())
    })();
    finish(&api, "range", started, result)
}

/// The nonce of `bits` bits whose integer is `value` (from a range: always of that size).
fn any_nonce(bits: u16, value: u128) -> AnyNonce {
    match bits {
        64 => AnyNonce::N64(nononce::Nonce64::from_u64(
            u64::try_from(value).unwrap_or(u64::MAX),
        )),
        96 => AnyNonce::N96(nononce::Nonce96::from_u128(value).unwrap_or_else(|| {
            nononce::Nonce96::from_u128(value & ((1 << 96) - 1)).expect("masked to 96 bits")
        })),
        _ => AnyNonce::N128(nononce::Nonce128::from_u128(value)),
    }
}

fn decoded_json(
    api: &Api,
    text: &str,
    input: Input,
    bits: Option<u16>,
) -> Result<serde_json::Value, ApiError> {
    let (nonce, d) = api.decode(text, input, bits)?;
    let mut value = crate::codec::decoded_json(&d);
    value["nonce"] = serde_json::Value::String(nonce.hex());
    Ok(value)
}

async fn decode_get(
    State(api): State<Shared>,
    headers: HeaderMap,
    nonce: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Response {
    let started = Instant::now();
    let result = (|| {
        let Path(nonce) = nonce.map_err(path_rejection)?;
        let params = params(query.as_deref(), &["input", "bits"])?;
        let input = param(&params, "input").map_or(Ok(Input::Auto), parse_input)?;
        let bits = param(&params, "bits").map(parse_bits).transpose()?;
        api.tokens().check(authorization(&headers), None, 0)?;
        let value = decoded_json(&api, &nonce, input, bits)?;
        Ok(json_body(value.to_string()).into_response())
    })();
    finish(&api, "decode", started, result)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeBody {
    nonces: Vec<String>,
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    bits: Option<u16>,
}

/// The body, whole, within `timeout`, of at most [`MAX_BODY`] bytes.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    timeout: BodyTimeout,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            413,
            "payload_too_large",
            format!(
                "the body is larger than {} KiB: send at most {MAX_DECODE} nonces per request",
                MAX_BODY / 1024
            ),
        )
    };
    // A body announced as too large is refused before any of it is waited for.
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|length| length > MAX_BODY as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(timeout.0, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let inner = e.into_inner();
            if inner
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(too_large())
            } else {
                // The body stream failed: the client closed or reset it before its end.
                Err(ApiError::bad_request(
                    "the body was cut off before its end: send the whole body",
                ))
            }
        }
        Err(_) => Err(ApiError::new(
            408,
            "request_timeout",
            format!(
                "the body did not arrive within {} s of the headers: send the whole body at once",
                timeout.0.as_secs_f64()
            ),
        )),
    }
}

/// The path's nonce could not be read: a path percent-decoded to bytes that are not UTF-8
/// (axum's own rejection is plain text).
fn path_rejection(rejection: PathRejection) -> ApiError {
    if rejection.status().is_client_error() {
        ApiError::bad_request(
            "malformed nonce: the path is not UTF-8 once percent-decoded; a nonce is hex digits, base64url characters or a decimal integer",
        )
    } else {
        ApiError::new(
            500,
            "internal",
            format!("the path could not be read: {}", rejection.body_text()),
        )
    }
}

/// Whether a Content-Type names JSON: the media type compared without case, parameters such
/// as `charset` allowed (RFC 9110, 8.3.1).
fn is_json(content_type: &HeaderValue) -> bool {
    content_type.to_str().is_ok_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
    })
}

async fn decode_post(
    State(api): State<Shared>,
    timeout: Option<Extension<BodyTimeout>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let timeout = timeout.map(|Extension(t)| t).unwrap_or_default();
    let body = match read_body(&headers, body, timeout).await {
        Ok(body) => body,
        Err(e) => return finish(&api, "decode", started, Err(e)),
    };
    let result = (|| {
        if headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| !is_json(t))
        {
            return Err(ApiError::new(
                415,
                "unsupported_media_type",
                "the body must be JSON: send Content-Type: application/json",
            ));
        }
        let body: DecodeBody = serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body is not {{\"nonces\": [\"...\"], \"input\": \"auto\", \"bits\": 64}}: {e}"
            ))
        })?;
        if body.nonces.is_empty() || body.nonces.len() > MAX_DECODE {
            return Err(ApiError::bad_request(format!(
                "nonces must hold 1 to {MAX_DECODE} entries, not {}",
                body.nonces.len()
            )));
        }
        let input = body.input.as_deref().map_or(Ok(Input::Auto), parse_input)?;
        let bits = body.bits.map(|b| parse_bits(&b.to_string())).transpose()?;
        api.tokens().check(authorization(&headers), None, 0)?;
        let decoded = body
            .nonces
            .iter()
            .enumerate()
            .map(|(i, text)| {
                decoded_json(&api, text, input, bits).map_err(|mut e| {
                    e.message = format!("nonces[{i}]: {}", e.message);
                    e
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json_body(serde_json::json!({ "decoded": decoded }).to_string()).into_response())
    })();
    finish(&api, "decode", started, result)
}

async fn healthz() -> Response {
    json_body("{\"status\":\"ok\"}".to_owned()).into_response()
}

async fn readyz(State(api): State<Shared>) -> Response {
    let leases: Vec<serde_json::Value> = api
        .lease_left()
        .into_iter()
        .map(|(kind, left)| {
            let machine_id = api.workers().factory(kind).and_then(|f| f.machine_id()).map(|m| m.get());
            serde_json::json!({ "kind": kind.name(), "machine_id": machine_id, "seconds_left": left })
        })
        .collect();
    match api.ready() {
        Ok(()) => json_body(serde_json::json!({ "status": "ready", "leases": leases }).to_string())
            .into_response(),
        Err(e) => {
            let body = serde_json::json!({
                "status": "not_ready",
                "error": { "code": e.code, "message": e.message },
                "leases": leases,
            });
            (StatusCode::SERVICE_UNAVAILABLE, json_body(body.to_string())).into_response()
        }
    }
}

async fn metrics(State(api): State<Shared>) -> Response {
    api.record_generation_metrics();
    let text = api.metrics().render(&api.lease_left());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        text,
    )
        .into_response()
}

async fn not_found() -> Response {
    ApiError::new(
        404,
        "not_found",
        "no such path: the API is under /v1 (docs/openapi.yaml); /healthz, /readyz and /metrics beside it",
    )
    .into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::new(
        405,
        "method_not_allowed",
        "this path does not take that method: POST /v1/decode, GET everywhere else",
    )
    .into_response()
}
