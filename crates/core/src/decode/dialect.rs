//! Which API dialect a request speaks, and the dispatch from a dialect to
//! its event classifier. Every classifier answers with the same
//! `EventSummary`, so the meter times every dialect the same way.
//!
//! Chosen by path (the query string ignored, any prefix) and overridable per
//! tap: `/v1/chat/completions` and `/v1/completions` (OpenAI, also vLLM,
//! SGLang, llama.cpp, TGI's Messages API), `/v1/responses` (OpenAI
//! Responses), `/v1/messages` (Anthropic), `/api/chat` and `/api/generate`
//! (Ollama, NDJSON), `/generate_stream` and `/generate` (TGI),
//! `…:streamGenerateContent` and `…:generateContent` (Gemini),
//! `/v1/embeddings` (no stream). A path that names none is read in the
//! dialect its response names (`detect`); `DialectSource` says which way
//! a request's dialect was chosen.

use super::event::{EventSummary, Malformed};
use super::{anthropic, gemini, ollama, openai, responses, tgi, Operation};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// OpenAI chat/completions and completions (and embeddings).
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses API.
    Responses,
    /// Anthropic Messages.
    Anthropic,
    /// Ollama's native API (NDJSON streams).
    Ollama,
    /// Text Generation Inference's native API.
    Tgi,
    /// Google's Gemini API (`generateContent`, Google AI and Vertex AI).
    Gemini,
}

crate::names::label_enum! {
    /// How a request's dialect was chosen (record log, access log, span).
    pub enum DialectSource {
        /// The request path names it (`/v1/messages`, …).
        Path = "path",
        /// The path names none: the response's first event (or JSON body)
        /// did (`decode::detect`).
        Content = "content",
        /// The tap's `dialect:` setting.
        Config = "config",
    }
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Responses => "responses",
            Dialect::Anthropic => "anthropic",
            Dialect::Ollama => "ollama",
            Dialect::Tgi => "tgi",
            Dialect::Gemini => "gemini",
        }
    }

    /// Classifies one stream event (an SSE event's type and data, or one
    /// NDJSON line with an empty type).
    pub fn classify_event<'a>(
        self,
        event: &[u8],
        data: &'a [u8],
    ) -> Result<EventSummary<'a>, Malformed> {
        match self {
            Dialect::OpenAi => openai::classify_event(event, data),
            Dialect::Responses => responses::classify_event(event, data),
            Dialect::Anthropic => anthropic::classify_event(event, data),
            Dialect::Ollama => ollama::classify_line(data),
            Dialect::Tgi => tgi::classify_event(event, data),
            Dialect::Gemini => gemini::classify_event(event, data),
        }
    }

    /// Classifies a whole non-streaming JSON answer.
    pub fn classify_json(self, body: &[u8]) -> Result<EventSummary<'_>, Malformed> {
        match self {
            Dialect::OpenAi => openai::classify_json(body),
            Dialect::Responses => responses::classify_json(body),
            Dialect::Anthropic => anthropic::classify_json(body),
            Dialect::Ollama => ollama::classify_line(body),
            Dialect::Tgi => tgi::classify_json(body),
            Dialect::Gemini => gemini::classify_json(body),
        }
    }
}

/// The operation and dialect of a request path. Paths that are no known
/// LLM endpoint are `(Other, OpenAi)`: forwarded, counted, never decoded.
pub fn route(path: &str) -> (Operation, Dialect) {
    let path = path
        .split('?')
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    let ends = |suffix: &str| path.ends_with(suffix);
    if ends("/chat/completions") {
        (Operation::Chat, Dialect::OpenAi)
    } else if ends("/completions") {
        (Operation::TextCompletion, Dialect::OpenAi)
    } else if ends("/embeddings") {
        (Operation::Embeddings, Dialect::OpenAi)
    } else if ends("/responses") {
        (Operation::Chat, Dialect::Responses)
    } else if ends("/v1/messages") {
        (Operation::Chat, Dialect::Anthropic)
    } else if ends("/api/chat") {
        (Operation::Chat, Dialect::Ollama)
    } else if ends("/api/generate") {
        (Operation::TextCompletion, Dialect::Ollama)
    } else if ends("/generate_stream") || path == "/generate" || ends("/tgi/generate") {
        (Operation::TextCompletion, Dialect::Tgi)
    } else if ends(":streamGenerateContent") || ends(":generateContent") {
        (Operation::GenerateContent, Dialect::Gemini)
    } else {
        (Operation::Other, Dialect::OpenAi)
    }
}

