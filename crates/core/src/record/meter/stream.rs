//! The measuring state a response's decoded events build up
//! (`StreamState`): timing of token events, gaps, counts, usage, finish,
//! model, estimates (the decoders that feed it are `body`'s). The `Meter` owns one of
//! each per request and turns them into a `RequestRecord` at the end.

use super::{TokenEvent, TokenSink};
use crate::decode::detect;
use crate::decode::dialect::Dialect;
use crate::decode::event;
use crate::decode::event::{EngineTiming, EventKind, EventSummary, FinishReason, Usage};
use crate::decode::request::{self, MAX_MODEL_BYTES};
use crate::decode::shape::{Shape, Wanted};
use crate::decode::sse::SseItem;
use crate::decode::tokens::Estimator;
use crate::decode::Operation;
use crate::links::{AnswerDialect, ToolCallCollector};
use crate::record::types::{GapStats, MeasureError};
use std::time::Instant;

/// Everything the decoded events tell; kept apart from the decoders so a
/// decoder can report into it while it is borrowed. Grouped by what each
/// part serves: when things happened, how many of what, the tokens, how
/// the stream ended.
#[derive(Debug)]
pub(super) struct StreamState {
    pub(super) timing: Timing,
    pub(super) counts: Counts,
    pub(super) tokens: Tokens,
    pub(super) end: Ending,
    pub(super) response_model: Option<String>,
    pub(super) engine_timing: Option<EngineTiming>,
    /// The dialect (and operation) the stream named, when the path did not.
    pub(super) detected: Option<(Dialect, Operation)>,
    /// The last token event, so that the next ones need not be parsed.
    pub(super) shape: Shape,
    /// The answer's tool calls, collected for their links (`with_links`).
    pub(super) tools: Option<Box<ToolCallCollector>>,
}

/// When things happened (TTFT, ITL).
#[derive(Debug)]
pub(super) struct Timing {
    pub(super) t0: Instant,
    pub(super) first_event: Option<Instant>,
    pub(super) first_token: Option<Instant>,
    pub(super) first_visible: Option<Instant>,
    pub(super) prev_token: Option<Instant>,
    pub(super) gaps: GapStats,
}

/// How many of what.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) events: u32,
    pub(super) token_events: u32,
    pub(super) reasoning_events: u32,
    pub(super) tool_call_events: u32,
    pub(super) comments: u32,
    pub(super) choice_deltas: u64,
}

/// The tokens: reported (usage), or counted by the tap's tokenizer.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    pub(super) usage: Usage,
    /// Some usage came from a vendor's extension (`x_groq.usage`).
    pub(super) from_extension: bool,
    /// Counts output texts when the tap has a tokenizer.
    pub(super) estimator: Option<Estimator>,
    /// Output tokens the tokenizer counted so far.
    pub(super) estimated: u64,
    /// The last continuous-usage completion count.
    pub(super) last_completion: Option<u64>,
    pub(super) prev_had_usage: bool,
}

/// How the stream ended, and whether it could be measured.
#[derive(Debug, Default)]
pub(super) struct Ending {
    pub(super) finish: Option<FinishReason>,
    /// When the stream's terminal event (`[DONE]`, `message_stop`, a
    /// `done` line, `response.completed`) went past.
    pub(super) done_at: Option<Instant>,
    pub(super) error_event: bool,
    pub(super) measure_error: Option<MeasureError>,
}

impl StreamState {
    pub(super) fn new(t0: Instant) -> Self {
        StreamState {
            timing: Timing {
                t0,
                first_event: None,
                first_token: None,
                first_visible: None,
                prev_token: None,
                gaps: GapStats::default(),
            },
            counts: Counts::default(),
            tokens: Tokens::default(),
            end: Ending::default(),
            response_model: None,
            engine_timing: None,
            detected: None,
            shape: Shape::default(),
            tools: None,
        }
    }
}

impl StreamState {
    pub(super) fn fail(&mut self, e: MeasureError) {
        self.end.measure_error.get_or_insert(e);
    }

    pub(super) fn on_item(
        &mut self,
        ctx: &EventCtx<'_>,
        item: SseItem<'_>,
        sink: &mut dyn TokenSink,
    ) {
        let SseItem::Event { event, data } = item else {
            // Comments (keep-alives) are never events nor tokens.
            self.counts.comments = self.counts.comments.saturating_add(1);
            return;
        };
        self.on_event(ctx, event, data, sink);
    }

    /// One NDJSON line: an event without a type.
    pub(super) fn on_line(&mut self, ctx: &EventCtx<'_>, line: &[u8], sink: &mut dyn TokenSink) {
        self.on_event(ctx, b"", line, sink);
    }

    fn on_event(
        &mut self,
        ctx: &EventCtx<'_>,
        event: &[u8],
        data: &[u8],
        sink: &mut dyn TokenSink,
    ) {
        let at = ctx.at;
        self.counts.events = self.counts.events.saturating_add(1);
        self.timing.first_event.get_or_insert(at);
        let Some(dialect) = ctx.dialect.or(self.detected.map(|d| d.0)).or_else(|| {
            self.detected = detect::from_event(event, data);
            self.detected.map(|d| d.0)
        }) else {
            return; // not (yet) known to be an LLM stream
        };
        // The model is read once: a stream that has it does not need a
        // repeated event's copy checked again.
        let wanted = match self.response_model {
            None => Wanted::Model,
            Some(_) => Wanted::NoModel,
        };
        let s = match self.shape.classify_wanting(dialect, event, data, wanted) {
            Ok(s) => s,
            Err(_) => {
                self.fail(MeasureError::InvalidJsonEvent);
                return;
            }
        };
        self.absorb_common(&s);
        if let (Some(tools), Some(d)) = (self.tools.as_mut(), answer_dialect(dialect)) {
            // Only events that carry or open a tool call are parsed again.
            if s.output.tool_call
                || event == b"content_block_start"
                || event == b"response.output_item.done"
            {
                tools.feed_event(d, event, data);
            }
        }
        match s.kind {
            EventKind::Done => {
                self.end.done_at.get_or_insert(at);
            }
            EventKind::Token => self.token_event(ctx, &s, sink),
            _ => {}
        }
    }

