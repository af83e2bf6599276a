//! The gRPC receiver's connections, held to its listener's limits the way
//! `tokentap_host::Guarded` holds a pingora listener's: a connection over
//! `max_connections` is closed at once (counted `too_many_connections`);
//! an admitted one must deliver its first `PREFACE` bytes (HTTP/2's client
//! preface, or TLS's first flight) within `header_timeout`, else it is cut
//! (counted `header_timeout`). Bytes pass through untouched.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokentap_core::limits::{Admission, RejectReason};
use tokentap_host::guard::{admit, Slot};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// HTTP/2's client connection preface is 24 bytes.
pub const PREFACE: usize = 24;

/// An admitted connection: counted while it lives, cut if its first bytes
/// are late.
pub struct Admitted {
    io: TcpStream,
    _slot: Slot,
    seen: usize,
    deadline: Option<Pin<Box<Sleep>>>,
    admission: Arc<dyn Admission>,
}

/// Accepts on `listener` and yields the admitted connections (an accept
/// loop on the current runtime feeding a bounded channel).
pub fn admitted(
    listener: TcpListener,
    admission: Arc<dyn Admission>,
) -> ReceiverStream<io::Result<Admitted>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let open = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::debug!("OTLP/gRPC accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let limits = admission.limits();
            let Some(slot) = admit(&open, &admission, limits.max_connections) else {
                admission.refused(RejectReason::TooManyConnections);
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let conn = Admitted {
                io: stream,
                _slot: slot,
                seen: 0,
                deadline: Some(Box::pin(tokio::time::sleep(limits.header_timeout))),
                admission: admission.clone(),
            };
            if tx.send(Ok(conn)).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

impl AsyncRead for Admitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(d) = this.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                this.deadline = None;
                this.admission.refused(RejectReason::HeaderTimeout);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection preface not complete within receiver.request_header_seconds",
                )));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.seen += buf.filled().len() - before;
            if this.seen >= PREFACE {
                this.deadline = None;
            }
        }
        polled
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connected for Admitted {
    type ConnectInfo = TcpConnectInfo;
    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}
