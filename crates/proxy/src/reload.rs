//! Hot reload: on SIGHUP (or when the polled file's content changes), the
//! config file is read and validated completely, then what can change live
//! is swapped in atomically, tap by tap (`Tap::replace`: each request keeps
//! the settings it started with). An invalid file changes nothing and says
//! why. Changes that need a restart (listen addresses, the set of taps,
//! process-wide sections) are reported and counted, never half-applied.
//!
//! `diff` is pure: two validated configs in, what to apply and what needs a
//! restart out.

use crate::config::{Config, TapConfig};
use crate::metrics::Metrics;
use crate::proxy::Tap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokentap_core::labels::{NoLabels, Reload, ReloadResult};
use tokentap_core::table;

/// What a new config changes.
#[derive(Debug, Default)]
pub struct Diff {
    /// Taps (by index) whose settings change live.
    pub live: Vec<(usize, TapConfig)>,
    /// Keys whose change needs a restart.
    pub restart: Vec<String>,
}

/// Debug text as a stand-in for equality: the validated config types are
/// compared as a whole without every type needing `PartialEq`.
fn same<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// Per tap: everything but these can change live.
fn tap_restart_keys(i: usize, a: &TapConfig, b: &TapConfig) -> Vec<String> {
    let mut keys = Vec::new();
    let key = |k: &str| format!("taps[{i}].{k}");
    if a.boundary != b.boundary {
        keys.push(key("boundary"));
    }
    if a.listen != b.listen {
        keys.push(key("listen"));
    }
    if a.h2c != b.h2c {
        keys.push(key("h2c"));
    }
    // HTTP/2 settings are fixed per listener (HTTP/1 limits apply live).
    if a.clients.h2_max_streams != b.clients.h2_max_streams {
        keys.push(key("limits.h2_max_streams"));
    }
    if a.clients.keepalive != b.clients.keepalive {
        keys.push(key("timeouts.keepalive_seconds (HTTP/2 idle timeout)"));
    }
    if !same(&a.record_log, &b.record_log) {
        keys.push(key("record_log"));
    }
    if a.hop != b.hop {
        keys.push(key("hop"));
    }
    if a.provider != b.provider {
        keys.push(key("provider"));
    }
    keys
}

/// What applying `new` over `old` means.
pub fn diff(old: &Config, new: &Config) -> Diff {
    let mut d = Diff::default();
    let names = |c: &Config| c.taps.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    if names(old) != names(new) {
        d.restart.push("taps (added, removed or reordered)".into());
        return d;
    }
    if old.admin_listen != new.admin_listen {
        d.restart.push("admin.listen".into());
    }
    if old.max_models != new.max_models {
        d.restart.push("metrics.max_models".into());
    }
    if old.max_tools != new.max_tools {
        d.restart.push("metrics.max_tools".into());
    }
    if old.threads != new.threads {
        d.restart.push("server.threads".into());
    }
    if old.grace_period != new.grace_period || old.shutdown_timeout != new.shutdown_timeout {
        d.restart.push("server (shutdown timings)".into());
    }
    if !same(&old.correlation, &new.correlation) {
        d.restart.push("correlation".into());
    }
    // `PartialEq`: its `Debug` hides header values (a rotated collector
    // token is a change too).
    if old.otlp != new.otlp {
        d.restart.push("otlp".into());
    }
    if !same(&old.analysis, &new.analysis) {
        d.restart.push("analysis".into());
    }
    for (i, (a, b)) in old.taps.iter().zip(&new.taps).enumerate() {
        let keys = tap_restart_keys(i, a, b);
        if !keys.is_empty() {
            d.restart.extend(keys);
        } else if !same(a, b) {
            d.live.push((i, b.clone()));
        }
    }
    d
}

/// The result of one reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The file is valid; `taps` were swapped; `restart` lists changes not
    /// applied because they need a restart.
    Applied {
        taps: Vec<String>,
        restart: Vec<String>,
    },
    /// Valid and equal to the running config (apart from `restart`).
    Unchanged { restart: Vec<String> },
    /// Invalid: nothing changed.
    Rejected(String),
}

impl Outcome {
    pub fn result(&self) -> ReloadResult {
        match self {
            Outcome::Applied { .. } => ReloadResult::Applied,
            Outcome::Unchanged { .. } => ReloadResult::Unchanged,
            Outcome::Rejected(_) => ReloadResult::Rejected,
        }
    }
}

/// Creates the reload series: the load at startup counts as the last
/// success.
pub fn register(metrics: &Metrics) {
    for result in ReloadResult::ALL {
        metrics.touch(&table::CONFIG_RELOADS, &Reload { result });
    }
    mark_success(metrics, 0);
}

