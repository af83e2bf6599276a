//! The simulator's other dialects: the same token times, counts and texts
//! as the OpenAI plan, written as an OpenAI Responses stream, an Anthropic
//! Messages stream, Ollama NDJSON lines, a TGI stream or a Gemini stream
//! (SSE with CRLF framing and cumulative `usageMetadata`, as Google's API
//! sends it) — or as each one's non-streaming body — and an embeddings
//! answer. Faults other than an
//! error status are OpenAI-only.

use super::{head, Builder, Mark, Script};
use serde_json::json;
use std::time::Duration;
use tokentap_core::decode::dialect::Dialect;

/// What the OpenAI plan computed, for a dialect to write.
pub(super) struct Shape {
    pub dialect: Dialect,
    pub stream: bool,
    pub model: String,
    pub id: String,
    pub t_head: Duration,
    /// Time of each token event; `texts` and `tokens` are parallel.
    pub times: Vec<Duration>,
    pub texts: Vec<String>,
    pub tokens: Vec<u32>,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    /// Ollama's chat (`message`) rather than generate (`response`).
    pub chat: bool,
}

impl Shape {
    pub(super) fn completion(&self) -> u32 {
        self.tokens.iter().sum()
    }

    pub(super) fn t_last(&self) -> Duration {
        self.times.last().copied().unwrap_or(self.t_head)
    }

    fn text(&self) -> String {
        self.texts.concat()
    }
}

impl Builder {
    /// An SSE event with an `event:` line.
    pub(super) fn named(&mut self, at: Duration, name: &str, data: &str, mark: Mark, tokens: u32) {
        let eol = self.eol();
        let bytes = format!("event: {name}{eol}data: {data}{eol}{eol}");
        self.chunked(at, bytes.as_bytes(), mark, tokens);
    }

    /// One NDJSON line.
    fn line(&mut self, at: Duration, data: &str, mark: Mark, tokens: u32) {
        let bytes = format!("{data}\n");
        self.chunked(at, bytes.as_bytes(), mark, tokens);
    }

    pub(super) fn stream_head(&mut self, at: Duration, content_type: &str) {
        let headers = [
            ("content-type", content_type.to_string()),
            ("cache-control", "no-cache".to_string()),
            ("transfer-encoding", "chunked".to_string()),
        ];
        self.raw(at, head(200, "OK", &headers), Some(Mark::Headers), 0);
    }

    pub(super) fn json_body(&mut self, at: Duration, body: &str, tokens: u32) {
        let headers = [
            ("content-type", "application/json".to_string()),
            ("content-length", body.len().to_string()),
        ];
        let mut bytes = head(200, "OK", &headers);
        bytes.extend_from_slice(body.as_bytes());
        self.raw(at, bytes, Some(Mark::Body), tokens);
    }

    pub(super) fn end(&mut self, at: Duration) {
        self.raw(at, b"0\r\n\r\n".to_vec(), Some(Mark::End), 0);
    }
}

/// Writes the response of `s` in its dialect.
pub(super) fn plan(mut b: Builder, s: &Shape) -> Script {
    match (s.dialect, s.stream) {
        (Dialect::Responses, true) => responses_stream(&mut b, s),
        (Dialect::Anthropic, true) => anthropic_stream(&mut b, s),
        (Dialect::Ollama, true) => ollama_stream(&mut b, s),
        (Dialect::Tgi, true) => tgi_stream(&mut b, s),
        (Dialect::Gemini, true) => gemini_stream(&mut b, s),
        (dialect, _) => {
            let body = body(dialect, s);
            b.json_body(s.t_last(), &body, s.completion());
        }
    }
    b.done(s.prompt_tokens, s.completion(), false)
}

/// The embeddings answer: after the prefill, no output tokens.
pub(super) fn embeddings(mut b: Builder, model: &str, at: Duration, prompt_tokens: u32) -> Script {
    let body = json!({"object": "list", "model": model,
        "data": [{"object": "embedding", "index": 0, "embedding": [0.0125, -0.25, 0.5, 0.75]}],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}})
    .to_string();
    b.json_body(at, &body, 0);
    b.done(prompt_tokens, 0, false)
}