/// `route`, with a tap's configured dialect (if any) replacing the one the
/// path suggests; a path that is no known endpoint (TGI's `POST /`, say) is
/// then read as `text_completion` for TGI and `chat` for the others.
pub fn route_with(path: &str, forced: Option<Dialect>) -> (Operation, Dialect) {
    let (op, dialect) = route(path);
    match forced {
        None => (op, dialect),
        Some(Dialect::Tgi) if op == Operation::Other => (Operation::TextCompletion, Dialect::Tgi),
        Some(Dialect::Gemini) if op == Operation::Other => {
            (Operation::GenerateContent, Dialect::Gemini)
        }
        Some(d) if op == Operation::Other => (Operation::Chat, d),
        Some(d) => (op, d),
    }
}

/// The model a path names: Gemini's `…/models/{model}:generateContent`
/// (the body names none), the Hugging Face router's `/models/{org}/{name}`
/// (TGI). Only a printable, non-empty name with at most one `/`.
pub fn model_in_path(path: &str) -> Option<&str> {
    let path = path.split('?').next().unwrap_or_default();
    // Every request asks; memchr's search, set up once, not `str`'s per call.
    static MODELS: std::sync::LazyLock<memchr::memmem::FinderRev<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::FinderRev::new("/models/"));
    let at = MODELS.rfind(path.as_bytes())?;
    let rest = path.get(at + "/models/".len()..)?;
    let model = rest.split(':').next().unwrap_or_default();
    let model = model.trim_end_matches('/');
    let slashes = model.bytes().filter(|b| *b == b'/').count();
    let printable = model.bytes().all(|b| b.is_ascii_graphic());
    (!model.is_empty() && slashes <= 1 && printable).then_some(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = |p| route(p);
        assert_eq!(
            r("/v1/chat/completions?x=1"),
            (Operation::Chat, Dialect::OpenAi)
        );
        assert_eq!(
            r("/v1/completions"),
            (Operation::TextCompletion, Dialect::OpenAi)
        );
        assert_eq!(
            r("/v1/embeddings"),
            (Operation::Embeddings, Dialect::OpenAi)
        );
        assert_eq!(r("/v1/responses"), (Operation::Chat, Dialect::Responses));
        assert_eq!(
            r("/anthropic/v1/messages/"),
            (Operation::Chat, Dialect::Anthropic)
        );
        assert_eq!(r("/api/chat"), (Operation::Chat, Dialect::Ollama));
        assert_eq!(
            r("/api/generate"),
            (Operation::TextCompletion, Dialect::Ollama)
        );
        assert_eq!(
            r("/generate_stream"),
            (Operation::TextCompletion, Dialect::Tgi)
        );
        assert_eq!(r("/generate"), (Operation::TextCompletion, Dialect::Tgi));
        assert_eq!(
            r("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"),
            (Operation::GenerateContent, Dialect::Gemini)
        );
        assert_eq!(
            r("/v1/projects/p/locations/us/publishers/google/models/gemini-2.5-pro:generateContent"),
            (Operation::GenerateContent, Dialect::Gemini)
        );
        assert_eq!(r("/v1/models"), (Operation::Other, Dialect::OpenAi));
        assert_eq!(
            r("/models/google/flan-t5-xxl"),
            (Operation::Other, Dialect::OpenAi)
        );
        assert_eq!(r("/api/tags"), (Operation::Other, Dialect::OpenAi));
        assert_eq!(
            route_with("/chat", Some(Dialect::Anthropic)),
            (Operation::Chat, Dialect::Anthropic)
        );
        assert_eq!(
            model_in_path("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"),
            Some("gemini-2.0-flash")
        );
        assert_eq!(
            model_in_path("/models/google/flan-t5-xxl"),
            Some("google/flan-t5-xxl")
        );
        // The router's OpenAI route names the model in the body.
        assert_eq!(
            model_in_path(
                "/hf-inference/models/meta-llama/Llama-3.1-8B-Instruct/v1/chat/completions"
            ),
            None
        );
        assert_eq!(model_in_path("/v1/models"), None);
        assert_eq!(model_in_path("/v1/models/"), None);
        assert_eq!(
            route_with("/", Some(Dialect::Tgi)),
            (Operation::TextCompletion, Dialect::Tgi)
        );
        assert_eq!(
            route_with("/v1/completions", Some(Dialect::Tgi)),
            (Operation::TextCompletion, Dialect::Tgi)
        );
    }
}
