//! `tokentap sim`: an OpenAI-compatible engine that tells the truth.
//!
//! It serves `/v1/chat/completions` and `/v1/completions` (streaming or not),
//! `/v1/models`, and `/v1/moderations` (a guardrail: answers after
//! `--ttft-ms`, `flagged` when the input contains `flag-me`), with a configurable TTFT, inter-token gap (mean plus
//! seeded jitter), output length, tokens per event, usage (honouring
//! `include_usage` and `continuous_usage_stats`), a role-only first delta,
//! keep-alive comments, line endings, HTTP chunk splitting, and faults
//! (malformed event, reset or close mid-stream, clean end without `[DONE]`,
//! stall, 4xx/5xx, slow headers, a huge line). Every knob can be set per
//! request with the `x-sim` header. It records the send time of every event
//! (`truth`), so tests compare what tokentap measured with what was sent.
//!
//! It also models an engine's performance behaviour, so analyses can be
//! checked against what the simulator was told:
//!
//! - **prefill cost** (`--prefill-ms-per-1k F`, per request): TTFT =
//!   `ttft-ms` + F × uncached prompt tokens / 1000. Prompt tokens are the
//!   JSON bytes of `messages` (or `prompt`) / 4.
//! - **prefix caching** (`--prefix-cache`, `--prefix-cache-blocks N`,
//!   engine-wide): vLLM-like chained 256-byte block hashes of the raw
//!   `messages` JSON; leading blocks seen before count 64 cached tokens each
//!   (at most prompt − 1), reported in `usage.prompt_tokens_details.
//!   cached_tokens` and free of prefill cost. A conversation resending its
//!   growing history hits on everything but the last partial block. LRU
//!   eviction beyond N blocks.
//! - **batching slowdown** (`--batch-slowdown F`, per request): every gap is
//!   `itl-ms` × (1 + F × (running − 1)), `running` counted when the request
//!   is admitted (its whole script is planned then: an approximation, later
//!   arrivals do not slow it down).
//! - **KV capacity** (`--kv-capacity-tokens N`, engine-wide): a request needs
//!   prompt + planned output tokens of KV; it queues until that is free
//!   (strict FIFO, head of line), the whole response (headers too) shifted
//!   by the wait; released on completion, abort or client disconnect; more
//!   than N is a 400. `--favour-tenant T` admits tenant T's requests before
//!   all others (unfair scheduling). Tenant = `x-tenant`, else the bearer
//!   token, else empty.
//!
//! The truth records per request its tenant, queue wait, running count,
//! prompt and cached tokens. `stall@K:MS` still adds MS before event K, on
//! top of all of the above.
//!
//! It writes HTTP/1.1 itself (requests parsed by httparse) because its job
//! is exact control of the bytes on the wire: chunk boundaries, partial
//! chunks, RST versus FIN, and a timestamp taken at the `write` of each event.

pub mod admission;
pub mod app;
pub mod engine;
pub mod gateway;
pub mod mcp;
pub mod prefix_cache;
pub mod profile;
pub mod script;
mod serve;
pub mod truth;
pub mod wire;

pub use engine::EngineArgs;
pub use profile::{Fault, Profile};
pub use truth::{Truth, TruthLog};

use engine::Engine;
use serve::SimState;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// `tokentap sim` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Append the ground truth of every request to this JSONL file.
    #[arg(long)]
    pub ground_truth: Option<PathBuf>,
    #[command(flatten)]
    pub profile: Profile,
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl Default for SimArgs {
    /// Loopback on a free port, default profile and engine, no TLS, no file.
    fn default() -> Self {
        SimArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls_cert: None,
            tls_key: None,
            ground_truth: None,
            profile: Profile::default(),
            engine: EngineArgs::default(),
        }
    }
}

/// How many served requests the in-memory ground truth keeps.
const TRUTH_CAP: usize = 100_000;

fn tls_acceptor(cert: &Path, key: &Path) -> std::io::Result<TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(format!("{}: {e}", cert.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("{}: {e}", cert.display())))?;
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| bad(format!("{}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A simulator running on its own thread and runtime.
pub struct Simulator {
    pub addr: SocketAddr,
    pub truth: Arc<TruthLog>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Simulator {
    /// Binds `args.listen` (port 0 picks a free port) and serves in the
    /// background until dropped.
    pub fn spawn(args: &SimArgs) -> std::io::Result<Simulator> {
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(c), Some(k)) => Some(tls_acceptor(c, k)?),
            _ => None,
        };
        let truth = Arc::new(TruthLog::new(TRUTH_CAP, args.ground_truth.as_deref())?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tokentap-sim")
            .enable_all()
            .build()?;
        // Bound here (std) so that spawning works from inside another runtime.
        let listener = std::net::TcpListener::bind(args.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(SimState::new(
            args.profile.clone(),
            Engine::new(&args.engine),
            truth.clone(),
            tls,
        ));
        runtime.spawn(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => {
                    if let Err(e) = serve::serve(l, state).await {
                        tracing::error!("simulator stopped: {e}");
                    }
                }
                Err(e) => tracing::error!("simulator cannot listen: {e}"),
            }
        });
        Ok(Simulator {
            addr,
            truth,
            runtime: Some(runtime),
        })
    }

    /// Serves on the calling thread until SIGINT or SIGTERM.
    pub fn run_blocking(args: &SimArgs) -> std::io::Result<()> {
        let sim = Simulator::spawn(args)?;
        tracing::info!(addr = %sim.addr, tls = args.tls_cert.is_some(), "simulator listening");
        tokentap_net::rt::block_until_stopped()?;
        drop(sim);
        Ok(())
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests;
