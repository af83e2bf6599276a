//! OTLP/HTTP for the joiner: `POST /v1/traces` with a protobuf or JSON
//! body, gzip or not. Answers as the OTLP/HTTP spec asks: 200 with an
//! `ExportTraceServiceResponse` in the request's encoding (a partial
//! success when spans were rejected: the sender does not retry them); 400
//! for a body that does not decode, 413 over the size cap, 415 for another
//! media type or content encoding (none of which a sender retries), 404/405
//! for other paths and methods; 401 without the bearer token
//! `receiver.auth` asks for; 408 for a body not read within
//! `receiver.request_body_seconds`. Reading and joining an export runs on
//! the blocking pool, so a large export never holds up the listener.

use super::receiver::{Receiver, Refused};
use async_trait::async_trait;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use tokentap_core::limits::{Admission, RejectReason};
use tokentap_core::otlp::{self, Encoding};

pub struct OtlpHttpApp {
    receiver: Arc<Receiver>,
    admission: Arc<dyn Admission>,
    body_timeout: Duration,
}

fn respond(status: StatusCode, ctype: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    let len = body.len();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    if let (Ok(ct), Ok(cl)) = (ctype.parse(), len.to_string().parse()) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, ct);
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, cl);
    }
    resp
}

/// The request's encodings: media type and whether the body is gzip.
fn encodings(h: &http::HeaderMap) -> Result<(Encoding, bool), Refused> {
    let get = |n: &str| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let media = get("content-type").unwrap_or_default();
    let essence = media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let encoding = match essence.as_str() {
        "application/x-protobuf" | "application/protobuf" => Encoding::Protobuf,
        "application/json" => Encoding::Json,
        _ => return Err(Refused::Unsupported),
    };
    let gzip = match get("content-encoding").as_deref() {
        None | Some("") | Some("identity") => false,
        Some("gzip") => true,
        Some(_) => return Err(Refused::Unsupported),
    };
    Ok((encoding, gzip))
}

impl OtlpHttpApp {
    pub fn new(
        receiver: Arc<Receiver>,
        admission: Arc<dyn Admission>,
        body_timeout: Duration,
    ) -> Self {
        OtlpHttpApp {
            receiver,
            admission,
            body_timeout,
        }
    }

    /// Reads the body up to one byte over the cap.
    async fn body(&self, session: &mut ServerSession) -> Result<Vec<u8>, Refused> {
        let cap = self.receiver.max_body_bytes();
        let mut body = Vec::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(piece)) => {
                    if body.len() + piece.len() > cap {
                        return Err(Refused::TooLarge);
                    }
                    body.extend_from_slice(&piece);
                }
                Ok(None) => return Ok(body),
                Err(_) => return Err(Refused::Malformed),
            }
        }
    }
}

#[async_trait]
impl ServeHttp for OtlpHttpApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        if req.uri.path() != "/v1/traces" {
            return respond(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec());
        }
        if req.method != Method::POST {
            return respond(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                b"POST only\n".to_vec(),
            );
        }
        let authorization = req
            .headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if !self.receiver.authorized(authorization) {
            self.admission.refused(RejectReason::Unauthorized);
            let _ = self.receiver.refused(Refused::Unauthorized);
            let mut resp = respond(
                StatusCode::UNAUTHORIZED,
                "text/plain",
                b"a bearer token is required (receiver.auth)\n".to_vec(),
            );
            if let Ok(v) = "Bearer".parse() {
                resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
            }
            return resp;
        }
        let framing = encodings(&req.headers);
        let result = match framing {
            Err(why) => Err(self.receiver.refused(why)),
            Ok((encoding, gzip)) => {
                match tokio::time::timeout(self.body_timeout, self.body(session)).await {
                    Err(_) => {
                        self.admission.refused(RejectReason::BodyTimeout);
                        return respond(
                            StatusCode::REQUEST_TIMEOUT,
                            "text/plain",
                            b"body not complete within receiver.request_body_seconds\n".to_vec(),
                        );
                    }
                    Ok(Ok(body)) => {
                        let receiver = self.receiver.clone();
                        tokio::task::spawn_blocking(move || receiver.http(&body, encoding, gzip))
                            .await
                            .unwrap_or(Err(Refused::Malformed))
                    }
                    Ok(Err(why)) => Err(self.receiver.refused(why)),
                }
            }
        };
        match (result, framing) {
            (Ok(a), Ok((Encoding::Json, _))) => respond(
                StatusCode::OK,
                "application/json",
                otlp::response_json(&a.summary).into_bytes(),
            ),
            (Ok(a), _) => respond(
                StatusCode::OK,
                "application/x-protobuf",
                otlp::response(&a.summary).encode_to_vec(),
            ),
            (Err(Refused::Unauthorized), _) => respond(
                StatusCode::UNAUTHORIZED,
                "text/plain",
                b"a bearer token is required (receiver.auth)\n".to_vec(),
            ),
            (Err(Refused::Malformed), _) => respond(
                StatusCode::BAD_REQUEST,
                "text/plain",
                b"not an OTLP trace export\n".to_vec(),
            ),
            (Err(Refused::TooLarge), _) => respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain",
                b"over receiver.max_body_bytes\n".to_vec(),
            ),
            (Err(Refused::Unsupported), _) => respond(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "text/plain",
                b"application/x-protobuf or application/json, gzip or identity\n".to_vec(),
            ),
        }
    }
}