fn responses_usage(s: &Shape) -> serde_json::Value {
    json!({"input_tokens": s.prompt_tokens, "input_tokens_details": {"cached_tokens": s.cached_tokens},
        "output_tokens": s.completion(), "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": s.prompt_tokens + s.completion()})
}

fn anthropic_usage(s: &Shape, output: u32) -> serde_json::Value {
    json!({"input_tokens": s.prompt_tokens.saturating_sub(s.cached_tokens), "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": s.cached_tokens, "output_tokens": output})
}

fn ollama_final(s: &Shape, content: &str) -> serde_json::Value {
    let prefill = s
        .times
        .first()
        .map_or(0, |t| t.saturating_sub(s.t_head).as_nanos());
    let decode = s
        .t_last()
        .saturating_sub(s.times.first().copied().unwrap_or(s.t_head))
        .as_nanos();
    let mut v = json!({"model": s.model, "created_at": "2026-01-01T00:00:00Z", "done": true,
        "done_reason": "length", "total_duration": s.t_last().saturating_sub(s.t_head).as_nanos(), "load_duration": 0,
        "prompt_eval_count": s.prompt_tokens, "prompt_eval_duration": prefill,
        "eval_count": s.completion(), "eval_duration": decode});
    if let Some(o) = v.as_object_mut() {
        if s.chat {
            o.insert(
                "message".into(),
                json!({"role": "assistant", "content": content}),
            );
        } else {
            o.insert("response".into(), json!(content));
        }
    }
    v
}

