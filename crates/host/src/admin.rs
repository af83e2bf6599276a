//! The admin listener: `/metrics` (Prometheus text), `/report` (the live
//! analyses of the last closed window, JSON), `/healthz` (the process
//! answers), `/readyz` (listeners bound and config loaded). Separate from the
//! taps so scrapes never compete with traffic and admin paths are never
//! answered on a tap (a `GET /metrics` on a tap goes upstream).

use async_trait::async_trait;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokentap_core::analysis::live::Live;

/// Readiness of the process, shared with whoever starts and stops it.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

pub struct AdminApp {
    metrics: prometheus::Registry,
    ready: Readiness,
    live: Option<Arc<Live>>,
}

impl AdminApp {
    /// Serves what `metrics` gathers (a registry handle: clones share it).
    pub fn new(metrics: prometheus::Registry, ready: Readiness, live: Option<Arc<Live>>) -> Self {
        AdminApp {
            metrics,
            ready,
            live,
        }
    }
}

/// The `/report` answer: the last closed window's report, or why there is
/// none yet.
fn report(live: Option<&Live>) -> (StatusCode, Vec<u8>) {
    let Some(live) = live else {
        return (
            StatusCode::NOT_FOUND,
            br#"{"error":"analyses are off (analysis.enabled: false)"}"#.to_vec(),
        );
    };
    match live.latest() {
        Some(r) => match serde_json::to_vec_pretty(&*r) {
            Ok(body) => (StatusCode::OK, body),
            Err(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error":"report could not be serialised"}"#.to_vec(),
            ),
        },
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                r#"{{"error":"no window has closed yet (window: {} s)"}}"#,
                live.settings.window.as_secs_f64()
            )
            .into_bytes(),
        ),
    }
}

/// The text exposition of everything `registry` gathers.
fn encode(registry: &prometheus::Registry) -> Vec<u8> {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    if prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .is_err()
    {
        buf.clear();
    }
    buf
}

/// Answers one admin request (pure of pingora: testable directly).
pub fn answer(
    metrics: &prometheus::Registry,
    ready: &Readiness,
    live: Option<&Live>,
    method: &Method,
    path: &str,
) -> Response<Vec<u8>> {
    let (status, ctype, body) = match (method, path) {
        (&Method::GET | &Method::HEAD, "/report") => {
            let (status, body) = report(live);
            (status, "application/json", body)
        }
        (&Method::GET | &Method::HEAD, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            encode(metrics),
        ),
        (&Method::GET | &Method::HEAD, "/healthz") => {
            (StatusCode::OK, "text/plain", b"ok\n".to_vec())
        }
        (&Method::GET | &Method::HEAD, "/readyz") if ready.get() => {
            (StatusCode::OK, "text/plain", b"ready\n".to_vec())
        }
        (&Method::GET | &Method::HEAD, "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            b"not ready\n".to_vec(),
        ),
        (&Method::GET | &Method::HEAD, _) => {
            (StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec())
        }
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            b"method not allowed\n".to_vec(),
        ),
    };
    let len = body.len();
    let body = if method == Method::HEAD {
        Vec::new()
    } else {
        body
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    if let (Ok(ct), Ok(cl)) = (ctype.parse(), len.to_string().parse()) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, ct);
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, cl);
    }
    resp
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        answer(
            &self.metrics,
            &self.ready,
            self.live.as_deref(),
            &req.method,
            req.uri.path(),
        )
    }
}

/// `tokentap health`: GETs a plain-HTTP URL (`http://host:port/path`) and
/// returns the status, within `timeout`.
pub fn probe(url: &str, timeout: std::time::Duration) -> anyhow::Result<u16> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("{url}: only http:// URLs can be probed"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let ask = async {
            let addr = tokio::net::lookup_host(authority)
                .await?
                .next()
                .ok_or_else(|| anyhow::anyhow!("{authority}: no address"))?;
            let r = tokentap_net::client::send(addr, "GET", path, &[], b"").await?;
            Ok::<u16, anyhow::Error>(r.status)
        };
        tokio::time::timeout(timeout, ask)
            .await
            .map_err(|_| anyhow::anyhow!("{url}: no answer within {timeout:?}"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let m = prometheus::Registry::new();
        let g = prometheus::IntGauge::new("tokentap_build_info", "build").unwrap();
        m.register(Box::new(g)).unwrap();
        let r = Readiness::default();
        assert_eq!(answer(&m, &r, None, &Method::GET, "/healthz").status(), 200);
        assert_eq!(answer(&m, &r, None, &Method::GET, "/readyz").status(), 503);
        r.set(true);
        assert_eq!(answer(&m, &r, None, &Method::GET, "/readyz").status(), 200);
        let metrics = answer(&m, &r, None, &Method::GET, "/metrics");
        assert!(String::from_utf8_lossy(metrics.body()).contains("tokentap_build_info"));
        assert_eq!(
            answer(&m, &r, None, &Method::GET, "/v1/chat/completions").status(),
            404
        );
        assert_eq!(
            answer(&m, &r, None, &Method::POST, "/metrics").status(),
            405
        );
    }
}
