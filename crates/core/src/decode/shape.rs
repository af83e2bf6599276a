//! A stream's repeating event shape: most events of an OpenAI-style stream
//! are the previous token event again, byte for byte, except for the
//! token's text (and the random padding OpenAI calls `obfuscation` and
//! Mistral `p`). `Shape` keeps
//! the last token event that was classified in full, with where those
//! strings lie in it, and classifies an event that matches it around them
//! without parsing its JSON again: the same summary, with the text (and the
//! model) taken from the new bytes.
//!
//! Owns: learning a shape from a fully classified event and matching an
//! event against it. Does not own: what an event means (the dialects: a
//! match only ever returns what `openai::classify_event` returns, which
//! `shape/tests.rs` checks against it over generated streams and every
//! captured one), timing (`record`).
//!
//! Why a match is sound: a byte string equal to a valid JSON text except
//! inside some of its string values, where it holds no unescaped `"`, only
//! one-letter escapes (`\n`, `\"`, …), no control character and valid
//! UTF-8, is valid JSON with the same structure, keys and every other value. The OpenAI classifier reads the text only as
//! a raw value and through whether it is empty (a match requires it not
//! to be), and the padding not at all.
//!
//! Bounded: one shape per stream, at most `MAX_SHAPE_BYTES` copied once per
//! learned event; a match is two comparisons and one scan per hole, no
//! allocation.

use super::dialect::Dialect;
use super::event::{EventKind, EventSummary, Malformed, OutputKinds};
use super::openai;
use serde_json::value::RawValue;
use std::ops::Range;
use strings::{clean, interior, string_len, within};

/// Events longer than this are always parsed (real chunks are ~200–400 bytes).
pub const MAX_SHAPE_BYTES: usize = 2048;

/// At most a text and a padding.
const MAX_HOLES: usize = 2;

/// A string value's interior that may differ from one event to the next.
#[derive(Debug, Clone, Copy, Default)]
struct Hole {
    start: usize,
    end: usize,
    /// The token text (must stay non-empty); otherwise ignored padding.
    text: bool,
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
        if dialect != Dialect::OpenAi || !event.is_empty() {
            return dialect.classify_event(event, data);
        }
        if let Some(s) = self.matched(data) {
            return Ok(s);
        }
        let (s, pad) = openai::classify_event_with_pad(event, data)?;
        self.learn(data, &s, pad);
        Ok(s)
    }

    /// The summary of `data` if it is the learned event but for its holes.
    fn matched<'a>(&self, data: &'a [u8]) -> Option<EventSummary<'a>> {
        let said = self.said?;
        let mut rest = data;
        let mut at = 0; // where in `bytes` the next fixed part starts
        let mut text = None;
        // The last hole before the model: (its end in `bytes`, in `data`).
        let mut model_base = (0, 0);
        for hole in self.holes.iter().take(self.n_holes) {
            rest = rest.strip_prefix(self.bytes.get(at..hole.start)?)?;
            let len = string_len(rest)?;
            let (value, after) = rest.split_at_checked(len)?;
            if !clean(value) || (hole.text && value.is_empty()) {
                return None;
            }
            let start = data.len() - rest.len();
            if hole.text {
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
        let quoted = |r: Range<usize>| {
            let slice = data.get(r.start.checked_sub(1)?..r.end.checked_add(1)?)?;
            serde_json::from_slice::<&RawValue>(slice).ok()
        };
        let model = match &self.model {
            Some(m) => {
                let start = m
                    .start
                    .checked_sub(model_base.0)?
                    .checked_add(model_base.1)?;
                let slice = data.get(start..start.checked_add(m.len())?)?;
                Some(serde_json::from_slice::<&RawValue>(slice).ok()?)
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
            text: Some(quoted(text?)?),
        })
    }

    /// Keeps `data` as the shape when it is a token event whose text is a
    /// string; otherwise keeps the shape it had.
    fn learn(&mut self, data: &[u8], s: &EventSummary<'_>, pad: Option<&RawValue>) {
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
            Some(m) => match within(data, m.get().as_bytes()) {
                Some(r) => Some(r),
                None => return,
            },
            None => None,
        };
        let text = Hole {
            start: text.start,
            end: text.end,
            text: true,
        };
        let (holes, n_holes) = match pad.and_then(|p| interior(data, p)) {
            Some(p) => {
                let pad = Hole {
                    start: p.start,
                    end: p.end,
                    text: false,
                };
                let sorted = if pad.start < text.start {
                    [pad, text]
                } else {
                    [text, pad]
                };
                (sorted, 2)
            }
            None => ([text; MAX_HOLES], 1),
        };
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

mod strings;

#[cfg(test)]
mod tests;
