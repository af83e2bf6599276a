//! OTLP/gRPC for the joiner (what the Collector's `loadbalancing` exporter
//! speaks): `TraceService/Export` served by tonic with a codec that hands
//! over the message's bytes as they came (gzip inflated by tonic, capped at
//! `receiver.max_body_bytes`), so the export is read with the same bounded
//! work as over HTTP (`Receiver::grpc`), on the blocking pool. A message
//! that does not decode is INVALID_ARGUMENT; rejected spans are a partial
//! success in the response, which the sender does not retry; without the
//! bearer token `receiver.auth` asks for, UNAUTHENTICATED.
//!
//! Its listener has the limits of every other (`admitted`): a connection
//! cap, and the HTTP/2 connection preface (or TLS's first flight) due
//! within `receiver.request_header_seconds`; a request must be read and
//! answered within `receiver.request_body_seconds` (tonic's timeout); dead
//! peers are found by HTTP/2 keep-alive pings.

use super::receiver::{Receiver, Refused};
use crate::JoinError;
use bytes::{Buf, Bytes};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokentap_core::limits::{Admission, RejectReason};
use tokentap_core::otlp::{self, ExportResponse};
use tokentap_host::tls::TlsFiles;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EnabledCompressionEncodings};
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

/// The gRPC path of `TraceService/Export`.
pub const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Decodes nothing: the message's bytes, for `Receiver::grpc`.
pub struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining())))
    }
}

/// Raw bytes in, the export response (prost) out.
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = ExportResponse;
    type Decode = Bytes;
    type Encoder = tonic_prost::ProstEncoder<ExportResponse>;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

/// The trace service: one method, `Export`.
#[derive(Clone)]
pub struct TraceService {
    receiver: Arc<Receiver>,
    admission: Arc<dyn Admission>,
}

impl TraceService {
    pub fn new(receiver: Arc<Receiver>, admission: Arc<dyn Admission>) -> Self {
        TraceService {
            receiver,
            admission,
        }
    }
}

impl NamedService for TraceService {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

struct Export(TraceService);

impl UnaryService<Bytes> for Export {
    type Response = ExportResponse;
    type Future = BoxFuture<Response<ExportResponse>, Status>;
    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let receiver = self.0.receiver.clone();
        let authorization = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes().to_vec());
        if !receiver.authorized(authorization.as_deref()) {
            self.0.admission.refused(RejectReason::Unauthorized);
            let _ = receiver.refused(Refused::Unauthorized);
            return Box::pin(async {
                Err(Status::unauthenticated(
                    "a bearer token is required (receiver.auth)",
                ))
            });
        }
        Box::pin(async move {
            let message = request.into_inner();
            let result = tokio::task::spawn_blocking(move || receiver.grpc(&message))
                .await
                .unwrap_or(Err(Refused::Malformed));
            match result {
                Ok(a) => Ok(Response::new(otlp::response(&a.summary))),
                Err(Refused::TooLarge) => {
                    Err(Status::invalid_argument("over receiver.max_body_bytes"))
                }
                Err(Refused::Unauthorized) => Err(Status::unauthenticated(
                    "a bearer token is required (receiver.auth)",
                )),
                Err(_) => Err(Status::invalid_argument("not an OTLP trace export")),
            }
        })
    }
}

impl<B> Service<http::Request<B>> for TraceService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let svc = self.clone();
        if req.uri().path() != EXPORT {
            return Box::pin(async move {
                Ok(Status::unimplemented("only TraceService/Export").into_http())
            });
        }
        Box::pin(async move {
            let max = svc.receiver.max_body_bytes();
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut grpc = Grpc::new(RawCodec)
                .apply_compression_config(accept, EnabledCompressionEncodings::default())
                .apply_max_message_size_config(Some(max), None);
            Ok(grpc.unary(Export(svc), req).await)
        })
    }
}

/// The gRPC receiver, running on its own thread and runtime.
pub struct Serving {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

impl Serving {
    /// Listens on `addr` (already checked free) and serves until stopped.
    pub fn start(
        receiver: Arc<Receiver>,
        addr: SocketAddr,
        admission: Arc<dyn Admission>,
        request_timeout: Duration,
        tls: Option<&TlsFiles>,
    ) -> Result<Serving, JoinError> {
        let listener = std::net::TcpListener::bind(addr).map_err(|source| {
            tokentap_host::HostError::Listen {
                key: "receiver.grpc_listen".into(),
                addr,
                source,
            }
        })?;
        let identity = match tls {
            None => None,
            Some(t) => {
                let (cert, key) = t.read().map_err(|e| JoinError::Tls(e.to_string()))?;
                Some(tonic::transport::Identity::from_pem(cert, key))
            }
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let thread =
            tokentap_net::rt::spawn_async_thread("tokentap-join-grpc", move || async move {
                if let Err(e) = serve(
                    receiver,
                    listener,
                    admission,
                    request_timeout,
                    identity,
                    stop_rx,
                )
                .await
                {
                    tracing::error!("OTLP/gRPC receiver stopped: {e}");
                }
            })
            .map_err(tokentap_host::HostError::Thread)?;
        Ok(Serving { stop, thread })
    }

    /// Stops serving; returns when its thread ended.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

async fn serve(
    receiver: Arc<Receiver>,
    listener: std::net::TcpListener,
    admission: Arc<dyn Admission>,
    request_timeout: Duration,
    identity: Option<tonic::transport::Identity>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let incoming = crate::grpc_io::admitted(listener, admission.clone());
    let mut builder = tonic::transport::Server::builder()
        .timeout(request_timeout)
        .max_concurrent_streams(Some(64))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)));
    if let Some(identity) = identity {
        builder =
            builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
    }
    builder
        .serve_with_incoming_shutdown(TraceService::new(receiver, admission), incoming, async {
            let _ = stop.await;
        })
        .await?;
    Ok(())
}
