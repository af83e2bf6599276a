//! The record log: one JSONL line (`analysis::Sample`) per request per tap,
//! written by a thread of its own behind a bounded queue, so a slow disk
//! never slows traffic (a full queue drops the line and counts it). The file
//! rotates by size: `path` → `path.1` → … → `path.N` (`keep`), the oldest
//! deleted. Lines are flushed whenever the queue runs empty.
//!
//! Lines carry sizes, times, counts, bounded names and hashes — never
//! prompt or completion text, never credentials (the tenant is a header
//! value the operator chose, or a hash of the API key).

use crate::config::analysis::RecordLogConfig;
use crate::metrics::{Metrics, TapLabels};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokentap_core::analysis::Sample;
use tokentap_core::table;

/// Lines queued for the writer before new ones are dropped.
pub const QUEUE: usize = 16_384;

/// What the writer thread is sent: a line, or a request to flush.
enum Msg {
    Line(Box<Sample>),
    /// Write what came before, flush the file, then answer.
    Flush(SyncSender<()>),
}

pub struct RecordLog {
    tx: SyncSender<Msg>,
    metrics: Arc<Metrics>,
    tap: TapLabels,
}

impl RecordLog {
    /// Opens (appends to) the file and starts the writer thread.
    pub fn open(cfg: &RecordLogConfig, metrics: Arc<Metrics>, tap: TapLabels) -> io::Result<Self> {
        if let Some(dir) = cfg.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(&cfg.path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        for m in [&table::RECORD_LOG_LINES, &table::RECORD_LOG_DROPPED] {
            metrics.touch(m, &tap);
        }
        let writer = Writer {
            path: cfg.path.clone(),
            max_bytes: cfg.max_bytes,
            keep: cfg.keep,
            out: BufWriter::new(file),
            size,
            metrics: metrics.clone(),
            tap: tap.clone(),
            failing: false,
        };
        std::thread::Builder::new()
            .name(format!("tokentap-log-{}", tap.tap))
            .spawn(move || writer.run(rx))?;
        Ok(RecordLog { tx, metrics, tap })
    }

    /// A handle that flushes this log (at exit).
    pub fn flusher(&self) -> LogFlusher {
        LogFlusher(self.tx.clone())
    }

    /// Queues one line; never blocks.
    pub fn write(&self, sample: Sample) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Msg::Line(Box::new(sample)))
        {
            self.metrics.add(&table::RECORD_LOG_DROPPED, &self.tap, 1);
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    out: BufWriter<File>,
    size: u64,
    metrics: Arc<Metrics>,
    tap: TapLabels,
    /// The last write failed (warn once per failing streak).
    failing: bool,
}

/// Flushes a record log from elsewhere (the shutdown).
#[derive(Clone)]
pub struct LogFlusher(SyncSender<Msg>);

impl LogFlusher {
    /// Waits until every line queued before this call is written and the
    /// file flushed, or `deadline` passes (false).
    pub fn flush(&self, deadline: Instant) -> bool {
        let (ack, done) = mpsc::sync_channel(1);
        let mut msg = Msg::Flush(ack);
        loop {
            match self.0.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return true, // the writer ended: flushed
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
        done.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        let mut line = Vec::with_capacity(4096);
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(first) => {
                    // Write everything queued, then flush once: a burst
                    // costs one write(2), and no line waits for the next.
                    let mut acks = Vec::new();
                    self.take(&mut line, first, &mut acks);
                    while let Ok(next) = rx.try_recv() {
                        self.take(&mut line, next, &mut acks);
                    }
                    let _ = self.out.flush();
                    for ack in acks {
                        let _ = ack.try_send(());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = self.out.flush();
    }

    fn take(&mut self, buf: &mut Vec<u8>, msg: Msg, acks: &mut Vec<SyncSender<()>>) {
        match msg {
            Msg::Line(sample) => self.line(buf, *sample),
            Msg::Flush(ack) => acks.push(ack),
        }
    }

    fn line(&mut self, buf: &mut Vec<u8>, sample: Sample) {
        buf.clear();
        let ok = serde_json::to_writer(&mut *buf, &sample).is_ok() && {
            buf.push(b'\n');
            self.append(buf).is_ok()
        };
        if ok {
            self.metrics.add(&table::RECORD_LOG_LINES, &self.tap, 1);
            self.failing = false;
        } else {
            self.metrics.add(&table::RECORD_LOG_DROPPED, &self.tap, 1);
            if !self.failing {
                tracing::warn!(path = %self.path.display(), "record log: cannot write; dropping lines");
            }
            self.failing = true;
        }
    }

    fn append(&mut self, line: &[u8]) -> io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        let numbered = |k: usize| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{k}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for k in (1..self.keep).rev() {
                let from = numbered(k);
                if from.exists() {
                    std::fs::rename(&from, numbered(k + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        self.out = BufWriter::new(open_append(&self.path)?);
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentap_core::analysis::span_report::read_jsonl;

    fn sample(i: u32) -> Sample {
        Sample {
            v: 1,
            tap: "t".into(),
            outcome: "ok".into(),
            events: i,
            ..Sample::default()
        }
    }

    fn wait_for(path: &Path, lines: usize) -> Vec<Sample> {
        for _ in 0..200 {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let (v, _) = read_jsonl(&text);
            if v.len() >= lines {
                return v;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{} lines never appeared in {}", lines, path.display());
    }

    #[test]
    fn writes_lines_and_rotates_by_size() {
        let dir = std::env::temp_dir().join(format!("tokentap-rl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("records.jsonl");
        let metrics = Arc::new(Metrics::new(5, Default::default()).unwrap());
        let tap = TapLabels {
            tap: Arc::from("t"),
            boundary: tokentap_core::tap::Boundary::Engine,
        };
        let cfg = RecordLogConfig {
            path: path.clone(),
            max_bytes: 4096,
            keep: 2,
        };
        let log = RecordLog::open(&cfg, metrics.clone(), tap).unwrap();
        let one = serde_json::to_vec(&sample(0)).unwrap().len() + 1;
        let per_file = 4096 / one;
        let total = per_file * 2 + 3;
        for i in 0..total {
            log.write(sample(u32::try_from(i).unwrap()));
        }
        drop(log);
        // The newest lines are in `path`, the ones before in `.1`, `.2`.
        let last = wait_for(&path, 3);
        assert_eq!(last.len(), 3);
        assert_eq!(last[2].events as usize, total - 1);
        let mid = wait_for(&dir.join("records.jsonl.1"), per_file);
        assert_eq!(mid.len(), per_file);
        assert!(dir.join("records.jsonl.2").exists());
        assert!(!dir.join("records.jsonl.3").exists());
        let text = String::from_utf8(metrics.prom.encode()).unwrap();
        assert!(text.contains(&format!(
            "tokentap_record_log_lines_total{{boundary=\"engine\",tap=\"t\"}} {total}"
        )));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
