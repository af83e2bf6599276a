//! Fail-open per sink: a panic inside one of a tap's sinks (`x-tokentap-
//! fault: sink:<name>`, a test-build feature) loses that sink's view of the
//! request only — every other sink still gets it — and is counted in
//! `tokentap_sink_panics_total{sink}`.

use crate::collector::{Collector, Mode};
use crate::support::*;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokentap_core::labels::SinkName;
use tokentap_sim::Profile;
use tracing_subscriber::layer::SubscriberExt;

/// The request ids of every access-log line of this test process.
fn access_lines() -> &'static Mutex<Vec<String>> {
    static LINES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LINES.get_or_init(|| {
        struct Access;
        struct Id(Option<String>);
        impl tracing::field::Visit for Id {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "request_id" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Access {
            fn on_event(
                &self,
                event: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                if event.metadata().target() == "tokentap::access" {
                    let mut id = Id(None);
                    event.record(&mut id);
                    if let Some(id) = id.0 {
                        if let Some(lines) = LINES.get() {
                            lines.lock().unwrap().push(id);
                        }
                    }
                }
            }
        }
        let filter = tracing_subscriber::filter::filter_fn(|m| m.target() == "tokentap::access");
        let layer = tracing_subscriber::Layer::with_filter(Access, filter);
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));
        Mutex::new(Vec::new())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_one_sink_loses_only_its_view_and_is_counted() {
    let _g = serial().await;
    let access = access_lines();
    let collector = Collector::start(Mode::Ok);
    let behind = sim(Profile {
        ttft_ms: 1.0,
        itl_ms: 1.0,
        output_tokens: 4,
        ..Profile::default()
    });
    let scratch = scratch("sink-panics");
    let log = scratch.path().join("records.jsonl");
    let top = format!(
        "otlp:\n  endpoint: http://{}\n  metrics: false\n  timeout_seconds: 2\ncorrelation:\n  enabled: true\n  settle_seconds: 0.1\nanalysis:\n  window_seconds: 3600\n",
        collector.addr
    );
    let extra = format!(
        "    access_log:\n      sample: 1.0\n    record_log:\n      path: {}\n",
        log.display()
    );
    let tap = Tap::start_top(
        &format!("http://{}", behind.addr),
        &extra,
        &top,
        scratch.path(),
    );
    let analyses = tap.server.analyses.as_ref().unwrap().live.clone();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1e3
    };
    for sink in SinkName::ALL {
        let id = format!("panic-in-{}", sink.as_str());
        let before = tap.scrape();
        let requests_before = prom_totals(&before, "tokentap_requests_total").0;
        let tenants_before = prom_totals(&before, "tokentap_tenant_requests_total").0;
        let correlation_before = prom_totals(&before, "tokentap_correlation_total").0;
        let fault = format!("sink:{}", sink.as_str());
        let r = post(
            tap.addr,
            &[
                ("content-type", "application/json"),
                ("x-request-id", &id),
                ("x-tokentap-fault", &fault),
            ],
            &chat(true, true),
        )
        .await;
        assert!(r.complete, "{id}: the bytes flow");
        // Every sink but the one that panicked got the request.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut analysed = false;
        let got = loop {
            let scrape = tap.scrape();
            analysed |= analyses.close_window(now_ms()).samples > 0;
            let got = [
                (
                    SinkName::Metrics,
                    prom_totals(&scrape, "tokentap_requests_total").0 > requests_before,
                ),
                (SinkName::AccessLog, access.lock().unwrap().contains(&id)),
                (
                    SinkName::Hook,
                    tap.records
                        .all()
                        .iter()
                        .any(|r| r.request_id.as_deref() == Some(id.as_str())),
                ),
                (
                    SinkName::Span,
                    collector.spans().iter().any(|s| {
                        s.attributes.iter().any(|kv| {
                            kv.key == "tokentap.request_id"
                                && format!("{:?}", kv.value).contains(&id)
                        })
                    }),
                ),
                (SinkName::Analysis, analysed),
                (
                    SinkName::RecordLog,
                    std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .contains(&id),
                ),
                (
                    SinkName::FleetSeries,
                    prom_totals(&scrape, "tokentap_tenant_requests_total").0 > tenants_before,
                ),
                (
                    SinkName::Correlator,
                    prom_totals(&scrape, "tokentap_correlation_total").0 > correlation_before,
                ),
            ];
            let others_done = got.iter().all(|(s, g)| *s == sink || *g);
            if others_done || Instant::now() > deadline {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for (s, g) in got {
            if s == sink {
                assert!(!g, "{id}: the panicking sink {} still saw it", s.as_str());
            } else {
                assert!(g, "{id}: sink {} did not get the request", s.as_str());
            }
        }
        let panics = tap.sample(&format!(
            "tokentap_sink_panics_total{{boundary=\"engine\",sink=\"{}\",tap=\"t\"}}",
            sink.as_str()
        ));
        assert_eq!(panics, 1.0, "{id}: the panic counted once");
    }
    println!(
        "a panic in each of {} sinks in turn: every other sink got the request, each panic counted",
        SinkName::ALL.len()
    );
}
