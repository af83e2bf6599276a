//! Sending one planned request with the measuring client and turning what
//! came back into a [`RequestResult`]: outcome, client-side TTFT (from just
//! before connecting to the read that completed the first token-bearing
//! event), E2E, and the tokens `usage` reported.
//!
//! Owns: the target (base URL → address and path), the request body and
//! headers (`stream: true`, `stream_options.include_usage`, `max_tokens`,
//! the tenant's bearer key, `x-request-id`), and the outcome classes.
//! Plain `http://` only: the measuring client speaks HTTP/1.1 over TCP.

use super::stream::StreamObserver;
use super::workload::{Message, Planned};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokentap_core::decode::BodyKind;
use tokentap_net::client::{self, Flow};

/// Where requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    /// The base URL's path (without a trailing `/`) + `/v1/chat/completions`.
    pub path: String,
}

impl Target {
    /// Resolves `http://host[:port][/prefix]` (port 80 by default).
    pub async fn resolve(url: &str) -> anyhow::Result<Target> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("`{url}`: only http:// base URLs are supported"))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (
                rest.get(..i).unwrap_or_default(),
                rest.get(i..).unwrap_or_default(),
            ),
            None => (rest, ""),
        };
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = tokio::net::lookup_host(&authority)
            .await
            .map_err(|e| anyhow::anyhow!("`{url}`: cannot resolve {authority}: {e}"))?
            .next()
            .ok_or_else(|| anyhow::anyhow!("`{url}`: {authority} has no address"))?;
        Ok(Target {
            addr,
            path: format!("{}/v1/chat/completions", prefix.trim_end_matches('/')),
        })
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// 200, a complete stream ending in `[DONE]`, no error event.
    Ok,
    /// A non-200 status.
    HttpError,
    /// An error event inside a 200 stream.
    StreamError,
    /// A 200 response cut short or ended without `[DONE]`, or not a stream.
    Truncated,
    /// Connecting, writing or reading failed before a response head.
    Transport,
    /// No end within `--request-timeout`.
    Timeout,
    /// The run was stopped (Ctrl-C) while it was in flight.
    Cancelled,
}

/// One request as the driver saw it.
#[derive(Debug, Clone, Serialize)]
pub struct RequestResult {
    /// The `x-request-id` it carried (`drive-<n>`), to join with a tap's or
    /// the simulator's records.
    pub id: String,
    pub tenant: u32,
    /// Conversation: session id and turn.
    pub session: Option<(u64, u32)>,
    /// Sweep: the step it started in.
    pub step: Option<usize>,
    /// Seconds from the start of the run to this request's start.
    pub start_seconds: f64,
    pub planned_input_tokens: u32,
    pub planned_output_tokens: u32,
    pub outcome: Outcome,
    /// HTTP status (0 without a response head).
    pub status: u16,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: f64,
    pub token_events: u32,
    pub prompt_tokens: Option<u64>,
    /// From `usage`, else the token-bearing events counted.
    pub completion_tokens: u64,
    pub cached_tokens: Option<u64>,
    /// What went wrong: the transport error, or the status and the start of
    /// the error body.
    pub error: Option<String>,
}

