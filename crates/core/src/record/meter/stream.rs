//! The measuring state a response's decoded events build up (`StreamState`)
//! and the decoders that feed it (`Decoders`): timing of token events,
//! gaps, counts, usage, finish, model, estimates. The `Meter` owns one of
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
use crate::record::types::{GapStats, MeasureError};
use std::time::Instant;

/// Everything the decoded events tell; kept apart from the decoders so a
/// decoder can report into it while it is borrowed.
#[derive(Debug)]
pub(super) struct StreamState {
    pub(super) t0: Instant,
    pub(super) t_first_event: Option<Instant>,
    pub(super) t_first_token: Option<Instant>,
    pub(super) t_first_visible: Option<Instant>,
    pub(super) prev_token: Option<Instant>,
    pub(super) events: u32,
    pub(super) token_events: u32,
    pub(super) reasoning_events: u32,
    pub(super) tool_call_events: u32,
    pub(super) comments: u32,
    pub(super) choice_deltas: u64,
    pub(super) gaps: GapStats,
    pub(super) usage: Usage,
    /// Counts output texts when the tap has a tokenizer.
    pub(super) estimator: Option<Estimator>,
    /// Output tokens the tokenizer counted so far.
    pub(super) estimated: u64,
    pub(super) last_completion_tokens: Option<u64>,
    pub(super) prev_token_had_usage: bool,
    pub(super) finish: Option<FinishReason>,
    pub(super) done: bool,
    pub(super) error_event: bool,
    pub(super) response_model: Option<String>,
    pub(super) engine_timing: Option<EngineTiming>,
    pub(super) measure_error: Option<MeasureError>,
    /// The dialect (and operation) the stream named, when the path did not.
    pub(super) detected: Option<(Dialect, Operation)>,
    /// Some usage came from a vendor's extension (`x_groq.usage`).
    pub(super) usage_from_extension: bool,
    /// The last token event, so that the next ones need not be parsed.
    pub(super) shape: Shape,
}

impl StreamState {
    pub(super) fn fail(&mut self, e: MeasureError) {
        self.measure_error.get_or_insert(e);
    }

    pub(super) fn on_item(
        &mut self,
        ctx: &EventCtx<'_>,
        item: SseItem<'_>,
        sink: &mut dyn TokenSink,
    ) {
        let SseItem::Event { event, data } = item else {
            // Comments (keep-alives) are never events nor tokens.
            self.comments = self.comments.saturating_add(1);
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
        self.events = self.events.saturating_add(1);
        self.t_first_event.get_or_insert(at);
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
        match s.kind {
            EventKind::Done => self.done = true,
            EventKind::Token => self.token_event(ctx, &s, sink),
            _ => {}
        }
    }

    /// Usage, finish reason, model and error flags, common to events and bodies.
    fn absorb_common(&mut self, s: &EventSummary<'_>) {
        if let Some(u) = s.usage {
            self.usage_from_extension |= u.from_extension;
            merge(&mut self.usage.prompt_tokens, u.prompt_tokens);
            merge(&mut self.usage.completion_tokens, u.completion_tokens);
            merge(&mut self.usage.cached_tokens, u.cached_tokens);
            merge(&mut self.usage.reasoning_tokens, u.reasoning_tokens);
        }
        if s.finish.is_some() {
            self.finish = s.finish;
        }
        if s.kind == EventKind::Error {
            self.error_event = true;
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

    /// A whole non-streaming body: no token timing, only what it says.
    pub(super) fn absorb_body(&mut self, s: &EventSummary<'_>) {
        self.absorb_common(s);
        if s.kind == EventKind::Token {
            self.choice_deltas = self
                .choice_deltas
                .saturating_add(u64::from(s.token_choices));
            if let (Some(e), Some(text)) = (self.estimator, s.text) {
                self.estimated = self.estimated.saturating_add(e.count_raw(text));
            }
        }
    }

    fn token_event(&mut self, ctx: &EventCtx<'_>, s: &EventSummary<'_>, sink: &mut dyn TokenSink) {
        let at = ctx.at;
        let gap = self.prev_token.map(|p| at.saturating_duration_since(p));
        if let Some(g) = gap {
            self.gaps.add(g);
        }
        // Tokens in this event are known from continuous usage only: this
        // event and the previous token event (if any) both carried usage.
        let completion = s.usage.and_then(|u| u.completion_tokens);
        let counted = match (self.estimator, s.text) {
            (Some(e), Some(text)) => {
                // An event that carries output carries at least one token.
                let n = e.count_raw(text).max(1);
                self.estimated = self.estimated.saturating_add(n);
                Some(n)
            }
            _ => None,
        };
        let tokens = match completion {
            Some(now) if self.token_events == 0 || self.prev_token_had_usage => {
                Some(now.saturating_sub(self.last_completion_tokens.unwrap_or(0)))
            }
            _ => counted,
        };
        self.prev_token_had_usage = completion.is_some();
        if completion.is_some() {
            self.last_completion_tokens = completion;
        }
        self.t_first_token.get_or_insert(at);
        if s.visible {
            self.t_first_visible.get_or_insert(at);
        }
        let index = self.token_events;
        self.token_events = self.token_events.saturating_add(1);
        self.reasoning_events = self
            .reasoning_events
            .saturating_add(u32::from(s.output.reasoning));
        self.tool_call_events = self
            .tool_call_events
            .saturating_add(u32::from(s.output.tool_call));
        self.choice_deltas = self
            .choice_deltas
            .saturating_add(u64::from(s.token_choices));
        self.prev_token = Some(at);
        sink.token_event(&TokenEvent {
            index,
            operation: self.detected.map_or(ctx.operation, |d| d.1),
            model: ctx.requested_model.or(self.response_model.as_deref()),
            at,
            since_start: at.saturating_duration_since(self.t0),
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
