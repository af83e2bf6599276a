//! The vocabulary every dialect's classifier answers in: what one event or
//! body says (`EventSummary`: its kind, output kinds, finish, usage, model,
//! engine timings), without its text, and the small helpers the
//! classifiers share. The `Meter` reads nothing else of a response.
//!
//! Owns no dialect: each lives in its own module (`openai`, `responses`,
//! `anthropic`, `ollama`, `tgi`) and is chosen in `dialect`.

pub use super::raw::{raw_range, raw_str, Raw};
use serde_json::value::RawValue;

/// Token counts reported by the upstream (`usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    /// Read from a vendor's extension (Groq's `x_groq.usage`) because the
    /// dialect's own field was absent.
    pub from_extension: bool,
}

/// Why generation stopped, as the upstream said. Unknown strings are `Other`
/// so the set stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    FunctionCall,
    Other,
}

impl FinishReason {
    pub(crate) fn from_raw(raw: &RawValue) -> Self {
        match raw.get() {
            "\"stop\"" | "\"eos\"" | "\"end_turn\"" => FinishReason::Stop,
            "\"length\"" | "\"max_tokens\"" => FinishReason::Length,
            "\"tool_calls\"" => FinishReason::ToolCalls,
            "\"content_filter\"" => FinishReason::ContentFilter,
            "\"function_call\"" => FinishReason::FunctionCall,
            _ => FinishReason::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::FunctionCall => "function_call",
            FinishReason::Other => "other",
        }
    }
}

/// The class of one event, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// `data: [DONE]`.
    Done,
    /// An in-stream error object (or `event: error`).
    Error,
    /// Carries generated output: content, reasoning, a tool-call delta,
    /// a refusal or completion text (non-empty).
    Token,
    /// Carries a `finish_reason` and no output.
    Finish,
    /// Only a `role` (the usual first chat delta).
    RoleOnly,
    /// Only `usage` (the `include_usage` chunk with empty `choices`).
    UsageOnly,
    /// Nothing measurable (empty delta, unknown object).
    Empty,
}

/// What one event or body says, without its text.
#[derive(Debug, Clone, Copy)]
pub struct EventSummary<'a> {
    pub kind: EventKind,
    /// Choices in this event that carry output (more than one when `n > 1`).
    pub token_choices: u32,
    /// What the output was (several may be true in one event).
    pub output: OutputKinds,
    /// Some choice carried visible output (anything but reasoning).
    pub visible: bool,
    pub finish: Option<FinishReason>,
    pub usage: Option<Usage>,
    /// The response `model`, as raw JSON (a quoted string) when present.
    pub model: Option<Raw<'a>>,
    /// The engine's own account of its time (Ollama's last line).
    pub engine: Option<EngineTiming>,
    /// The output text of the first choice that has one (a JSON string,
    /// still escaped): what a tokenizer estimate counts. Never kept.
    pub text: Option<Raw<'a>>,
}

/// Durations an engine reports about a request, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineTiming {
    pub total_ns: Option<u64>,
    /// Loading the model before the request could run.
    pub load_ns: Option<u64>,
    /// Evaluating the prompt (prefill).
    pub prefill_ns: Option<u64>,
    /// Generating the output (decode).
    pub decode_ns: Option<u64>,
}

impl EventSummary<'_> {
    /// Marks a one-choice event (the other dialects) token-bearing when
    /// `out` holds any output; visible unless it is reasoning only.
    pub(crate) fn set_output(&mut self, out: OutputKinds) {
        if out.content || out.reasoning || out.tool_call {
            self.kind = EventKind::Token;
            self.token_choices = 1;
            self.output = out;
            self.visible = out.content || out.tool_call;
        }
    }
}

/// Which kinds of output an event carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputKinds {
    /// `delta.content`, `message.content`, `delta.refusal` or completion `text`.
    pub content: bool,
    /// `reasoning_content` or `reasoning`.
    pub reasoning: bool,
    /// `tool_calls` entries or a legacy `function_call`.
    pub tool_call: bool,
}

/// The event could not be read as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed;

/// A summary of `kind` that says nothing else (the dialects fill it in).
pub(crate) fn summary<'a>(kind: EventKind) -> EventSummary<'a> {
    EventSummary {
        kind,
        token_choices: 0,
        output: OutputKinds::default(),
        visible: false,
        finish: None,
        usage: None,
        model: None,
        engine: None,
        text: None,
    }
}

/// A string value is output when it is a non-empty string (or any non-empty
/// array, for content given as parts).
pub(crate) fn is_output(raw: Option<&RawValue>) -> bool {
    match raw.map(|r| r.get().trim_ascii()) {
        None | Some("\"\"") | Some("[]") | Some("null") => false,
        Some(_) => true,
    }
}
