//! `HeadDeadline`: a client connection wrapped so that a request head that
//! is not complete in time fails the read (pingora then closes the
//! connection). Everything else is passed through to the inner stream
//! untouched; `scan::HeadScan` says when a head is being read.

use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokentap_core::limits::scan::HeadScan;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Called once when a head misses its deadline.
pub type OnTimeout = Arc<dyn Fn() + Send + Sync>;

pub struct HeadDeadline {
    inner: Stream,
    scan: HeadScan,
    timeout: Duration,
    /// Running while a head is being read.
    deadline: Option<Pin<Box<Sleep>>>,
    on_timeout: OnTimeout,
}

impl HeadDeadline {
    /// Wraps a just-accepted connection: its first head is due `timeout`
    /// from now.
    pub fn new(inner: Stream, timeout: Duration, on_timeout: OnTimeout) -> Self {
        HeadDeadline {
            inner,
            scan: HeadScan::new(),
            timeout,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            on_timeout,
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "request head not complete within timeouts.request_header_seconds",
    )
}

impl fmt::Debug for HeadDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeadDeadline")
            .field("inner", &self.inner)
            .field("in_head", &self.scan.in_head())
            .finish()
    }
}

impl AsyncRead for HeadDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(d) = this.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                this.deadline = None;
                (this.on_timeout)();
                return Poll::Ready(Err(timed_out()));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let was = this.scan.in_head();
            this.scan
                .on_read(buf.filled().get(before..).unwrap_or_default());
            match (was, this.scan.in_head()) {
                (false, true) => {
                    this.deadline = Some(Box::pin(tokio::time::sleep(this.timeout)));
                }
                (true, false) => this.deadline = None,
                _ => {}
            }
        }
        polled
    }
}

impl AsyncWrite for HeadDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.scan.on_write(buf.get(..n).unwrap_or_default());
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                let first = bufs.iter().find(|b| !b.is_empty());
                this.scan
                    .on_write(first.map(|b| &b[..]).unwrap_or_default());
            }
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for HeadDeadline {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for HeadDeadline {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for HeadDeadline {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }
    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for HeadDeadline {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }
    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }
    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for HeadDeadline {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for HeadDeadline {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }
    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for HeadDeadline {
    /// pingora peeks for the HTTP/2 preface before reading anything: a
    /// client that sends nothing meets the deadline here.
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let HeadDeadline {
            inner, deadline, ..
        } = self;
        let Some(d) = deadline.as_mut() else {
            return inner.try_peek(buf).await;
        };
        let peeked = tokio::select! {
            r = inner.try_peek(buf) => Some(r),
            () = d.as_mut() => None,
        };
        peeked.unwrap_or_else(|| {
            self.deadline = None;
            (self.on_timeout)();
            Err(timed_out())
        })
    }
}
