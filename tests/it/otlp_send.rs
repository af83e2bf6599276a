//! Sending OTLP trace exports the way hostile and ordinary senders do:
//! spans built by hand (tokentap's attributes, or none), bodies encoded
//! once, posted over OTLP/HTTP (`post_export`) or OTLP/gRPC on HTTP/2
//! (`grpc_export`, plain or TLS, with or without a bearer token) — raw
//! bytes, so a test can send what no well-behaved exporter would.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::net::SocketAddr;
use std::sync::Arc;

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A tap's span: `tap` at `boundary` (a guardrail with `hop`), of trace
/// `trace` (`None`: the tap saw no `traceparent`; joined by fingerprint
/// `fp` then), TTFT and E2E in seconds, 8 token events.
#[allow(clippy::too_many_arguments)]
pub fn tap_span(
    trace: Option<u128>,
    fp: u64,
    tap: &str,
    boundary: &str,
    hop: Option<&str>,
    ttft: f64,
    e2e: f64,
    request_id: &str,
) -> Span {
    let offsets = (0..8)
        .map(|k| AnyValue {
            value: Some(Value::IntValue((ttft * 1e6) as i64 + k * 10_000)),
        })
        .collect();
    let mut attributes = vec![
        kv("tokentap.tap", Value::StringValue(tap.into())),
        kv("tokentap.boundary", Value::StringValue(boundary.into())),
        kv("tokentap.outcome", Value::StringValue("ok".into())),
        kv(
            "tokentap.trace.source",
            Value::StringValue(if trace.is_some() { "header" } else { "none" }.into()),
        ),
        kv("tokentap.request_id", Value::StringValue(request_id.into())),
        kv(
            "tokentap.fingerprint",
            Value::StringValue(format!("{fp:016x}")),
        ),
        kv("tokentap.ttfb", Value::DoubleValue(ttft / 2.0)),
        kv("tokentap.ttft", Value::DoubleValue(ttft)),
        kv("tokentap.e2e", Value::DoubleValue(e2e)),
        kv("tokentap.token_events.count", Value::IntValue(8)),
        kv(
            "tokentap.token_events.offsets_us",
            Value::ArrayValue(ArrayValue { values: offsets }),
        ),
    ];
    if let Some(h) = hop {
        attributes.push(kv("tokentap.hop", Value::StringValue(h.into())));
    }
    let start = now_nanos();
    Span {
        trace_id: trace
            .map(|t| t.to_be_bytes().to_vec())
            .unwrap_or_else(|| rand::random::<u128>().to_be_bytes().to_vec()),
        span_id: rand::random::<u64>().to_be_bytes().to_vec(),
        name: "chat m".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + (e2e * 1e9) as u64,
        attributes,
        ..Default::default()
    }
}

/// The smallest span a tap could send (~140 bytes): tap, boundary, E2E,
/// no trace id of its own (`trace.source: none`), no fingerprint — a loose
/// record that joins nothing: what floods a joiner's store.
pub fn small_span() -> Span {
    Span {
        trace_id: rand::random::<u128>().to_be_bytes().to_vec(),
        start_time_unix_nano: now_nanos(),
        attributes: vec![
            kv("tokentap.tap", Value::StringValue("e".into())),
            kv("tokentap.boundary", Value::StringValue("engine".into())),
            kv("tokentap.trace.source", Value::StringValue("none".into())),
            kv("tokentap.e2e", Value::DoubleValue(0.2)),
        ],
        ..Default::default()
    }
}

/// One export of `spans`, encoded.
pub fn export(spans: Vec<Span>) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// An export of `n` empty spans (two bytes each), encoded by hand: what a
/// body of `n * 2` bytes can make a decoder allocate.
pub fn empty_spans(n: usize) -> Vec<u8> {
    let mut scope = Vec::with_capacity(2 * n);
    for _ in 0..n {
        scope.extend_from_slice(&[0x12, 0x00]);
    }
    let mut rs = vec![0x12];
    prost::encoding::encode_varint(scope.len() as u64, &mut rs);
    rs.extend_from_slice(&scope);
    let mut body = vec![0x0a];
    prost::encoding::encode_varint(rs.len() as u64, &mut body);
    body.extend_from_slice(&rs);
    body
}

/// The partial success of an OTLP/HTTP protobuf response: rejected spans.
pub fn rejected_spans(response: &[u8]) -> i64 {
    opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(response)
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_spans)
}

/// POSTs an OTLP/HTTP protobuf body; the status and the response body.
pub async fn post_export(addr: SocketAddr, body: &[u8], token: Option<&str>) -> (u16, Vec<u8>) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut h = vec![("content-type", "application/x-protobuf")];
    if let Some(a) = &auth {
        h.push(("authorization", a.as_str()));
    }
    let r = tokentap_net::client::send(addr, "POST", "/v1/traces", &h, body)
        .await
        .unwrap();
    (r.status, r.body)
}

/// A TLS client that trusts `ca_pem` (and speaks `alpn`).
pub fn tls_client(ca_pem: &[u8], alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// One gRPC `TraceService/Export` call carrying `message` as it is, over
/// HTTP/2 (TLS when `tls` is given); the `grpc-status` and the response
/// message.
pub async fn grpc_export(
    addr: SocketAddr,
    tls: Option<&tokio_rustls::TlsConnector>,
    token: Option<&str>,
    message: &[u8],
) -> (u32, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    match tls {
        None => grpc_call(tcp, addr, token, message).await,
        Some(c) => {
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let io = c.connect(name, tcp).await.unwrap();
            grpc_call(io, addr, token, message).await
        }
    }
}

async fn grpc_call<T>(
    io: T,
    addr: SocketAddr,
    token: Option<&str>,
    message: &[u8],
) -> (u32, Vec<u8>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (h2, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut h2 = h2.ready().await.unwrap();
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let (resp, mut send) = h2.send_request(req.body(()).unwrap(), false).unwrap();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    send.reserve_capacity(framed.len());
    send.send_data(Bytes::from(framed), true).unwrap();
    let resp = resp.await.unwrap();
    let header_status = resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    let trailer_status = body
        .trailers()
        .await
        .ok()
        .flatten()
        .and_then(|t| t.get("grpc-status")?.to_str().ok()?.parse().ok());
    let status = trailer_status.or(header_status).unwrap_or(u32::MAX);
    (status, got.get(5..).unwrap_or_default().to_vec())
}
