//! One tap's shared state: its validated config, labels, metric handles, the
//! listeners it reports to, and the upstream peer template every request
//! clones. Built once at start; read-only afterwards.

use super::upstream_io::TimedConnector;
use crate::config::TapConfig;
use crate::metrics::{Metrics, TapLabels};
use crate::observe::Hooks;
use pingora::upstreams::peer::HttpPeer;
use pingora::utils::tls::{parse_x509, WrappedX509};
use prometheus::IntGauge;
use std::sync::Arc;
use std::time::Duration;

/// How long an idle pooled upstream connection is kept.
const UPSTREAM_POOL_IDLE: Duration = Duration::from_secs(60);

pub struct Tap {
    pub config: TapConfig,
    pub labels: TapLabels,
    pub metrics: Arc<Metrics>,
    pub in_flight: IntGauge,
    pub hooks: Hooks,
    peer: HttpPeer,
}

impl Tap {
    pub fn new(config: TapConfig, metrics: Arc<Metrics>, hooks: Hooks) -> Self {
        let labels = TapLabels {
            tap: config.name.clone(),
            boundary: config.boundary.as_str(),
        };
        let in_flight = metrics.in_flight(&labels);
        let peer = peer_template(&config);
        Tap {
            config,
            labels,
            metrics,
            in_flight,
            hooks,
            peer,
        }
    }

    /// The upstream peer for one request.
    pub fn peer(&self) -> HttpPeer {
        self.peer.clone()
    }
}

fn peer_template(cfg: &TapConfig) -> HttpPeer {
    let up = &cfg.upstream;
    let t = cfg.timeouts;
    let sni = up.tls.as_ref().map(|t| t.sni.clone()).unwrap_or_default();
    let mut p = HttpPeer::new(up.addr, up.tls.is_some(), sni);
    p.options.connection_timeout = Some(t.connect);
    p.options.total_connection_timeout = Some(t.connect.saturating_mul(2));
    // Reads are timed by `TimedConnector` (first byte vs idle), not pingora.
    p.options.read_timeout = None;
    p.options.idle_timeout = Some(UPSTREAM_POOL_IDLE);
    p.options.custom_l4 = Some(Arc::new(TimedConnector { timeouts: t }));
    if let Some(tls) = &up.tls {
        p.options.verify_cert = tls.verify;
        p.options.verify_hostname = tls.verify;
        if let Some(ders) = &tls.ca_der {
            // Each DER was parsed by x509-parser when the config loaded.
            let certs: Vec<WrappedX509> = ders
                .iter()
                .map(|d| WrappedX509::new(d.clone(), parse_x509))
                .collect();
            p.options.ca = Some(Arc::from(certs.into_boxed_slice()));
        }
    }
    p
}
