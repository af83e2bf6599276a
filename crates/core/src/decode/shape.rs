//! A stream's repeating event shape: most events of an LLM stream are the
//! previous token event again, byte for byte, except for the token's text
//! (and the random padding OpenAI calls `obfuscation` and Mistral `p`).
//! `Shape` keeps the last token event that was classified in full, with
//! where those strings lie in it, and classifies an event that matches it
//! around them without parsing its JSON again: the same summary, with the
//! text (and the model) taken from the new bytes. For the OpenAI dialect
//! (chat and completions, and every engine that speaks it) and Anthropic's
//! Messages (`content_block_delta`); the others are always parsed.
//!
//! Owns: learning a shape from a fully classified event and matching an
//! event against it. Does not own: what an event means (the dialects: a
//! match only ever returns what the dialect's `classify_event` returns,
//! which `shape/tests.rs` checks against it over generated streams and
//! every captured one), timing (`record`).
//!
//! Why a match is sound: a byte string equal to a valid JSON text except
//! inside some of its string values, where it holds no unescaped `"`, only
//! one-letter escapes (`\n`, `\"`, …), no control character and valid
//! UTF-8, is valid JSON with the same structure, keys and every other
//! value; and the event type is the same. Both classifiers read the text
//! only as a raw value and through whether it is empty (a match requires
//! it not to be), and the padding not at all.
//!
//! Bounded: one shape per stream, at most `MAX_SHAPE_BYTES` copied once per
//! learned event; a match is two comparisons and one scan per hole, no
//! allocation.

use super::dialect::Dialect;
use super::event::{raw_range, Raw};
use super::event::{EventKind, EventSummary, Malformed, OutputKinds};
use super::openai;
use serde_json::value::RawValue;
use std::ops::Range;
use strings::{clean, interior, no_control, space_runs, spaces, string_len};

/// Events longer than this are always parsed (real chunks are ~200–400 bytes).
pub const MAX_SHAPE_BYTES: usize = 2048;

/// A text, a padding and whitespace runs; an event with more is not kept.
const MAX_HOLES: usize = 6;

/// Whether a matched event's summary names the response's model: a stream
/// that has it already does not need it checked in every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    Model,
    NoModel,
}

/// What may differ from one event to the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum HoleKind {
    /// The token text, a string's interior (must stay non-empty).
    #[default]
    Text,
    /// A padding string's interior (anything a string may hold).
    Pad,
    /// Whitespace between tokens (Anthropic pads with it): any amount.
    Space,
}

#[derive(Debug, Clone, Copy, Default)]
struct Hole {
    start: usize,
    end: usize,
    kind: HoleKind,
}

/// What the learned event said, that a matching event says too.
#[derive(Debug, Clone, Copy)]
struct Said {
    token_choices: u32,
    output: OutputKinds,
    visible: bool,
}

/// The last fully classified token event of one stream (see the module).
/// Its `Debug` shows no byte of the event: they hold completion text.
#[derive(Default)]
pub struct Shape {
    /// The dialect and SSE event type it was learned from.
    dialect: Option<Dialect>,
    event: Vec<u8>,
    bytes: Vec<u8>,
    holes: [Hole; MAX_HOLES],
    n_holes: usize,
    /// The response model's raw value in `bytes`, outside every hole.
    model: Option<Range<usize>>,
    /// `None` until a shape is learned.
    said: Option<Said>,
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shape")
            .field("dialect", &self.dialect)
            .field("bytes", &self.bytes.len())
            .field("holes", &self.holes.get(..self.n_holes))
            .field("learned", &self.said.is_some())
            .finish()
    }
}

