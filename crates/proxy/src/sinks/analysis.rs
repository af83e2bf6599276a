//! A finished request as an analysis `Sample`: into the tap's live
//! analyses (`/report`, window gauges) and its record log (JSONL).

use super::{Finished, RecordSink};
use crate::metrics::Metrics;
use crate::recordlog::RecordLog;
use std::sync::Arc;
use tokentap_core::analysis::live::TapLive;
use tokentap_core::analysis::load::meets;
use tokentap_core::analysis::{Sample, Slo};
use tokentap_core::labels::{SloJudged, SloResult, TapLabels, TenantRequests};
use tokentap_core::table;

pub struct AnalysisSink {
    pub live: Option<Arc<TapLive>>,
    pub record_log: Option<RecordLog>,
    /// The mergeable per-tenant and SLO series of the tap.
    pub fleet: FleetSeries,
}

/// The tap's series that sum across instances (fleet-wide fairness,
/// goodput and capacity: `deploy/prometheus/fleet-rules.yml`).
pub struct FleetSeries {
    metrics: Arc<Metrics>,
    tap: TapLabels,
    slo: Slo,
}

impl FleetSeries {
    /// Also creates the SLO series at 0 when an objective is set.
    pub fn new(metrics: Arc<Metrics>, tap: TapLabels, slo: Slo) -> Self {
        if slo.is_set() {
            for result in SloResult::ALL {
                let labels = SloJudged {
                    tap: tap.tap.clone(),
                    boundary: tap.boundary,
                    result,
                };
                metrics.touch(&table::SLO_REQUESTS, &labels);
            }
        }
        FleetSeries { metrics, tap, slo }
    }

    fn record(&self, s: &Sample) {
        if s.operation == "other" || s.outcome == "unmeasured" {
            return;
        }
        let tenant = self.metrics.tenant_label(s.tenant.as_deref());
        let labels = TenantRequests {
            tap: self.tap.tap.clone(),
            boundary: self.tap.boundary,
            tenant: tenant.value,
        };
        self.metrics.add(&table::TENANT_REQUESTS, &labels, 1);
        if let (true, true, Some(ttft)) = (s.is_ok(), s.stream, s.ttft_ms) {
            self.metrics
                .observe(&table::TENANT_TTFT, &labels, ttft / 1e3);
        }
        if self.slo.is_set() {
            let result = match meets(s, &self.slo) {
                true => SloResult::Met,
                false => SloResult::Missed,
            };
            let labels = SloJudged {
                tap: self.tap.tap.clone(),
                boundary: self.tap.boundary,
                result,
            };
            self.metrics.add(&table::SLO_REQUESTS, &labels, 1);
        }
    }
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
        self.fleet.record(&sample);
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
