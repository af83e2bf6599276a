//! Scrapes the engines listed in `analysis.engines` (their Prometheus
//! endpoints) on a thread of its own, feeding `analysis::engines` readings
//! that the live analyses join to each window. A failed or slow scrape is
//! counted and skipped; it never touches traffic.

use crate::config::analysis::EngineConfig;
use crate::metrics::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokentap_core::analysis::engines::{parse, EngineAcc, EngineWindow};
use tokentap_core::analysis::live::EngineSource;
use tokentap_core::labels::{EngineScrape, ScrapeResult};
use tokentap_core::table;

/// A scrape that takes longer than this is abandoned.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest metrics page read (bytes).
const MAX_PAGE: usize = 16 << 20;

pub struct Scraper {
    engines: Vec<(EngineConfig, Mutex<EngineAcc>)>,
    metrics: Arc<Metrics>,
    stop: AtomicBool,
}

impl Scraper {
    /// Starts scraping on a background thread; stops when `stop` is called
    /// or the last handle is dropped.
    pub fn start(engines: Vec<EngineConfig>, metrics: Arc<Metrics>) -> std::io::Result<Arc<Self>> {
        for e in &engines {
            for result in ScrapeResult::ALL {
                let labels = EngineScrape {
                    engine: e.name.as_str().into(),
                    result,
                };
                metrics.touch(&table::ENGINE_SCRAPES, &labels);
            }
        }
        let s = Arc::new(Scraper {
            engines: engines
                .into_iter()
                .map(|e| (e, Mutex::new(EngineAcc::default())))
                .collect(),
            metrics,
            stop: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&s);
        tokentap_net::rt::spawn_async_thread("tokentap-scrape", move || async move {
            let mut next: Vec<Instant> = Vec::new();
            loop {
                let Some(s) = weak.upgrade() else { return };
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                next.resize(s.engines.len(), Instant::now());
                for (i, (cfg, acc)) in s.engines.iter().enumerate() {
                    let due = next.get(i).is_some_and(|t| *t <= Instant::now());
                    if !due {
                        continue;
                    }
                    if let Some(t) = next.get_mut(i) {
                        *t = Instant::now() + cfg.interval;
                    }
                    let ok = match scrape(cfg).await {
                        Some(text) => {
                            let reading = parse(&text);
                            acc.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .reading(&reading);
                            true
                        }
                        None => {
                            acc.lock().unwrap_or_else(|e| e.into_inner()).failed();
                            false
                        }
                    };
                    let result = if ok {
                        ScrapeResult::Ok
                    } else {
                        ScrapeResult::Error
                    };
                    let labels = EngineScrape {
                        engine: cfg.name.as_str().into(),
                        result,
                    };
                    s.metrics.add(&table::ENGINE_SCRAPES, &labels, 1);
                }
                drop(s);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })?;
        Ok(s)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn scrape(cfg: &EngineConfig) -> Option<String> {
    let send = tokentap_net::client::send_with(
        cfg.addr,
        "GET",
        &cfg.path,
        &[("accept", "text/plain")],
        b"",
        |r| {
            if r.body.len() > MAX_PAGE {
                tokentap_net::client::Flow::Stop
            } else {
                tokentap_net::client::Flow::Continue
            }
        },
    );
    let resp = tokio::time::timeout(SCRAPE_TIMEOUT, send)
        .await
        .ok()?
        .ok()?;
    if resp.status != 200 || !resp.complete {
        return None;
    }
    String::from_utf8(resp.body).ok()
}

impl EngineSource for Scraper {
    fn take_window(&self) -> Vec<EngineWindow> {
        self.engines
            .iter()
            .map(|(cfg, acc)| {
                acc.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(&cfg.name)
            })
            .collect()
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop();
    }
}
