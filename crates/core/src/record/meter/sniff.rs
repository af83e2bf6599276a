//! How the meter chooses a request's dialect: the tap's `dialect:`, else
//! the path, else — `sniffing` — what the response names (its first events
//! or its JSON body, `decode::detect`). Owns the `Meter`'s `route` (its
//! operation, its `DialectChoice`, the model a path names); reads nothing
//! of the stream but what `StreamState` detected.

use super::body::Body;
use super::Meter;
use crate::decode::detect;
use crate::decode::dialect::{self, Dialect, DialectSource};
use crate::decode::request;

/// How a request's dialect is known: one state (`sniff` decides it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DialectChoice {
    /// Named by the tap's `dialect:`, the path, or what the response said.
    Known(Dialect, DialectSource),
    /// Neither the config nor the path named one: the response's first
    /// events or its JSON body decide. Until then the path's guess is
    /// what a record names.
    Sniffing(Dialect),
    /// No LLM call: nothing is decoded (the path's guess is recorded,
    /// without a source).
    NotLlm(Dialect),
}

impl DialectChoice {
    pub(super) fn dialect(self) -> Dialect {
        match self {
            DialectChoice::Known(d, _) | DialectChoice::Sniffing(d) | DialectChoice::NotLlm(d) => d,
        }
    }

    pub(super) fn source(self) -> Option<DialectSource> {
        match self {
            DialectChoice::Known(_, s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn sniffing(self) -> bool {
        matches!(self, DialectChoice::Sniffing(_))
    }

    /// The dialect events are classified with (none while sniffing).
    pub(super) fn decoding(self) -> Option<Dialect> {
        match self {
            DialectChoice::Sniffing(_) => None,
            other => Some(other.dialect()),
        }
    }

    /// Sniffing stops: the request is no LLM call after all.
    pub(super) fn stop_sniffing(self) -> DialectChoice {
        match self {
            DialectChoice::Sniffing(d) => DialectChoice::NotLlm(d),
            other => other,
        }
    }
}

impl Meter {
    /// From the request path and the tap's configuration.
    pub(super) fn choose_dialect(&mut self, path: &str) {
        let (operation, path_dialect) = dialect::route_with(path, self.route.forced);
        self.route.operation = operation;
        self.route.dialect = match (self.route.forced, operation.is_llm()) {
            (Some(_), _) => DialectChoice::Known(path_dialect, DialectSource::Config),
            (None, true) => DialectChoice::Known(path_dialect, DialectSource::Path),
            (None, false) => DialectChoice::Sniffing(path_dialect),
        };
        self.route.path_model = dialect::model_in_path(path)
            .map(|m| request::truncate(m, request::MAX_MODEL_BYTES).to_owned());
    }

    /// An LLM call, or a request whose response may turn out to be one.
    pub(super) fn may_be_llm(&self) -> bool {
        self.route.operation.is_llm() || self.route.dialect.sniffing()
    }

    /// While sniffing: takes the dialect the stream named, or, after
    /// `MAX_SNIFFED_EVENTS` events that named none (or, `ended`, at the end
    /// of the body), stops reading a stream that is no LLM stream.
    pub(super) fn settle_dialect(&mut self, ended: bool) {
        if let Some((dialect, operation)) = self.stream.detected {
            self.route.operation = operation;
            self.route.dialect = DialectChoice::Known(dialect, DialectSource::Content);
        } else if ended
            || self.stream.counts.events >= detect::MAX_SNIFFED_EVENTS
            || matches!(self.resp.body, Body::Poisoned)
        {
            self.resp.body = Body::Idle;
            self.route.dialect = self.route.dialect.stop_sniffing();
        }
    }

    /// A whole JSON answer names the dialect (or stays no LLM call).
    pub(super) fn dialect_from_body(&mut self, body: &[u8]) {
        if let Some((dialect, operation)) = detect::from_body(body) {
            self.route.operation = operation;
            self.route.dialect = DialectChoice::Known(dialect, DialectSource::Content);
        }
    }
}
