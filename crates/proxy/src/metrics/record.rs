//! What one finished request adds to the metrics (once, at its end): its
//! series (`series::ModelSeries`), and a measurement error if it had one.

use super::series::ModelSeries;
use super::{Metrics, TapLabels};
use std::sync::Arc;
use tokentap_core::decode::Operation;
use tokentap_core::labels::{ModelLabel, Unmeasured};
use tokentap_core::record::RequestRecord;
use tokentap_core::table;

impl Metrics {
    /// Everything observed once per request, at its end.
    pub fn record(&self, tap: &TapLabels, model: &ModelLabel, r: &RequestRecord) {
        self.record_in(None, tap, model, r);
    }

    /// The same, into `resolved` when it is the series of this tap, model
    /// label and operation (the one the request's token events went to),
    /// else into the one looked up.
    pub fn record_in(
        &self,
        resolved: Option<&Arc<ModelSeries>>,
        tap: &TapLabels,
        model: &ModelLabel,
        r: &RequestRecord,
    ) {
        match resolved.filter(|s| s.is_for(tap, &model.value, r.operation)) {
            Some(series) => series.record(self, r),
            None => self.series(tap, &model.value, r.operation).record(self, r),
        }
        if let Some(reason) = r.measure_error {
            let labels = Unmeasured {
                tap: tap.clone(),
                reason,
            };
            self.add(&table::MEASUREMENT_ERRORS, &labels, 1);
        }
    }

    /// The series of one (tap, model label, operation), resolved once.
    pub fn series(
        &self,
        tap: &TapLabels,
        model: &Arc<str>,
        operation: Operation,
    ) -> Arc<ModelSeries> {
        self.series.get(self, tap, model, operation)
    }
}
