//! The floor of any relay built on tokio: bytes copied between a client
//! and its own upstream connection, on one current-thread runtime (as a
//! tokentap tap runs with `threads: 1`), nothing parsed, nothing measured.
//!
//! Not a product: `scripts/request-cost.py --systems floor,floor-timed,...`
//! counts what it costs per request and per streamed event beside nginx
//! and tokentap, so a relay's cost splits into what tokio itself takes (its
//! park, readiness and timer bookkeeping, one read and one write per
//! piece) and what the relay on top of it adds (BENCHMARKS.md, "The floor").
//!
//!     relay_floor LISTEN UPSTREAM [IDLE_SECONDS]
//!
//! Each piece is written on as it was read (one write per read), so it is
//! as transparent as tokentap for the streams it is measured on; a client
//! connection is one upstream connection. Without `IDLE_SECONDS`,
//! `tokio::io::copy_bidirectional`; with it, each read is bounded by that
//! idle timeout (a timer armed per read, as a relay that cuts a silent
//! peer needs).

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    let addr = |i: usize| -> std::io::Result<SocketAddr> {
        let s = args
            .get(i)
            .ok_or_else(|| invalid("usage: relay_floor LISTEN UPSTREAM [IDLE_SECONDS]".into()))?;
        s.parse().map_err(|e| invalid(format!("{s}: {e}")))
    };
    let (listen, upstream) = (addr(0)?, addr(1)?);
    let idle = match args.get(2) {
        Some(s) => Some(Duration::from_secs_f64(
            s.parse().map_err(|e| invalid(format!("{s}: {e}")))?,
        )),
        None => None,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = TcpListener::bind(listen).await?;
            loop {
                let (client, _) = listener.accept().await?;
                tokio::spawn(relay(client, upstream, idle));
            }
        })
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, idle: Option<Duration>) {
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    // As tokentap and nginx do: no Nagle on either side.
    if client.set_nodelay(true).is_err() || up.set_nodelay(true).is_err() {
        return;
    }
    match idle {
        None => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
        }
        Some(idle) => {
            // Both directions in this one task, as copy_bidirectional does.
            let (cr, cw) = client.split();
            let (ur, uw) = up.split();
            let _ = tokio::join!(copy_timed(cr, uw, idle), copy_timed(ur, cw, idle));
        }
    }
}

/// Copies until end of stream, an error or `idle` without a byte.
async fn copy_timed(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    idle: Duration,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match tokio::time::timeout(idle, from.read(&mut buf)).await {
            Ok(read) => read?,
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        };
        let Some(piece) = buf.get(..n).filter(|p| !p.is_empty()) else {
            return to.shutdown().await;
        };
        to.write_all(piece).await?;
    }
}
