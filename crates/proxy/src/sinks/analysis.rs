//! A finished request as an analysis `Sample`: into the tap's live
//! analyses (`/report`, window gauges) and its record log (JSONL).

use super::{Finished, RecordSink};
use crate::recordlog::RecordLog;
use std::sync::Arc;
use tokentap_core::analysis::live::TapLive;
use tokentap_core::analysis::Sample;

pub struct AnalysisSink {
    pub live: Option<Arc<TapLive>>,
    pub record_log: Option<RecordLog>,
}

impl RecordSink for AnalysisSink {
    fn finished(&self, f: &Finished<'_>) {
        let (micros, truncated) = f
            .offsets
            .map_or((&[][..], false), |o| (o.micros.as_slice(), o.truncated));
        let sample = Sample::from_record(
            &f.tap.tap,
            f.tap.boundary.as_str(),
            f.settings.config.hop.as_deref(),
            f.record,
            micros,
            truncated,
        );
        match (&self.live, &self.record_log) {
            (Some(live), Some(log)) => {
                log.write(sample.clone());
                live.push(sample);
            }
            (Some(live), None) => {
                live.push(sample);
            }
            (None, Some(log)) => log.write(sample),
            (None, None) => {}
        }
    }
}
