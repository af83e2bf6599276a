//! OTLP/gRPC for the joiner (what the Collector's `loadbalancing` exporter
//! speaks): `TraceService/Export` served by tonic with a codec that hands
//! over the message's bytes as they came (gzip inflated by tonic, capped at
//! `receiver.max_body_bytes`), so the export is read with the same bounded
//! work as over HTTP (`Receiver::grpc`), on the blocking pool. A message
//! that does not decode is INVALID_ARGUMENT; rejected spans are a partial
//! success in the response, which the sender does not retry.

use super::receiver::{Receiver, Refused};
use bytes::{Buf, Bytes};
use std::convert::Infallible;
use std::sync::Arc;
use tokentap_core::otlp::{self, ExportResponse};
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
}

impl TraceService {
    pub fn new(receiver: Arc<Receiver>) -> Self {
        TraceService { receiver }
    }
}

impl NamedService for TraceService {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

struct Export(Arc<Receiver>);

impl UnaryService<Bytes> for Export {
    type Response = ExportResponse;
    type Future = BoxFuture<Response<ExportResponse>, Status>;
    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let receiver = self.0.clone();
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
        let receiver = self.receiver.clone();
        if req.uri().path() != EXPORT {
            return Box::pin(async move {
                Ok(Status::unimplemented("only TraceService/Export").into_http())
            });
        }
        Box::pin(async move {
            let max = receiver.max_body_bytes();
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut grpc = Grpc::new(RawCodec)
                .apply_compression_config(accept, EnabledCompressionEncodings::default())
                .apply_max_message_size_config(Some(max), None);
            Ok(grpc.unary(Export(receiver), req).await)
        })
    }
}

/// Serves until `stop` fires.
pub async fn serve(
    receiver: Arc<Receiver>,
    listener: std::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(TraceService::new(receiver), incoming, async {
            let _ = stop.await;
        })
        .await
        .map_err(std::io::Error::other)
}