fn mark_success(metrics: &Metrics, restart_pending: usize) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    metrics.set_int(&table::CONFIG_LAST_SUCCESS, &NoLabels {}, now);
    metrics.set_int(
        &table::CONFIG_RESTART_PENDING,
        &NoLabels {},
        i64::try_from(restart_pending).unwrap_or(i64::MAX),
    );
}

/// Reloads one server's config from its file.
pub struct Reloader {
    path: PathBuf,
    taps: Vec<Arc<Tap>>,
    metrics: Arc<Metrics>,
    /// The config the taps run (what the next file is compared with).
    running: Mutex<Config>,
}

impl Reloader {
    pub fn new(path: &Path, config: Config, taps: Vec<Arc<Tap>>, metrics: Arc<Metrics>) -> Self {
        Reloader {
            path: path.to_owned(),
            taps,
            metrics,
            running: Mutex::new(config),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads, validates and applies the file.
    pub fn reload(&self) -> Outcome {
        let outcome = match Config::load(&self.path) {
            Err(e) => Outcome::Rejected(e.to_string()),
            Ok(new) => self.apply(new),
        };
        let result = outcome.result();
        self.metrics
            .add(&table::CONFIG_RELOADS, &Reload { result }, 1);
        let restart = match &outcome {
            Outcome::Rejected(why) => {
                tracing::error!(path = %self.path.display(), "config reload rejected, the running config stays: {why}");
                return outcome;
            }
            Outcome::Applied { taps, restart } => {
                tracing::info!(taps = ?taps, "config reloaded");
                restart
            }
            Outcome::Unchanged { restart } => restart,
        };
        if !restart.is_empty() {
            tracing::warn!(keys = ?restart, "config changes that need a restart were not applied");
        }
        mark_success(&self.metrics, restart.len());
        outcome
    }

    fn apply(&self, new: Config) -> Outcome {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let d = diff(&running, &new);
        if d.live.is_empty() {
            return Outcome::Unchanged { restart: d.restart };
        }
        let mut names = Vec::new();
        for (i, cfg) in d.live {
            if let (Some(tap), Some(slot)) = (self.taps.get(i), running.taps.get_mut(i)) {
                names.push(cfg.name.to_string());
                tap.replace(cfg.clone());
                *slot = cfg;
            }
        }
        Outcome::Applied {
            taps: names,
            restart: d.restart,
        }
    }
}

/// Reloads on SIGHUP, and (with `watch`) whenever the file's content
/// changes, on a thread of its own. The thread ends with the process.
pub fn spawn_triggers(reloader: Arc<Reloader>, watch: Option<Duration>) -> std::io::Result<()> {
    tokentap_net::rt::spawn_async_thread("tokentap-reload", move || async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            tracing::error!("cannot listen for SIGHUP; config reload is off");
            return;
        };
        // Content, not mtime: a ConfigMap swaps a symlink and keeps
        // old mtimes; a changed file is what matters.
        let read = |p: &Path| std::fs::read(p).ok();
        let mut last = read(reloader.path());
        let period = watch.unwrap_or(Duration::from_secs(3600));
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    reloader.reload();
                    last = read(reloader.path());
                }
                _ = tokio::time::sleep(period), if watch.is_some() => {
                    let now = read(reloader.path());
                    if now.is_some() && now != last {
                        reloader.reload();
                        last = now;
                    }
                }
            }
        }
    })
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(upstream: &str, listen: &str, extra: &str) -> Config {
        let yaml = format!(
            "{extra}taps:\n  - name: a\n    boundary: engine\n    listen: {listen}\n    upstream: {upstream}\n  - name: b\n    boundary: engine\n    listen: 127.0.0.1:2\n    upstream: http://127.0.0.1:3\n"
        );
        Config::from_yaml(&yaml, Path::new(".")).unwrap()
    }

    #[test]
    fn upstream_changes_apply_live_listen_changes_need_a_restart() {
        let old = config("http://127.0.0.1:9", "127.0.0.1:1", "");
        let d = diff(&old, &config("http://127.0.0.1:10", "127.0.0.1:1", ""));
        assert_eq!(d.live.len(), 1);
        assert_eq!(d.live[0].0, 0);
        assert!(d.restart.is_empty());
        let d = diff(&old, &config("http://127.0.0.1:9", "127.0.0.1:5", ""));
        assert!(d.live.is_empty());
        assert_eq!(d.restart, vec!["taps[0].listen".to_string()]);
        let d = diff(&old, &old.clone());
        assert!(d.live.is_empty() && d.restart.is_empty());
        let d = diff(
            &old,
            &config(
                "http://127.0.0.1:9",
                "127.0.0.1:1",
                "analysis:\n  window_seconds: 5\n",
            ),
        );
        assert_eq!(d.restart, vec!["analysis".to_string()]);
    }
}
