//! What one finished request adds to the metrics (once, at its end).

use super::{Metrics, TapLabels};
use tokentap_core::labels::{
    ModelLabel, OutputTokens, PerModelStream, PerRequest, TokenType, TokenUsage, Unmeasured,
};
use tokentap_core::record::RequestRecord;
use tokentap_core::table;

impl Metrics {
    /// Everything observed once per request, at its end.
    pub fn record(&self, tap: &TapLabels, model: &ModelLabel, r: &RequestRecord) {
        let per_model = tap.per_model(&model.value, r.operation);
        let request = PerRequest {
            tap: tap.tap.clone(),
            boundary: tap.boundary,
            model: model.value.clone(),
            operation: r.operation,
            stream: r.stream,
            outcome: r.outcome,
        };
        self.add(&table::REQUESTS, &request, 1);
        self.observe(&table::REQUEST_DURATION, &request, r.e2e.as_secs_f64());
        if let Some(ttfb) = r.ttfb {
            let labels = PerModelStream {
                tap: tap.tap.clone(),
                boundary: tap.boundary,
                model: model.value.clone(),
                operation: r.operation,
                stream: r.stream,
            };
            self.observe(&table::TTFB, &labels, ttfb.as_secs_f64());
        }
        if r.stream {
            for (m, v) in [
                (&table::TTFT, r.ttft),
                (&table::TTFT_VISIBLE, r.ttft_visible),
                (&table::TIME_TO_FIRST_EVENT, r.time_to_first_event),
                (&table::TPOT, r.tpot),
            ] {
                if let Some(v) = v {
                    self.observe(m, &per_model, v.as_secs_f64());
                }
            }
        }
        let usage = |token_type| TokenUsage {
            tap: tap.tap.clone(),
            boundary: tap.boundary,
            model: model.value.clone(),
            operation: r.operation,
            token_type,
        };
        if let Some(n) = r.input_tokens {
            self.observe(&table::TOKEN_USAGE, &usage(TokenType::Input), n as f64);
            self.add(&table::INPUT_TOKENS, &per_model, n);
        }
        if let (Some(n), Some(source)) = (r.output_tokens, r.output_source) {
            self.observe(&table::TOKEN_USAGE, &usage(TokenType::Output), n as f64);
            let labels = OutputTokens {
                tap: tap.tap.clone(),
                boundary: tap.boundary,
                model: model.value.clone(),
                operation: r.operation,
                source,
            };
            self.add(&table::OUTPUT_TOKENS, &labels, n);
        }
        if let Some(n) = r.cached_tokens {
            self.add(&table::CACHED_TOKENS, &per_model, n);
        }
        if let Some(n) = r.reasoning_tokens {
            self.add(&table::REASONING_TOKENS, &per_model, n);
        }
        if let Some(reason) = r.measure_error {
            let labels = Unmeasured {
                tap: tap.tap.clone(),
                boundary: tap.boundary,
                reason,
            };
            self.add(&table::MEASUREMENT_ERRORS, &labels, 1);
        }
    }
}
