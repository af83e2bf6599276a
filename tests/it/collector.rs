//! An in-process OTLP/HTTP collector for the tests: decodes what tokentap
//! exports with `opentelemetry-proto`, keeps the raw bodies (for canary
//! searches), and can misbehave: never answer, answer slowly, or fail.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, Metric};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokentap_sim::wire;
use tokio::io::AsyncWriteExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ok,
    /// Accepts connections and requests, never answers.
    Blackhole,
    /// Answers after this long.
    Slow(Duration),
    /// Answers with this status.
    Failing(u16),
}

#[derive(Default)]
struct Received {
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
    raw: Vec<Vec<u8>>,
}

pub struct Collector {
    pub addr: SocketAddr,
    got: Arc<Mutex<Received>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Collector {
    pub fn start(mode: Mode) -> Collector {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got = Arc::new(Mutex::new(Received::default()));
        let g = got.clone();
        rt.spawn(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                let g = g.clone();
                tokio::spawn(async move {
                    let (mut rd, mut wr) = tokio::io::split(s);
                    let mut buf = Vec::new();
                    while let Ok(Some(req)) = wire::read_request(&mut rd, &mut buf).await {
                        let status = match mode {
                            Mode::Blackhole => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                return;
                            }
                            Mode::Slow(d) => {
                                tokio::time::sleep(d).await;
                                200
                            }
                            Mode::Failing(code) => code,
                            Mode::Ok => 200,
                        };
                        if status == 200 {
                            let mut r = g.lock().unwrap();
                            r.raw.push(req.body.clone());
                            if req.path.ends_with("/v1/traces") {
                                r.traces.push(ExportTraceServiceRequest::decode(req.body.as_slice()).unwrap());
                            } else if req.path.ends_with("/v1/metrics") {
                                r.metrics.push(ExportMetricsServiceRequest::decode(req.body.as_slice()).unwrap());
                            }
                        }
                        let head = format!("HTTP/1.1 {status} X\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
                        if wr.write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Collector {
            addr,
            got,
            runtime: Some(rt),
        }
    }

    /// A relay instead of a sink: every trace export received on `addr`
    /// (port 0: any) is decoded and handed to `handle`, then answered 200.
    pub fn relay<F, Fut>(addr: SocketAddr, handle: F) -> Collector
    where
        F: Fn(ExportTraceServiceRequest) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let l = std::net::TcpListener::bind(addr).unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = Arc::new(handle);
        rt.spawn(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                let handle = handle.clone();
                tokio::spawn(async move {
                    let (mut rd, mut wr) = tokio::io::split(s);
                    let mut buf = Vec::new();
                    while let Ok(Some(req)) = wire::read_request(&mut rd, &mut buf).await {
                        if req.path.ends_with("/v1/traces") {
                            if let Ok(export) = ExportTraceServiceRequest::decode(req.body.as_slice()) {
                                handle(export).await;
                            }
                        }
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                        if wr.write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Collector {
            addr,
            got: Arc::new(Mutex::new(Received::default())),
            runtime: Some(rt),
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        let r = self.got.lock().unwrap();
        r.traces
            .iter()
            .flat_map(|t| t.resource_spans.iter())
            .flat_map(|rs| rs.scope_spans.iter())
            .flat_map(|ss| ss.spans.iter().cloned())
            .collect()
    }

    pub fn service_names(&self) -> Vec<String> {
        let r = self.got.lock().unwrap();
        r.traces
            .iter()
            .flat_map(|t| t.resource_spans.iter())
            .filter_map(|rs| rs.resource.as_ref())
            .filter_map(|res| string_attr(&res.attributes, "service.name"))
            .collect()
    }

    /// The metrics of the latest export (exports are cumulative).
    pub fn latest_metrics(&self) -> Vec<Metric> {
        let r = self.got.lock().unwrap();
        r.metrics
            .last()
            .map(|m| {
                m.resource_metrics
                    .iter()
                    .flat_map(|rm| rm.scope_metrics.iter())
                    .flat_map(|sm| sm.metrics.iter().cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn raw(&self) -> Vec<Vec<u8>> {
        self.got.lock().unwrap().raw.clone()
    }
}

pub fn value(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::ArrayValue(a)) => {
            format!("{:?}", a.values.iter().map(value).collect::<Vec<_>>())
        }
        other => format!("{other:?}"),
    }
}

pub fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .map(value)
}

/// (count, sum, explicit bounds, per-bucket counts) summed over data points.
pub fn histogram_totals(m: &Metric) -> Option<(u64, f64, Vec<f64>, Vec<u64>)> {
    let Some(metric::Data::Histogram(h)) = &m.data else {
        return None;
    };
    let mut count = 0;
    let mut sum = 0.0;
    let mut bounds = Vec::new();
    let mut buckets: Vec<u64> = Vec::new();
    for dp in &h.data_points {
        count += dp.count;
        sum += dp.sum.unwrap_or(0.0);
        bounds = dp.explicit_bounds.clone();
        buckets.resize(dp.bucket_counts.len().max(buckets.len()), 0);
        for (b, c) in buckets.iter_mut().zip(&dp.bucket_counts) {
            *b += c;
        }
    }
    Some((count, sum, bounds, buckets))
}

pub fn counter_total(m: &Metric) -> Option<f64> {
    let Some(metric::Data::Sum(s)) = &m.data else {
        return None;
    };
    Some(
        s.data_points
            .iter()
            .map(|dp| match dp.value {
                Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(
                    i,
                )) => i as f64,
                Some(
                    opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(d),
                ) => d,
                None => 0.0,
            })
            .sum(),
    )
}
