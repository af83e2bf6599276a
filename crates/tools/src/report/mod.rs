//! `tokentap report RECORDS.jsonl… [-o DIR]`: the methodology report of a
//! record log as Markdown (`report.md`), JSON (`report.json`) and one
//! self-contained HTML page with charts (`report.html`). The analyses are
//! `tokentap_core::analysis` — the same code `/report` runs live.

pub mod charts;
pub mod compound_chart;
pub mod html;
pub mod markdown;

use std::path::{Path, PathBuf};
use std::time::Duration;
use tokentap_core::analysis::span_report::{build, read_jsonl, Report};
use tokentap_core::analysis::{AnalysisSettings, Sample, Slo, TenantSource};

/// `tokentap report` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Record logs (JSONL) to analyse together: taps of the same name are
    /// one tap (replicas on several machines), and requests are joined
    /// across logs by trace id (each log's times on its own clock).
    #[arg(required = true)]
    pub records: Vec<PathBuf>,
    /// Directory for report.md, report.json and report.html.
    #[arg(short, long, default_value = ".")]
    pub out: PathBuf,
    /// Window length for the throughput–latency curve (seconds).
    #[arg(long, default_value_t = 60.0)]
    pub window_seconds: f64,
    /// TTFT objective (ms) for goodput and capacity.
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// TPOT objective (ms).
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    /// E2E objective (ms).
    #[arg(long)]
    pub slo_e2e_ms: Option<f64>,
    /// Capacity: SLO attainment that must hold.
    #[arg(long, default_value_t = 0.9)]
    pub capacity_target: f64,
    /// Capacity: requests a level needs to count.
    #[arg(long, default_value_t = 10)]
    pub capacity_min_requests: usize,
    /// A gap beyond this multiple of its request's median is a stall.
    #[arg(long, default_value_t = 5.0)]
    pub stall_multiple: f64,
    /// A gap beyond this (ms) is always a stall.
    #[arg(long, default_value_t = 1000.0)]
    pub stall_absolute_ms: f64,
    /// Tenants shown by name (the rest are `other`).
    #[arg(long, default_value_t = 10)]
    pub top_tenants: usize,
    /// Prefix cache: a request is a hit with at least this share of its
    /// input tokens cached.
    #[arg(long, default_value_t = tokentap_core::analysis::cache::DEFAULT_HIT_SHARE)]
    pub cache_hit_share: f64,
}

impl ReportArgs {
    pub fn settings(&self) -> anyhow::Result<AnalysisSettings> {
        if !(self.window_seconds.is_finite() && self.window_seconds > 0.0) {
            anyhow::bail!("--window-seconds must be positive");
        }
        if !(self.cache_hit_share > 0.0 && self.cache_hit_share <= 1.0) {
            anyhow::bail!("--cache-hit-share must be in (0, 1]");
        }
        let d = AnalysisSettings::default();
        Ok(AnalysisSettings {
            window: Duration::from_secs_f64(self.window_seconds),
            slo: Slo {
                ttft_ms: self.slo_ttft_ms,
                tpot_ms: self.slo_tpot_ms,
                e2e_ms: self.slo_e2e_ms,
            },
            capacity_target: self.capacity_target,
            capacity_min_requests: self.capacity_min_requests.max(1),
            stall: tokentap_core::analysis::StallRule {
                multiple: self.stall_multiple,
                absolute_ms: self.stall_absolute_ms,
                ..d.stall
            },
            tenant: TenantSource::ApiKey,
            top_tenants: self.top_tenants.max(1),
            cache_hit_share: self.cache_hit_share,
            ..d
        })
    }
}

/// Reads the record logs: samples and the count of lines that were not.
pub fn read(paths: &[PathBuf]) -> anyhow::Result<(Vec<Sample>, usize)> {
    let mut samples = Vec::new();
    let mut skipped = 0;
    for (i, p) in paths.iter().enumerate() {
        let text =
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        let (mut s, k) = read_jsonl(&text);
        // One log is one process (one clock); several may be machines.
        let origin = u32::try_from(i).unwrap_or(u32::MAX);
        s.iter_mut().for_each(|s| s.origin = origin);
        samples.extend(s);
        skipped += k;
    }
    Ok((samples, skipped))
}

/// Writes the three files; returns their paths.
pub fn write(dir: &Path, report: &Report, samples: &[Sample]) -> anyhow::Result<[PathBuf; 3]> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let md = dir.join("report.md");
    let json = dir.join("report.json");
    let page = dir.join("report.html");
    let write = |p: &Path, body: String| {
        std::fs::write(p, body).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
    };
    write(&md, markdown::render(report))?;
    write(&json, serde_json::to_string_pretty(report)?)?;
    write(&page, html::render(report, samples))?;
    Ok([md, json, page])
}

/// The command.
pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let settings = args.settings()?;
    let (samples, skipped) = read(&args.records)?;
    if samples.is_empty() {
        anyhow::bail!(
            "no samples in {} ({skipped} lines that are not)",
            args.records
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let source = args
        .records
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let report = build(
        &source,
        &samples,
        skipped,
        &settings,
        std::time::Instant::now(),
    );
    for p in write(&args.out, &report, &samples)? {
        println!("{}", p.display());
    }
    Ok(())
}