fn body(dialect: Dialect, s: &Shape) -> String {
    let text = s.text();
    match dialect {
        Dialect::Responses => {
            json!({"id": s.id, "object": "response", "status": "completed", "model": s.model,
            "output": [{"type": "message", "id": "msg_sim", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": responses_usage(s)})
        }
        Dialect::Anthropic => {
            json!({"id": s.id, "type": "message", "role": "assistant", "model": s.model,
            "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens",
            "usage": anthropic_usage(s, s.completion())})
        }
        Dialect::Ollama => ollama_final(s, &text),
        Dialect::Tgi => json!({"generated_text": text, "details": {"finish_reason": "length",
            "generated_tokens": s.completion(), "seed": null}}),
        Dialect::Gemini => gemini_chunk(s, &text, Some(s.completion())),
        Dialect::OpenAi => json!({"error": {"message": "the OpenAI dialect is planned elsewhere"}}),
    }
    .to_string()
}

fn responses_stream(b: &mut Builder, s: &Shape) {
    b.stream_head(s.t_head, "text/event-stream");
    let created = json!({"type": "response.created", "sequence_number": 0, "response": {"id": s.id,
        "object": "response", "status": "in_progress", "model": s.model, "output": [], "usage": null}});
    b.named(
        s.t_head,
        "response.created",
        &created.to_string(),
        Mark::Role,
        0,
    );
    let mut seq = 1;
    for ((at, text), k) in s.times.iter().zip(&s.texts).zip(&s.tokens) {
        let d = json!({"type": "response.output_text.delta", "sequence_number": seq, "item_id": "msg_sim",
            "output_index": 0, "content_index": 0, "delta": text, "logprobs": []});
        b.named(
            *at,
            "response.output_text.delta",
            &d.to_string(),
            Mark::Token,
            *k,
        );
        seq += 1;
    }
    let t = s.t_last();
    let done = json!({"type": "response.output_text.done", "sequence_number": seq, "item_id": "msg_sim",
        "output_index": 0, "content_index": 0, "text": s.text()});
    b.named(
        t,
        "response.output_text.done",
        &done.to_string(),
        Mark::Finish,
        0,
    );
    let completed = json!({"type": "response.completed", "sequence_number": seq + 1,
        "response": {"id": s.id, "object": "response", "status": "completed", "model": s.model,
            "usage": responses_usage(s)}});
    b.named(
        t,
        "response.completed",
        &completed.to_string(),
        Mark::Done,
        0,
    );
    b.end(t);
}

fn anthropic_stream(b: &mut Builder, s: &Shape) {
    b.stream_head(s.t_head, "text/event-stream");
    let start = json!({"type": "message_start", "message": {"id": s.id, "type": "message", "role": "assistant",
        "model": s.model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": anthropic_usage(s, 1)}});
    b.named(s.t_head, "message_start", &start.to_string(), Mark::Role, 0);
    let block = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
    b.named(
        s.t_head,
        "content_block_start",
        &block.to_string(),
        Mark::Role,
        0,
    );
    b.named(s.t_head, "ping", "{\"type\": \"ping\"}", Mark::KeepAlive, 0);
    for ((at, text), k) in s.times.iter().zip(&s.texts).zip(&s.tokens) {
        let d = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
        b.named(*at, "content_block_delta", &d.to_string(), Mark::Token, *k);
    }
    let t = s.t_last();
    b.named(
        t,
        "content_block_stop",
        "{\"type\":\"content_block_stop\",\"index\":0}",
        Mark::Finish,
        0,
    );
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
        "usage": {"output_tokens": s.completion()}});
    b.named(t, "message_delta", &delta.to_string(), Mark::Usage, 0);
    b.named(
        t,
        "message_stop",
        "{\"type\":\"message_stop\"}",
        Mark::Done,
        0,
    );
    b.end(t);
}

fn ollama_stream(b: &mut Builder, s: &Shape) {
    b.stream_head(s.t_head, "application/x-ndjson");
    for ((at, text), k) in s.times.iter().zip(&s.texts).zip(&s.tokens) {
        let line = if s.chat {
            json!({"model": s.model, "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": text}, "done": false})
        } else {
            json!({"model": s.model, "created_at": "2026-01-01T00:00:00Z", "response": text, "done": false})
        };
        b.line(*at, &line.to_string(), Mark::Token, *k);
    }
    let t = s.t_last();
    b.line(t, &ollama_final(s, "").to_string(), Mark::Done, 0);
    b.end(t);
}

fn tgi_stream(b: &mut Builder, s: &Shape) {
    b.stream_head(s.t_head, "text/event-stream");
    let n = s.times.len();
    let mut generated = String::new();
    for (i, ((at, text), k)) in s.times.iter().zip(&s.texts).zip(&s.tokens).enumerate() {
        generated.push_str(text);
        let last = i + 1 == n;
        let ev = json!({"index": i + 1, "token": {"id": i + 10, "text": text, "logprob": -0.25, "special": false},
            "generated_text": if last { json!(generated) } else { json!(null) },
            "details": if last {
                json!({"finish_reason": "length", "generated_tokens": s.completion(), "seed": null,
                    "input_length": s.prompt_tokens})
            } else {
                json!(null)
            },
            "top_tokens": null});
        b.event(*at, &ev.to_string(), Mark::Token, *k);
    }
    b.end(s.t_last());
}

/// One Gemini `GenerateContentResponse`: `output` is the cumulative
/// candidates count so far (the last chunk's also ends the stream).
fn gemini_chunk(s: &Shape, text: &str, output: Option<u32>) -> serde_json::Value {
    let last = output == Some(s.completion());
    let mut candidate =
        json!({"content": {"parts": [{"text": text}], "role": "model"}, "index": 0});
    if let (true, Some(o)) = (last, candidate.as_object_mut()) {
        o.insert("finishReason".into(), json!("MAX_TOKENS"));
    }
    let mut usage = json!({"promptTokenCount": s.prompt_tokens,
        "cachedContentTokenCount": s.cached_tokens});
    if let (Some(n), Some(u)) = (output, usage.as_object_mut()) {
        u.insert("candidatesTokenCount".into(), json!(n));
        u.insert("totalTokenCount".into(), json!(s.prompt_tokens + n));
    }
    json!({"candidates": [candidate], "usageMetadata": usage, "modelVersion": s.model,
        "responseId": s.id})
}

fn gemini_stream(b: &mut Builder, s: &Shape) {
    b.stream_head(s.t_head, "text/event-stream");
    let mut so_far = 0;
    for ((at, text), k) in s.times.iter().zip(&s.texts).zip(&s.tokens) {
        so_far += k;
        let chunk = gemini_chunk(s, text, Some(so_far));
        // Google frames its events with CRLF, whatever the others do.
        let bytes = format!("data: {chunk}\r\n\r\n");
        b.chunked(*at, bytes.as_bytes(), Mark::Token, *k);
    }
    b.end(s.t_last());
}
