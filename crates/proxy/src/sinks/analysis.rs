//! A finished request as an analysis `Sample`: into the tap's live
//! analyses (`/report`, window gauges) and its record log (JSONL).

use super::{Finished, RecordSink};
use crate::metrics::{Count, Hist, LabelMap, Metrics};
use crate::recordlog::RecordLog;
use std::sync::{Arc, OnceLock, RwLock};
use tokentap_core::analysis::live::TapLive;
use tokentap_core::analysis::load::meets;
use tokentap_core::analysis::{Sample, Slo};
use tokentap_core::labels::{SinkName, SloJudged, SloResult, TapLabels, TenantRequests};
use tokentap_core::table;

pub struct AnalysisSink {
    pub live: Option<Arc<TapLive>>,
    pub record_log: Option<RecordLog>,
    /// The mergeable per-tenant and SLO series of the tap.
    pub fleet: FleetSeries,
}

/// The tap's series that sum across instances (fleet-wide fairness,
/// goodput and capacity: `deploy/prometheus/fleet-rules.yml`).
///
/// Each tenant's handles are resolved at its first request and kept (the
/// tenant label is bounded by `analysis.max_tenants`, plus `other` and
/// `none`), so a request's record is a map lookup and atomics, not a
/// Prometheus label lookup per series.
pub struct FleetSeries {
    metrics: Arc<Metrics>,
    tap: TapLabels,
    slo: Slo,
    /// `tokentap_slo_requests_total` by `result` (`SloResult::ALL`'s
    /// order); empty when no objective is set.
    slo_requests: Vec<Count>,
    tenants: RwLock<LabelMap<TenantSeries>>,
}

/// The series of one tenant label value.
struct TenantSeries {
    requests: Count,
    /// Created at the tenant's first measured streamed answer, as a lookup
    /// would create it.
    ttft: OnceLock<Hist>,
}

/// Tenant handles kept at most: the label's own bound is far below.
const MAX_TENANT_SERIES: usize = 4096;

impl FleetSeries {
    /// Also creates the SLO series at 0 when an objective is set.
    pub fn new(metrics: Arc<Metrics>, tap: TapLabels, slo: Slo) -> Self {
        let slo_requests = match slo.is_set() {
            true => SloResult::ALL
                .into_iter()
                .map(|result| {
                    let labels = SloJudged {
                        tap: tap.clone(),
                        result,
                    };
                    let c = Count::new(&metrics, &table::SLO_REQUESTS, &labels);
                    // At 0 in both exports (OpenTelemetry's series exists
                    // from its first add), as `Metrics::touch` does.
                    c.add(0);
                    c
                })
                .collect(),
            false => Vec::new(),
        };
        FleetSeries {
            metrics,
            tap,
            slo,
            slo_requests,
            tenants: RwLock::default(),
        }
    }

    fn record(&self, s: &Sample) {
        if s.operation == "other" || s.outcome == "unmeasured" {
            return;
        }
        let tenant = self.metrics.tenant_label(s.tenant.as_deref()).value;
        self.with_tenant(&tenant, |t| {
            t.requests.add(1);
            if let (true, true, Some(ttft)) = (s.is_ok(), s.stream, s.ttft_ms) {
                let labels = || self.tenant_labels(&tenant);
                t.ttft
                    .get_or_init(|| Hist::new(&self.metrics, &table::TENANT_TTFT, &labels()))
                    .observe(ttft / 1e3);
            }
        });
        if self.slo.is_set() {
            let result = match meets(s, &self.slo) {
                true => SloResult::Met,
                false => SloResult::Missed,
            };
            if let Some(c) = self.slo_requests.get(result as usize) {
                c.add(1);
            }
        }
    }

    /// Runs `f` on the tenant's series, resolving them at its first request.
    fn with_tenant(&self, tenant: &Arc<str>, f: impl FnOnce(&TenantSeries)) {
        let read = self.tenants.read().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = read.get(tenant) {
            return f(t);
        }
        drop(read);
        let mut map = self.tenants.write().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(tenant) && map.len() >= MAX_TENANT_SERIES {
            // Past the cap: resolved for this request only (correct, slower).
            return f(&self.tenant_series(tenant));
        }
        f(map
            .entry(tenant.clone())
            .or_insert_with(|| self.tenant_series(tenant)))
    }

    fn tenant_series(&self, tenant: &Arc<str>) -> TenantSeries {
        let labels = self.tenant_labels(tenant);
        TenantSeries {
            requests: Count::new(&self.metrics, &table::TENANT_REQUESTS, &labels),
            ttft: OnceLock::new(),
        }
    }

    fn tenant_labels(&self, tenant: &Arc<str>) -> TenantRequests {
        TenantRequests {
            tap: self.tap.clone(),
            tenant: tenant.clone(),
        }
    }
}

impl RecordSink for AnalysisSink {
    fn name(&self) -> SinkName {
        SinkName::Analysis
    }

    fn guards_its_parts(&self) -> bool {
        true
    }

    /// One sample, then its three consumers, each under its own guard.
    fn finished(&self, f: &Finished<'_>) {
        let (micros, truncated) = f
            .offsets
            .map_or((&[][..], false), |o| (o.micros.as_slice(), o.truncated));
        let sample = Sample::from_record(
            &f.tap.tap,
            f.tap.boundary.as_str(),
            f.config.hop.as_deref(),
            f.record,
            micros,
            truncated,
        );
        let guard = |name, run: &mut dyn FnMut()| f.panics.guard(name, f.fault, run);
        guard(SinkName::FleetSeries, &mut || self.fleet.record(&sample));
        if let Some(log) = &self.record_log {
            guard(SinkName::RecordLog, &mut || log.write(sample.clone()));
        }
        if let Some(live) = &self.live {
            guard(SinkName::Analysis, &mut || {
                live.push(sample.clone());
            });
        }
    }
}

#[cfg(test)]
#[path = "analysis_tests.rs"]
mod tests;
