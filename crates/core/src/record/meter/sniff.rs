//! How the meter chooses a request's dialect: the tap's `dialect:`, else
//! the path, else — `sniffing` — what the response names (its first events
//! or its JSON body, `decode::detect`). Owns the `dialect`, `operation`,
//! `dialect_source`, `sniffing` and `path_model` fields of the `Meter`;
//! reads nothing of the stream but what `StreamState` detected.

use super::body::Body;
use super::Meter;
use crate::decode::detect;
use crate::decode::dialect::{self, DialectSource};
use crate::decode::request;

impl Meter {
    /// From the request path and the tap's configuration.
    pub(super) fn choose_dialect(&mut self, path: &str) {
        let (operation, path_dialect) = dialect::route_with(path, self.forced_dialect);
        (self.operation, self.dialect) = (operation, path_dialect);
        self.dialect_source = match (self.forced_dialect, operation.is_llm()) {
            (Some(_), _) => Some(DialectSource::Config),
            (None, true) => Some(DialectSource::Path),
            (None, false) => None,
        };
        self.sniffing = self.dialect_source.is_none();
        self.path_model = dialect::model_in_path(path)
            .map(|m| request::truncate(m, request::MAX_MODEL_BYTES).to_owned());
    }

    /// An LLM call, or a request whose response may turn out to be one.
    pub(super) fn may_be_llm(&self) -> bool {
        self.operation.is_llm() || self.sniffing
    }

    /// While sniffing: takes the dialect the stream named, or, after
    /// `MAX_SNIFFED_EVENTS` events that named none (or, `ended`, at the end
    /// of the body), stops reading a stream that is no LLM stream.
    pub(super) fn settle_dialect(&mut self, ended: bool) {
        if let Some((dialect, operation)) = self.stream.detected {
            (self.dialect, self.operation) = (dialect, operation);
            self.dialect_source = Some(DialectSource::Content);
            self.sniffing = false;
        } else if ended
            || self.stream.events >= detect::MAX_SNIFFED_EVENTS
            || matches!(self.body, Body::Poisoned)
        {
            self.body = Body::Idle;
            self.sniffing = false;
        }
    }

    /// A whole JSON answer names the dialect (or stays no LLM call).
    pub(super) fn dialect_from_body(&mut self, body: &[u8]) {
        if let Some((dialect, operation)) = detect::from_body(body) {
            (self.dialect, self.operation) = (dialect, operation);
            self.dialect_source = Some(DialectSource::Content);
        }
    }
}
