//! The pingora side: `TapProxy` implements `ProxyHttp` with thin hooks that
//! timestamp, hand bytes to the `Meter` and never touch what is forwarded.
//!
//! The one change toward the upstream is `Accept-Encoding: identity` (on by
//! default, per tap) so bodies can be read; request bodies are copied (capped)
//! as they pass, never held — except with usage injection (opt-in per tap,
//! `tokentap_core::inject`), where a small streaming request body is read whole in
//! `request_filter`, rewritten, and the usage chunk it causes is cut in
//! `response_body_filter`. The one change of pingora's own behaviour is the
//! workaround for pingora #935 (an empty final request-body piece from an h2
//! client would be written as a second chunked terminator).
//!
//! Usage injection's every step is `inject`'s; the hooks call it.
//!
//! Hook order for one request: `new_ctx` (t0) → `early_request_filter`
//! (path, request id) → `request_filter` (usage injection) →
//! `upstream_peer` → `upstream_request_filter` →
//! `request_body_filter`* → `upstream_response_filter` (TTFB) →
//! `upstream_response_body_filter`* (every piece: its arrival, held) →
//! `response_tasks_written`* (after each write: the held pieces decoded, `held`)
//! → `relay_raw_response_body` (the rest of a chunked body, scanned,
//! forwarded as it came, then decoded: `raw_body`) → `logging` (close the
//! record, emit it).

mod arrival;
mod call_hooks;
mod ctx;
pub mod errors;
mod headers;
mod held;
mod inject;
mod raw_body;
mod stale;
mod tap;
pub mod upstream_io;

pub use ctx::RequestCtx;
#[cfg(feature = "fault-injection")]
pub use ctx::STALL;
pub use tap::{Tap, TapAnalysis, TapParts, TapSettings};

