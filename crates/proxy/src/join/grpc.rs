//! OTLP/gRPC for the joiner (what the Collector's `loadbalancing` exporter
//! speaks): tonic's generated `TraceService`, gzip accepted, messages
//! capped at `receiver.max_body_bytes`.

use super::receiver::Receiver;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use std::net::SocketAddr;
use std::sync::Arc;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

struct Service(Arc<Receiver>);

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.0.export(request.get_ref());
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Serves until `stop` fires.
pub async fn serve(
    receiver: Arc<Receiver>,
    listener: std::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let max = receiver.max_body_bytes();
    let svc = TraceServiceServer::new(Service(receiver))
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max);
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(svc, incoming, async {
            let _ = stop.await;
        })
        .await
        .map_err(std::io::Error::other)
}

/// The address a gRPC listener would take (bound by `serve`'s caller).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(addr)
}
