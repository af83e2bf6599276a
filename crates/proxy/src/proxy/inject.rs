//! Usage injection, the tap's side of it (the pure parts are
//! `tokentap_core::inject`): the one place a tap changes what it forwards,
//! opt-in per tap (`inject_usage`). The hooks call it at each point of a
//! request: `prepare` (request_filter: an eligible body read whole and
//! rewritten), `upstream_head` (its Content-Length), `request_body` (the
//! rewritten body sent instead), `response_head` (a stripper for a streamed
//! answer), `response_body` (the usage chunk the injection caused cut from
//! what the client receives). Everything it did is counted in
//! `tokentap_usage_injection_total`.
//!
//! Must not touch: measuring (the Meter sees the client's own body and the
//! upstream's own answer).

use super::headers::content_length;
use super::tap::Tap;
use super::RequestCtx;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::Result;
use tokentap_core::inject::{eligibility, rewrite, Eligibility, InjectResult, Out, UsageStripper};

/// What injection holds for one request.
#[derive(Default)]
pub struct Injection {
    /// The request body with `include_usage` added.
    body: Option<Bytes>,
    /// Cuts the usage chunk the injection caused from the response.
    stripper: Option<UsageStripper>,
}

impl Injection {
    /// Whether the response body is being rewritten (the raw relay, which
    /// forwards bytes as they came, must not take it).
    pub fn rewrites_response(&self) -> bool {
        self.stripper.is_some()
    }
}

/// `request_filter`: reads an eligible request's body whole (pingora keeps
/// it in its retry buffer and sends that upstream) and keeps the rewritten
/// body.
pub async fn prepare(tap: &Tap, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
    if !(ctx.measure && ctx.settings.config.inject_usage) {
        return Ok(());
    }
    let req = session.req_header();
    match eligibility(
        req.method == http::Method::POST,
        ctx.meter.dialect(),
        ctx.meter.operation(),
        content_length(&req.headers),
        req.headers.contains_key(http::header::TRANSFER_ENCODING),
    ) {
        Eligibility::NotApplicable => return Ok(()),
        Eligibility::TooLarge => {
            tap.injection(InjectResult::TooLarge);
            return Ok(());
        }
        Eligibility::Read => {}
    }
    session.enable_retry_buffering();
    while session.read_request_body().await?.is_some() {}
    let Some(body) = session.get_retry_buffer() else {
        tap.injection(InjectResult::TooLarge);
        return Ok(());
    };
    match rewrite(&body) {
        Ok(new) => {
            ctx.injection.body = Some(Bytes::from(new));
            tap.injection(InjectResult::Injected);
        }
        Err(skip) => tap.injection(skip.result()),
    }
    Ok(())
}

/// `upstream_request_filter`: the rewritten body's length.
pub fn upstream_head(ctx: &RequestCtx, upstream: &mut RequestHeader) -> Result<()> {
    if let Some(b) = &ctx.injection.body {
        upstream.insert_header(http::header::CONTENT_LENGTH, b.len().to_string())?;
    }
    Ok(())
}

/// `request_body_filter`, after the client's piece was measured: the
/// upstream gets the rewritten body (the whole body arrives here at once,
/// from the retry buffer, again on a retry).
pub fn request_body(ctx: &RequestCtx, body: &mut Option<Bytes>, end_of_stream: bool) {
    if let Some(new) = &ctx.injection.body {
        *body = end_of_stream.then(|| new.clone());
    }
}

/// `upstream_response_filter`: a successful streamed answer to a rewritten
/// request gets a stripper.
pub fn response_head(ctx: &mut RequestCtx, resp: &ResponseHeader, sse: bool) {
    if ctx.settings.config.inject_usage
        && ctx.injection.body.is_some()
        && resp.status.is_success()
        && sse
    {
        ctx.injection.stripper = Some(UsageStripper::default());
    }
}

/// `response_body_filter`: the usage chunk the injection caused is cut
/// from what the client receives; at the end, what happened is counted.
pub fn response_body(
    tap: &Tap,
    ctx: &mut RequestCtx,
    body: &mut Option<Bytes>,
    end_of_stream: bool,
) {
    let Some(stripper) = ctx.injection.stripper.as_mut() else {
        return;
    };
    let piece = body.as_deref().unwrap_or_default();
    if let Out::Bytes(b) = stripper.filter(piece, end_of_stream) {
        *body = (!b.is_empty()).then(|| Bytes::from(b));
    }
    if end_of_stream {
        if let Some(result) = stripper.result() {
            tap.injection(result);
        }
        ctx.injection.stripper = None;
    }
}