use crate::sinks::Finished;
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{ProxyHttp, RawBodyRelay, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorSource, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::limits::{self, HeadSize, RejectReason};

/// The proxy of one tap.
pub struct TapProxy {
    tap: Arc<Tap>,
}

impl TapProxy {
    pub fn new(tap: Arc<Tap>) -> Self {
        TapProxy { tap }
    }
}

use headers::content_length;

/// The request head as the size limits count it.
fn head_size(req: &RequestHeader) -> HeadSize {
    HeadSize::of(
        req.method.as_str(),
        req.raw_path().len(),
        req.headers
            .iter()
            .map(|(name, value)| (name.as_str().len(), value.len())),
    )
}

impl TapProxy {
    /// Applies the tap's client limits to a request that just arrived: the
    /// keep-alive and write timeouts, then the head-size and stream caps.
    /// `Some(reason)`: refuse it.
    fn admit(&self, session: &mut Session, ctx: &RequestCtx) -> Option<RejectReason> {
        let limits = &ctx.settings.config.clients;
        // pingora keeps an HTTP/1.1 connection alive for ever unless told;
        // `None` (close after this request: shutdown, `Connection: close`)
        // stays.
        if session.get_keepalive().is_some() {
            session.set_keepalive(Some(limits.keepalive.as_secs().max(1)));
        }
        session.set_write_timeout(Some(limits.write_timeout));
        if let Some(reason) = limits::check_head(&head_size(session.req_header()), limits) {
            return Some(reason);
        }
        // In flight includes this request.
        let over = limits
            .max_streams
            .is_some_and(|max| self.tap.in_flight.get() > max as i64);
        over.then_some(RejectReason::TooManyStreams)
    }
}

#[async_trait]
impl ProxyHttp for TapProxy {
    /// Boxed: pingora's session future keeps three copies of its context
    /// (1.4 KiB each) for as long as a stream is open; a box is 8 bytes.
    type CTX = Box<RequestCtx>;

    fn new_ctx(&self) -> Box<RequestCtx> {
        Box::new(RequestCtx::new(&self.tap, Instant::now()))
    }

    /// None. pingora's default adds a response compression module at
    /// level 0 (off) that still runs on every body piece; tokentap never
    /// compresses what it forwards.
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    async fn early_request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<()> {
        if let Some(reason) = self.admit(session, ctx) {
            ctx.rejected = true;
            self.tap.rejected(reason);
            return Err(Error::explain(
                pingora::ErrorType::HTTPStatus(reason.status()),
                reason.as_str(),
            ));
        }
        if !ctx.measure {
            return Ok(());
        }
        let req = session.req_header();
        let id = headers::get(&req.headers, &headers::X_REQUEST_ID);
        let traceparent = headers::get(&req.headers, &headers::TRACEPARENT);
        #[cfg(feature = "fault-injection")]
        ctx.inject_fault(headers::get(&req.headers, &headers::X_TOKENTAP_FAULT));
        ctx.request_head(req.uri.path(), id, content_length(&req.headers));
        ctx.sink
            .set_request_id(id.and_then(|v| std::str::from_utf8(v).ok()));
        ctx.trace(&self.tap, traceparent);
        let path = req.uri.path_and_query().map_or("/", |p| p.as_str());
        ctx.call_head(req.method.as_str(), path, traceparent, id);
        ctx.load_context(&self.tap, |name| headers::by_name(&req.headers, name));
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        inject::prepare(&self.tap, session, ctx).await?;
        Ok(false)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        Ok(Box::new(ctx.settings.peer()))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if ctx.measure && ctx.settings.config.accept_encoding_identity {
            upstream_request.insert_header(http::header::ACCEPT_ENCODING, "identity")?;
        }
        if ctx.settings.reuse.closes_after_responses()
            && !upstream_request.headers.contains_key(http::header::UPGRADE)
        {
            // This upstream closes after responses (`stale`): say so, and
            // the connection is not pooled to be found closed later.
            upstream_request.insert_header(http::header::CONNECTION, "close")?;
        }
        if let Some(t) = ctx.inject_trace {
            upstream_request.insert_header(headers::TRACEPARENT.clone(), t.to_string())?;
        }
        inject::upstream_head(ctx, upstream_request)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if end_of_stream && body.as_ref().is_some_and(Bytes::is_empty) {
            *body = None; // pingora #935: avoid a second `0\r\n\r\n` upstream
        }
        if ctx.measure {
            ctx.request_body(body.as_deref().unwrap_or_default(), end_of_stream);
        }
        inject::request_body(ctx, body, end_of_stream);
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if resp.status.is_informational() || !ctx.measure {
            return Ok(());
        }
        let now = ctx.arrival(session.upstream_rx_timestamp());
        ctx.collect_request().await;
        let h = &resp.headers;
        let sse = || {
            headers::get(h, &http::header::CONTENT_TYPE).is_some_and(|ct| {
                tokentap_core::decode::BodyKind::from_content_type(ct)
                    == tokentap_core::decode::BodyKind::Sse
            })
        };
        inject::response_head(ctx, resp, sse());
        ctx.response_head(now, resp.status.as_u16(), h);
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        if !ctx.measure {
            return Ok(None);
        }
        let now = ctx.arrival(session.upstream_rx_timestamp());
        ctx.response_piece(now, body.as_ref(), end_of_stream);
        Ok(None)
    }

    /// What the body filter held, measured once pingora wrote it
    /// (pingora-proxy 0011).
    fn response_tasks_written(&self, _session: &mut Session, ctx: &mut Self::CTX) {
        ctx.measure_written();
    }

    /// The rest of a chunked stream, forwarded as it came (`raw_body`).
    async fn relay_raw_response_body(
        &self,
        relay: &mut RawBodyRelay<'_>,
        ctx: &mut Self::CTX,
    ) -> Result<bool> {
        raw_body::relay(relay, ctx).await
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        inject::response_body(&self.tap, ctx, body, end_of_stream);
        Ok(None)
    }

    async fn logging(&self, _session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        // A refused request was counted as such; it is no measurement.
        if std::mem::replace(&mut ctx.finished, true) || ctx.rejected || !ctx.measure {
            return;
        }
        // What no write reported (an error before it, a path without the
        // hook) is measured now, before the record closes.
        ctx.measure_written();
        let now = Instant::now();
        ctx.collect_request().await;
        let record = ctx.finish(now, errors::classify(e));
        let emitted = catch_unwind(AssertUnwindSafe(|| {
            let model = ctx.sink.model_label(record.model(), record.operation);
            let offsets = ctx.sink.take_offsets();
            self.tap.emit(&Finished {
                tap: &self.tap.labels,
                model: &model,
                record: &record,
                series: ctx.sink.series(),
                offsets: offsets.as_ref(),
                config: &ctx.settings.config,
                panics: &self.tap.panics,
                fault: ctx.sink_fault,
            });
        }));
        if emitted.is_err() {
            tracing::error!(tap = %self.tap.labels.tap, "a record sink panicked; the record is lost");
        }
    }

    /// A reused connection the upstream already closed is refused before
    /// the request is written on it (`stale`), and counted; the tap learns
    /// from it whether its upstream closes after responses.
    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        reused: bool,
        _peer: &HttpPeer,
        #[cfg(unix)] fd: std::os::unix::io::RawFd,
        #[cfg(windows)] _sock: std::os::windows::io::RawSocket,
        _digest: Option<&pingora::protocols::Digest>,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        #[cfg(unix)]
        if reused
            && self
                .tap
                .reused_upstream(&ctx.settings.reuse, stale::closed_by_peer(fd))
        {
            return Error::e_explain(
                stale::STALE,
                "the upstream closed this pooled connection before the request was sent",
            );
        }
        Ok(())
    }

    /// pingora's rule (retry only idempotent requests whose body is still
    /// buffered, on a reused connection), plus: a request refused because
    /// its pooled connection was already closed is sent again on another
    /// one, whatever its method: none of it was sent.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Self::CTX,
        client_reused: bool,
    ) -> Box<Error> {
        // pingora marks a response header read that met the end of a reused
        // connection (closed or reset) as `ReusedOnly`: the FIN crossed the
        // request.
        if client_reused && matches!(e.retry, pingora::RetryType::ReusedOnly) {
            self.tap.closed_before_answer(&ctx.settings.reuse);
        }
        let mut e = e.more_context(format!("Peer: {peer}"));
        if e.etype == stale::STALE {
            e.set_retry(true);
        } else if !session.req_header().method.is_idempotent()
            || session.as_ref().retry_buffer_truncated()
        {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    fn suppress_error_log(&self, _session: &Session, ctx: &Self::CTX, e: &Error) -> bool {
        // Client disconnects are normal for LLM streams and are counted as
        // `client_cancelled`; refusals are counted in `tokentap_rejected_total`.
        // Logging each at error level would drown the log.
        ctx.rejected || *e.esource() == ErrorSource::Downstream
    }

    fn request_summary(&self, session: &Session, _ctx: &Self::CTX) -> String {
        // pingora's default includes the query string, which may carry
        // credentials (`?key=`): log the method and path only.
        let req = session.req_header();
        format!("{} {}", req.method, req.uri.path())
    }
}
