//! The thread that closes the live analysis windows on the wall clock
//! (every `analysis.window_seconds` from the start), and the analyses'
//! wiring at startup: one `TapLive` per tap, the Prometheus gauges, the
//! engine scraper.

use crate::config::Config;
use crate::engine_scrape::Scraper;
use crate::metrics::window_gauges::WindowGauges;
use crate::metrics::Metrics;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokentap_core::analysis::live::{EngineSource, Live, WindowSink};

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or_default()
}

/// The live analyses of a server and the threads that feed them.
pub struct Analyses {
    pub live: Arc<Live>,
    scraper: Option<Arc<Scraper>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Analyses {
    /// Builds the analyses of `config` (`None` when they are off) and
    /// starts closing windows.
    pub fn start(config: &Config, metrics: &Arc<Metrics>) -> std::io::Result<Option<Analyses>> {
        let Some(cfg) = &config.analysis else {
            return Ok(None);
        };
        let scraper = if cfg.engines.is_empty() {
            None
        } else {
            Some(Scraper::start(cfg.engines.clone(), metrics.clone())?)
        };
        let taps: Vec<(String, &'static str)> = config
            .taps
            .iter()
            .map(|t| (t.name.to_string(), t.boundary.as_str()))
            .collect();
        let sinks: Vec<Arc<dyn WindowSink>> = vec![Arc::new(WindowGauges::new(metrics.clone()))];
        let live = Arc::new(Live::new(
            cfg.settings.clone(),
            &taps,
            (now_ms(), std::time::Instant::now()),
            sinks,
            scraper.clone().map(|s| s as Arc<dyn EngineSource>),
        ));
        let (tx, rx) = mpsc::channel::<()>();
        let window = cfg.settings.window;
        let closer = live.clone();
        let thread = std::thread::Builder::new()
            .name("tokentap-windows".into())
            .spawn(move || {
                let mut next = now_ms() + window.as_secs_f64() * 1e3;
                loop {
                    let wait = Duration::from_secs_f64(((next - now_ms()) / 1e3).max(0.0));
                    match rx.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {
                            closer.close_window(next.min(now_ms()));
                            next += window.as_secs_f64() * 1e3;
                            // After a long pause (suspend), skip to now.
                            if next < now_ms() {
                                next = now_ms() + window.as_secs_f64() * 1e3;
                            }
                        }
                        _ => return,
                    }
                }
            })?;
        Ok(Some(Analyses {
            live,
            scraper,
            stop: Some(tx),
            thread: Some(thread),
        }))
    }
}

impl Drop for Analyses {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(s) = &self.scraper {
            s.stop();
        }
    }
}
