//! `FleetSeries`: the per-tenant and SLO series a finished request feeds,
//! through handles kept per tenant.

use super::*;
use crate::alloc_tests::finished_non_streamed;
use std::borrow::Cow;
use tokentap_core::tap::Boundary;
use tokentap_telemetry::registry::otel::discarding;

fn tap() -> TapLabels {
    TapLabels {
        tap: Arc::from("t"),
        boundary: Boundary::Engine,
    }
}

fn sample(tenant: Option<&str>, stream: bool, ttft_ms: Option<f64>) -> Sample {
    let mut s = Sample::from_record("t", "engine", None, &finished_non_streamed(), &[], false);
    s.tenant = tenant.map(str::to_owned);
    s.stream = stream;
    s.ttft_ms = ttft_ms;
    s
}

fn lines(m: &Metrics, name: &str) -> Vec<String> {
    let text = String::from_utf8(m.prom.encode()).unwrap();
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

#[test]
fn each_tenant_label_counts_its_requests_and_overflow_is_other() {
    let m = Arc::new(
        Metrics::new(10, Default::default())
            .unwrap()
            .with_max_tenants(2),
    );
    let slo = Slo {
        ttft_ms: Some(300.0),
        ..Slo::default()
    };
    let fleet = FleetSeries::new(m.clone(), tap(), slo);
    // Created at 0 before any request.
    assert_eq!(
        lines(&m, "tokentap_slo_requests_total"),
        [
            r#"tokentap_slo_requests_total{boundary="engine",result="met",tap="t"} 0"#,
            r#"tokentap_slo_requests_total{boundary="engine",result="missed",tap="t"} 0"#,
        ]
    );
    for s in [
        sample(Some("a"), true, Some(250.0)),
        sample(Some("a"), true, Some(500.0)),
        sample(Some("a"), false, None),
        sample(Some("b"), false, None),
        sample(Some("c"), true, Some(125.0)),
        sample(Some("d"), false, None),
        sample(None, false, None),
    ] {
        fleet.record(&s);
    }
    let mut unmeasured = sample(Some("a"), false, None);
    unmeasured.outcome = Cow::Borrowed("unmeasured");
    fleet.record(&unmeasured);
    assert_eq!(
        lines(&m, "tokentap_tenant_requests_total"),
        [
            r#"tokentap_tenant_requests_total{boundary="engine",tap="t",tenant="a"} 3"#,
            r#"tokentap_tenant_requests_total{boundary="engine",tap="t",tenant="b"} 1"#,
            r#"tokentap_tenant_requests_total{boundary="engine",tap="t",tenant="none"} 1"#,
            r#"tokentap_tenant_requests_total{boundary="engine",tap="t",tenant="other"} 2"#,
        ]
    );
    // Only tenants with a streamed, ok answer have a TTFT series.
    assert_eq!(
        lines(&m, "tokentap_tenant_time_to_first_token_seconds_count"),
        [
            r#"tokentap_tenant_time_to_first_token_seconds_count{boundary="engine",tap="t",tenant="a"} 2"#,
            r#"tokentap_tenant_time_to_first_token_seconds_count{boundary="engine",tap="t",tenant="other"} 1"#,
        ]
    );
    assert_eq!(
        lines(&m, "tokentap_tenant_time_to_first_token_seconds_sum"),
        [
            r#"tokentap_tenant_time_to_first_token_seconds_sum{boundary="engine",tap="t",tenant="a"} 0.75"#,
            r#"tokentap_tenant_time_to_first_token_seconds_sum{boundary="engine",tap="t",tenant="other"} 0.125"#,
        ]
    );
    // The non-streamed samples' TTFT is their e2e (a few µs here): met.
    assert_eq!(
        lines(&m, "tokentap_slo_requests_total"),
        [
            r#"tokentap_slo_requests_total{boundary="engine",result="met",tap="t"} 6"#,
            r#"tokentap_slo_requests_total{boundary="engine",result="missed",tap="t"} 1"#,
        ]
    );
    // `a`, `b`, `other`, `none`: one set of handles each.
    assert_eq!(fleet.tenants.read().unwrap().len(), 4);
}

#[test]
fn without_an_objective_no_slo_series_exist() {
    let m = Arc::new(Metrics::new(10, Default::default()).unwrap());
    let fleet = FleetSeries::new(m.clone(), tap(), Slo::default());
    fleet.record(&sample(Some("a"), false, None));
    assert!(lines(&m, "tokentap_slo_requests_total").is_empty());
    assert_eq!(lines(&m, "tokentap_tenant_requests_total").len(), 1);
}

#[test]
fn a_known_tenant_s_record_allocates_nothing() {
    known_tenant_allocations(Metrics::new(10, Default::default()).unwrap());
}

#[test]
fn a_known_tenant_s_record_allocates_nothing_with_otlp_metrics_on() {
    known_tenant_allocations(
        Metrics::new(10, Default::default())
            .unwrap()
            .with_otel(discarding()),
    );
}

fn known_tenant_allocations(m: Metrics) {
    let m = Arc::new(m);
    let slo = Slo {
        e2e_ms: Some(1e3),
        ..Slo::default()
    };
    let fleet = FleetSeries::new(m, tap(), slo);
    let s = sample(Some("a"), true, Some(5.0));
    fleet.record(&s);
    let info = allocation_counter::measure(|| {
        for _ in 0..100 {
            fleet.record(&s);
        }
    });
    assert_eq!(info.count_total, 0, "{} allocations", info.count_total);
}

#[test]
fn past_the_cap_a_tenant_s_requests_still_count() {
    let over = MAX_TENANT_SERIES + 2;
    let m = Arc::new(
        Metrics::new(10, Default::default())
            .unwrap()
            .with_max_tenants(over + 10),
    );
    let fleet = FleetSeries::new(m.clone(), tap(), Slo::default());
    let names: Vec<String> = (0..over).map(|i| format!("t{i}")).collect();
    for name in &names {
        fleet.record(&sample(Some(name), false, None));
    }
    let last = names.last().unwrap();
    fleet.record(&sample(Some(last), false, None));
    assert_eq!(fleet.tenants.read().unwrap().len(), MAX_TENANT_SERIES);
    let counted = lines(&m, "tokentap_tenant_requests_total");
    assert_eq!(counted.len(), over);
    let last_line =
        format!(r#"tokentap_tenant_requests_total{{boundary="engine",tap="t",tenant="{last}"}} 2"#);
    assert!(
        counted.contains(&last_line),
        "{last_line} not in the scrape"
    );
}