/// What every request of a run shares.
#[derive(Debug, Clone)]
pub struct Shared {
    pub target: Target,
    pub model: String,
    /// Extra headers (`--header`), lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Each request's `x-request-id`: this and its number.
    pub id_prefix: String,
    pub timeout: Duration,
    pub started: Instant,
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: &'a [Message],
    stream: bool,
    stream_options: StreamOptions,
    max_tokens: u32,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The JSON body of a planned request.
pub fn body(model: &str, planned: &Planned) -> String {
    serde_json::to_string(&Body {
        model,
        messages: &planned.messages,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_tokens: planned.max_tokens,
    })
    .unwrap_or_default()
}

/// Sends request number `n`; `step` is the sweep step it belongs to.
pub async fn send(
    shared: &Shared,
    planned: &Planned,
    n: u64,
    step: Option<usize>,
) -> RequestResult {
    let id = format!("{}{n}", shared.id_prefix);
    let auth = format!("Bearer tenant-{}-key", planned.tenant);
    let has = |name: &str| shared.headers.iter().any(|(k, _)| k == name);
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    if !has("authorization") {
        headers.push(("authorization", &auth));
    }
    if !has("x-request-id") {
        headers.push(("x-request-id", &id));
    }
    headers.extend(shared.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let body = body(&shared.model, planned);
    let mut observer = StreamObserver::default();
    let start = Instant::now();
    let sent = client::send_with(
        shared.target.addr,
        "POST",
        &shared.target.path,
        &headers,
        body.as_bytes(),
        |r| {
            let sse = r
                .header("content-type")
                .is_some_and(|ct| BodyKind::from_content_type(ct) == BodyKind::Sse);
            if r.status == 200 && sse {
                let at = r.reads.last().map_or_else(Instant::now, |x| x.at);
                observer.on_body(&r.body, at);
            }
            Flow::Continue
        },
    );
    let response = tokio::time::timeout(shared.timeout, sent).await;
    let end = Instant::now();
    let facts = observer.facts;
    let (outcome, status, error) = match &response {
        Err(_) => (Outcome::Timeout, 0, Some("no response end in time".into())),
        Ok(Err(e)) => (Outcome::Transport, 0, Some(e.to_string())),
        Ok(Ok(r)) if r.status != 200 => {
            let body = String::from_utf8_lossy(r.body.get(..200).unwrap_or(&r.body));
            (
                Outcome::HttpError,
                r.status,
                Some(format!("HTTP {}: {body}", r.status)),
            )
        }
        Ok(Ok(_)) if facts.error => (Outcome::StreamError, 200, Some("error event".into())),
        Ok(Ok(r)) if r.complete && facts.done => (Outcome::Ok, 200, None),
        Ok(Ok(_)) => (
            Outcome::Truncated,
            200,
            Some("stream ended without [DONE]".into()),
        ),
    };
    let usage = facts.usage.unwrap_or_default();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    RequestResult {
        id,
        tenant: planned.tenant,
        session: planned.session,
        step,
        start_seconds: start
            .saturating_duration_since(shared.started)
            .as_secs_f64(),
        planned_input_tokens: planned.input_tokens(),
        planned_output_tokens: planned.max_tokens,
        outcome,
        status,
        ttft_ms: facts
            .first_token
            .map(|t| ms(t.saturating_duration_since(start))),
        e2e_ms: ms(end.saturating_duration_since(start)),
        token_events: facts.token_events,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage
            .completion_tokens
            .unwrap_or(u64::from(facts.token_events)),
        cached_tokens: usage.cached_tokens,
        error,
    }
}

/// The result of a request the run gave up on before it ended.
pub fn cancelled(
    shared: &Shared,
    planned: &Planned,
    n: u64,
    step: Option<usize>,
    start: Instant,
) -> RequestResult {
    RequestResult {
        id: format!("drive-{n}"),
        tenant: planned.tenant,
        session: planned.session,
        step,
        start_seconds: start
            .saturating_duration_since(shared.started)
            .as_secs_f64(),
        planned_input_tokens: planned.input_tokens(),
        planned_output_tokens: planned.max_tokens,
        outcome: Outcome::Cancelled,
        status: 0,
        ttft_ms: None,
        e2e_ms: start.elapsed().as_secs_f64() * 1000.0,
        token_events: 0,
        prompt_tokens: None,
        completion_tokens: 0,
        cached_tokens: None,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn targets() {
        let t = Target::resolve("http://127.0.0.1:8080").await.unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.path, "/v1/chat/completions");
        let t = Target::resolve("http://127.0.0.1:9/openai/").await.unwrap();
        assert_eq!(t.path, "/openai/v1/chat/completions");
        let t = Target::resolve("http://[::1]").await.unwrap();
        assert_eq!(t.addr.port(), 80);
        assert!(Target::resolve("https://x").await.is_err());
    }

    #[test]
    fn body_carries_the_stream_options_and_the_messages_as_planned() {
        let p = Planned {
            messages: vec![Message {
                role: "user",
                content: "hi".into(),
            }],
            max_tokens: 7,
            tenant: 2,
            session: None,
        };
        let b = body("m", &p);
        assert_eq!(
            b,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":7}"#
        );
        assert!(b.contains(&p.messages_json()));
    }
}