    /// Usage, finish reason, model and error flags, common to events and bodies.
    fn absorb_common(&mut self, s: &EventSummary<'_>) {
        if let Some(u) = s.usage {
            self.tokens.from_extension |= u.from_extension;
            merge(&mut self.tokens.usage.prompt_tokens, u.prompt_tokens);
            merge(
                &mut self.tokens.usage.completion_tokens,
                u.completion_tokens,
            );
            merge(&mut self.tokens.usage.cached_tokens, u.cached_tokens);
            merge(&mut self.tokens.usage.reasoning_tokens, u.reasoning_tokens);
        }
        if s.finish.is_some() {
            self.end.finish = s.finish;
        }
        if s.kind == EventKind::Error {
            self.end.error_event = true;
        }
        if s.engine.is_some() {
            self.engine_timing = s.engine;
        }
        if self.response_model.is_none() {
            if let Some(m) = s.model.and_then(event::raw_str) {
                self.response_model = Some(request::truncate(&m, MAX_MODEL_BYTES).to_owned());
            }
        }
    }

    /// The tool calls of a whole JSON answer (`with_links`).
    pub(super) fn tool_calls_of_body(&mut self, dialect: Dialect, body: &[u8]) {
        if let (Some(tools), Some(d)) = (self.tools.as_mut(), answer_dialect(dialect)) {
            tools.feed_body(d, body);
        }
    }

    /// A whole non-streaming body: no token timing, only what it says.
    pub(super) fn absorb_body(&mut self, s: &EventSummary<'_>) {
        self.absorb_common(s);
        if s.kind == EventKind::Token {
            self.counts.choice_deltas = self
                .counts
                .choice_deltas
                .saturating_add(u64::from(s.token_choices));
            if let (Some(e), Some(text)) = (self.tokens.estimator, s.text) {
                self.tokens.estimated = self.tokens.estimated.saturating_add(e.count_raw(text));
            }
        }
    }

    fn token_event(&mut self, ctx: &EventCtx<'_>, s: &EventSummary<'_>, sink: &mut dyn TokenSink) {
        let at = ctx.at;
        let gap = self
            .timing
            .prev_token
            .map(|p| at.saturating_duration_since(p));
        if let Some(g) = gap {
            self.timing.gaps.add(g);
        }
        // Tokens in this event are known from continuous usage only: this
        // event and the previous token event (if any) both carried usage.
        let completion = s.usage.and_then(|u| u.completion_tokens);
        let counted = match (self.tokens.estimator, s.text) {
            (Some(e), Some(text)) => {
                // An event that carries output carries at least one token.
                let n = e.count_raw(text).max(1);
                self.tokens.estimated = self.tokens.estimated.saturating_add(n);
                Some(n)
            }
            _ => None,
        };
        let tokens = match completion {
            Some(now) if self.counts.token_events == 0 || self.tokens.prev_had_usage => {
                Some(now.saturating_sub(self.tokens.last_completion.unwrap_or(0)))
            }
            _ => counted,
        };
        self.tokens.prev_had_usage = completion.is_some();
        if completion.is_some() {
            self.tokens.last_completion = completion;
        }
        self.timing.first_token.get_or_insert(at);
        if s.visible {
            self.timing.first_visible.get_or_insert(at);
        }
        let index = self.counts.token_events;
        self.counts.token_events = self.counts.token_events.saturating_add(1);
        self.counts.reasoning_events = self
            .counts
            .reasoning_events
            .saturating_add(u32::from(s.output.reasoning));
        self.counts.tool_call_events = self
            .counts
            .tool_call_events
            .saturating_add(u32::from(s.output.tool_call));
        self.counts.choice_deltas = self
            .counts
            .choice_deltas
            .saturating_add(u64::from(s.token_choices));
        self.timing.prev_token = Some(at);
        sink.token_event(&TokenEvent {
            index,
            operation: self.detected.map_or(ctx.operation, |d| d.1),
            model: ctx.requested_model.or(self.response_model.as_deref()),
            at,
            since_start: at.saturating_duration_since(self.timing.t0),
            gap,
            tokens,
        });
    }
}

/// What every event of one piece shares.
pub(super) struct EventCtx<'a> {
    pub(super) at: Instant,
    pub(super) operation: Operation,
    /// `None` while the dialect is still to be named by the stream.
    pub(super) dialect: Option<Dialect>,
    pub(super) requested_model: Option<&'a str>,
}

fn merge(dst: &mut Option<u64>, src: Option<u64>) {
    if src.is_some() {
        *dst = src;
    }
}

/// The wire of an answer whose tool calls `ToolCallCollector` reads.
fn answer_dialect(d: Dialect) -> Option<AnswerDialect> {
    match d {
        Dialect::OpenAi => Some(AnswerDialect::Chat),
        Dialect::Responses => Some(AnswerDialect::Responses),
        Dialect::Anthropic => Some(AnswerDialect::Anthropic),
        _ => None,
    }
}