impl Shape {
    /// Classifies one event of a `dialect` stream: by the shape where it
    /// matches, by the dialect's classifier (learning from it) otherwise.
    pub fn classify<'a>(
        &mut self,
        dialect: Dialect,
        event: &[u8],
        data: &'a [u8],
    ) -> Result<EventSummary<'a>, Malformed> {
        self.classify_wanting(dialect, event, data, Wanted::Model)
    }

    /// `classify`, for a caller that may already know the stream's model
    /// (`Wanted::NoModel`): a matched event then says no `model` rather
    /// than have its bytes checked again, for they are the learned
    /// event's. A parsed event says what the dialect says either way.
    pub fn classify_wanting<'a>(
        &mut self,
        dialect: Dialect,
        event: &[u8],
        data: &'a [u8],
        wanted: Wanted,
    ) -> Result<EventSummary<'a>, Malformed> {
        if !matches!(dialect, Dialect::OpenAi | Dialect::Anthropic) {
            return dialect.classify_event(event, data);
        }
        if self.dialect == Some(dialect) && self.event == event {
            if let Some(s) = self.matched(data, wanted) {
                return Ok(s);
            }
        }
        let (s, pad) = parse(dialect, event, data)?;
        self.learn(dialect, event, data, &s, pad);
        Ok(s)
    }

    /// The summary of `data` if it is the learned event but for its holes.
    fn matched<'a>(&self, data: &'a [u8], wanted: Wanted) -> Option<EventSummary<'a>> {
        let said = self.said?;
        let mut rest = data;
        let mut at = 0; // where in `bytes` the next fixed part starts
        let mut text = None;
        // The last hole before the model: (its end in `bytes`, in `data`).
        let mut model_base = (0, 0);
        for hole in self.holes.iter().take(self.n_holes) {
            rest = rest.strip_prefix(self.bytes.get(at..hole.start)?)?;
            let len = match hole.kind {
                HoleKind::Space => spaces(rest),
                _ => string_len(rest)?,
            };
            let (value, after) = rest.split_at_checked(len)?;
            let fits = match hole.kind {
                // UTF-8: checked once, below, when the text's `Raw` is made.
                HoleKind::Text => no_control(value) && !value.is_empty(),
                HoleKind::Pad => clean(value),
                HoleKind::Space => true,
            };
            if !fits {
                return None;
            }
            let start = data.len() - rest.len();
            if hole.kind == HoleKind::Text {
                text = Some(start..start + len);
            }
            if self.model.as_ref().is_some_and(|m| m.start >= hole.end) {
                model_base = (hole.end, start + len);
            }
            rest = after;
            at = hole.end;
        }
        if rest != self.bytes.get(at..)? {
            return None;
        }
        // Not parsed again: the text is a JSON string by the checks above
        // (its quotes are the learned event's, `string_len` found the
        // closing one and allows only valid escapes, `no_control` no control
        // byte, and `raw` checks its UTF-8); the model is the learned event's bytes,
        // which the parser took for a value.
        let raw = |r: Range<usize>| std::str::from_utf8(data.get(r)?).ok().map(Raw::checked);
        let text = text?;
        let text = raw(text.start.checked_sub(1)?..text.end.checked_add(1)?)?;
        let model = match &self.model {
            Some(_) if wanted == Wanted::NoModel => None,
            Some(m) => {
                let start = m
                    .start
                    .checked_sub(model_base.0)?
                    .checked_add(model_base.1)?;
                Some(raw(start..start.checked_add(m.len())?)?)
            }
            None => None,
        };
        Some(EventSummary {
            kind: EventKind::Token,
            token_choices: said.token_choices,
            output: said.output,
            visible: said.visible,
            finish: None,
            usage: None,
            model,
            engine: None,
            text: Some(text),
        })
    }

    /// Keeps `data` as the shape when it is a token event whose text is a
    /// string; otherwise keeps the shape it had.
    fn learn(
        &mut self,
        dialect: Dialect,
        event: &[u8],
        data: &[u8],
        s: &EventSummary<'_>,
        pad: Option<&RawValue>,
    ) {
        if s.kind != EventKind::Token
            || s.finish.is_some()
            || s.usage.is_some()
            || s.engine.is_some()
            || data.len() > MAX_SHAPE_BYTES
        {
            return;
        }
        let Some(text) = s.text.and_then(|t| interior(data, t)) else {
            return;
        };
        let model = match s.model {
            Some(m) => match raw_range(data, m.get()) {
                Some(r) => Some(r),
                None => return,
            },
            None => None,
        };
        let mut holes = [Hole::default(); MAX_HOLES];
        let mut n_holes = 0;
        let strings = [
            (Some(text), HoleKind::Text),
            (pad.and_then(|p| interior(data, p.into())), HoleKind::Pad),
        ];
        // Not inside the model: its raw value is taken whole from the bytes.
        let inside = |r: &Range<usize>| {
            model
                .as_ref()
                .is_some_and(|m| m.start <= r.start && r.end <= m.end)
        };
        let spaces = space_runs(data)
            .filter(|r| !inside(r))
            .map(|r| (Some(r), HoleKind::Space));
        for (range, kind) in strings.into_iter().chain(spaces) {
            let Some(r) = range else { continue };
            let Some(slot) = holes.get_mut(n_holes) else {
                return; // too many to keep
            };
            *slot = Hole {
                start: r.start,
                end: r.end,
                kind,
            };
            n_holes += 1;
        }
        let Some(used) = holes.get_mut(..n_holes) else {
            return;
        };
        used.sort_unstable_by_key(|h| h.start);
        self.dialect = Some(dialect);
        self.event.clear();
        self.event.extend_from_slice(event);
        self.bytes.clear();
        self.bytes.extend_from_slice(data);
        self.holes = holes;
        self.n_holes = n_holes;
        self.model = model;
        self.said = Some(Said {
            token_choices: s.token_choices,
            output: s.output,
            visible: s.visible,
        });
    }
}

/// The dialect's own classification, and where OpenAI's padding is.
fn parse<'a>(
    dialect: Dialect,
    event: &[u8],
    data: &'a [u8],
) -> Result<(EventSummary<'a>, Option<&'a RawValue>), Malformed> {
    match dialect {
        Dialect::OpenAi => openai::classify_event_with_pad(event, data),
        _ => dialect.classify_event(event, data).map(|s| (s, None)),
    }
}

mod strings;

#[cfg(test)]
mod tests;
