//! `tokentap bench`: tokentap side by side with a direct connection, itself
//! with measurement off, nginx, HAProxy and LiteLLM, all in front of the
//! same in-process simulator, in interleaved rounds on loopback. See
//! `BENCHMARKS.md` for the design and the latest run.
//!
//! The driver and the simulator share one process (so the simulator's
//! write times and the client's read times are on one clock) and core 0;
//! each system under test is its own process on core 1. Results: a
//! directory per run with `results.json`, `results.md`, the configs and the
//! systems' logs. `--smoke` is the short variant `make test` runs: direct
//! and tokentap only, failing on pathologies (40/200 ms plateaus, merged
//! events, lost or reordered tokens), never on timings.

pub mod accuracy;
pub mod cells;
pub mod conn;
mod report;
pub mod stats;
pub mod sweep;
pub mod systems;
mod tables;
pub mod wrk;

use cells::Profile;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use systems::System;
use tokentap_sim::{Profile as SimProfile, SimArgs, Simulator};

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Results go to a new directory under this one.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Systems, comma-separated: direct, tokentap, tokentap-off, nginx,
    /// haproxy, litellm. Ones not installed are skipped (and said so).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "direct,tokentap,tokentap-off,nginx,haproxy,litellm"
    )]
    pub systems: Vec<String>,
    /// Interleaved rounds (each runs every cell on every system).
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// S1: seconds per system per round, and the fixed request rate.
    #[arg(long, default_value_t = 8.0)]
    pub s1_seconds: f64,
    #[arg(long, default_value_t = 500.0)]
    pub s1_rate: f64,
    /// S2: streams per client per run.
    #[arg(long, default_value_t = 3)]
    pub s2_streams: u32,
    /// S4: seconds per concurrency per system per round.
    #[arg(long, default_value_t = 3.0)]
    pub s4_seconds: f64,
    /// S9: seconds per connection count per system per round (wrk).
    #[arg(long, default_value_t = 3.0)]
    pub s9_seconds: f64,
    /// S3: seconds per offered rate (the sweep runs in the first round).
    #[arg(long, default_value_t = 3.0)]
    pub s3_seconds: f64,
    /// S5: the largest stream count tried (64, 256, 1024, 2048, 4096).
    #[arg(long, default_value_t = 4096)]
    pub s5_max: u32,
    /// Cells to run, comma-separated: s1, s2, s3, s4, s5, s6, s8, s9 (S7
    /// is computed from S1, S2, S4 and S9; S9 needs `wrk`).
    #[arg(long, value_delimiter = ',', default_value = "s1,s2,s3,s4,s5,s6,s8,s9")]
    pub cells: Vec<String>,
    /// S8: streams held open (0: skip the memory cell).
    #[arg(long, default_value_t = 1000)]
    pub memory_streams: u32,
    /// The short pathology check: direct and tokentap, one round; exits
    /// non-zero on a plateau, merged events or lost/reordered tokens.
    #[arg(long)]
    pub smoke: bool,
    /// Do not pin the systems to core 1.
    #[arg(long)]
    pub no_pin: bool,
    /// The tokentap binary to start (default: this one).
    #[arg(long)]
    pub tokentap: Option<PathBuf>,
}

/// One streaming cell: a profile at a concurrency.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StreamCell {
    pub profile: Profile,
    pub concurrency: u32,
}

/// Per system, one figure set per round.
pub type Rows<T> = Vec<(System, Vec<T>)>;

#[derive(Debug, Serialize)]
pub struct Results {
    pub machine: stats::Machine,
    pub started_unix: u64,
    pub command: String,
    pub rounds: u32,
    pub versions: Vec<(System, String)>,
    pub skipped: Vec<String>,
    pub s1_rate: Vec<(System, f64)>,
    /// Per system, one entry per round.
    pub s1: Rows<cells::S1>,
    pub s2: Vec<(StreamCell, Rows<cells::S2>)>,
    /// Per system, one entry per offered rate (first round).
    pub s3: Rows<sweep::S3>,
    /// Per system, per round, one entry per concurrency.
    pub s4: Rows<Vec<cells::S4>>,
    /// Per system, per round, one entry per connection count (wrk).
    pub s9: Rows<Vec<wrk::S9>>,
    /// Per system, one entry per stream count (first round).
    pub s5: Rows<sweep::S5>,
    /// tokentap's record against the client and the simulator.
    pub s6: Vec<accuracy::S6>,
    pub s8: Vec<(System, cells::S8)>,
    pub pathologies: Vec<String>,
}

fn cells_for(smoke: bool) -> Vec<StreamCell> {
    let profiles = if smoke {
        vec![Profile {
            events: 48,
            every_ms: 20,
        }]
    } else {
        vec![
            Profile {
                events: 64,
                every_ms: 20,
            },
            Profile {
                events: 256,
                every_ms: 5,
            },
            // A burst: the whole answer at once (a fast engine, a cached
            // answer, the last events of any stream). What a relay does
            // with pieces that arrive together shows here.
            Profile {
                events: 64,
                every_ms: 0,
            },
        ]
    };
    profiles
        .into_iter()
        .flat_map(|profile| {
            [1, 8].map(|concurrency| StreamCell {
                profile,
                concurrency,
            })
        })
        .collect()
}

/// Runs the benchmark; returns the results and the directory they are in.
pub async fn bench(args: &BenchArgs) -> anyhow::Result<(Results, PathBuf)> {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let dir = args.out.join(format!("run-{started}"));
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let tokentap = match &args.tokentap {
        Some(p) => p.clone(),
        None => std::env::current_exe()?,
    };
    // The machine's CPUs (not this process's affinity, which may already
    // be one core).
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(1);
    let pin = !args.no_pin && cpus >= 2 && systems::pin_self_to_core0();
    let sim = Arc::new(Simulator::spawn(&SimArgs {
        profile: SimProfile {
            ttft_ms: 0.0,
            itl_ms: 0.0,
            output_tokens: 16,
            numbered: true,
            ..SimProfile::default()
        },
        ..SimArgs::default()
    })?);
    let cells = cells_for(args.smoke);
    let mut profiles: Vec<Profile> = cells.iter().map(|c| c.profile).collect();
    profiles.extend([
        cells::FAST,
        Profile {
            events: 2,
            every_ms: 1,
        },
        cells::MEMORY,
    ]);
    let litellm_models = cells::litellm_models(&profiles, sim.addr);
    let wanted: Vec<System> = if args.smoke {
        vec![System::Direct, System::Tokentap]
    } else {
        args.systems
            .iter()
            .filter_map(|s| System::parse(s))
            .collect()
    };
    let mut results = Results {
        machine: stats::Machine::here(pin),
        started_unix: started,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        rounds: if args.smoke { 1 } else { args.rounds },
        versions: Vec::new(),
        skipped: Vec::new(),
        s1_rate: Vec::new(),
        s1: Vec::new(),
        s2: cells.iter().map(|c| (*c, Vec::new())).collect(),
        s3: Vec::new(),
        s4: Vec::new(),
        s9: Vec::new(),
        s5: Vec::new(),
        s6: Vec::new(),
        s8: Vec::new(),
        pathologies: Vec::new(),
    };
    let cell_on = |name: &str| args.smoke || args.cells.iter().any(|c| c == name);
    if !cell_on("s2") {
        results.s2.clear();
    }
    let start =
        |system: System| systems::start(system, sim.addr, &dir, &tokentap, pin, &litellm_models);
    let mut running = Vec::new();
    for system in wanted {
        if !systems::available(system, &dir) {
            results.skipped.push(format!(
                "{system}: not installed (scripts/bench-deps.sh installs it)"
            ));
            continue;
        }
        match start(system) {
            Ok(r) => {
                results.versions.push((system, r.version.clone()));
                running.push(r);
            }
            Err(e) => results
                .skipped
                .push(format!("{system}: did not start: {e}")),
        }
    }
    let wrk = if cell_on("s9") && !args.smoke {
        let script = dir.join("wrk-s9.lua");
        match (wrk::binary(), std::fs::write(&script, wrk::script())) {
            (Some(bin), Ok(())) => Some((bin, script)),
            (None, _) => {
                results
                    .skipped
                    .push("S9: wrk not installed (scripts/bench-deps.sh installs it)".into());
                None
            }
            (_, Err(e)) => {
                results.skipped.push(format!("S9: script not written: {e}"));
                None
            }
        }
    } else {
        None
    };
    let s1_seconds = if args.smoke { 2.0 } else { args.s1_seconds };
    let s2_streams = if args.smoke { 2 } else { args.s2_streams };
    for r in &running {
        // LiteLLM (Python, one worker) saturates far below the others: its
        // own rate, or its queue would be the whole figure.
        let rate = if r.system == System::Litellm {
            25.0
        } else {
            args.s1_rate
        };
        results.s1_rate.push((r.system, rate));
        if cell_on("s1") {
            results.s1.push((r.system, Vec::new()));
        }
        if cell_on("s4") && !args.smoke {
            results.s4.push((r.system, Vec::new()));
        }
        if wrk.is_some() {
            results.s9.push((r.system, Vec::new()));
        }
        if cell_on("s3") && !args.smoke {
            results.s3.push((r.system, Vec::new()));
        }
        if cell_on("s5") && !args.smoke {
            results.s5.push((r.system, Vec::new()));
        }
        for (_, rows) in &mut results.s2 {
            rows.push((r.system, Vec::new()));
        }
    }
    for round in 0..results.rounds {
        // Rotate the order each round so no system always runs first.
        let n = running.len().max(1);
        for i in 0..running.len() {
            let Some(r) = running.get((i + round as usize) % n) else {
                continue;
            };
            let rate = results
                .s1_rate
                .iter()
                .find(|(s, _)| *s == r.system)
                .map_or(args.s1_rate, |x| x.1);
            if let Some((_, v)) = results.s1.iter_mut().find(|(s, _)| *s == r.system) {
                eprintln!("bench: round {} · {} · S1", round + 1, r.system);
                let length = Duration::from_secs_f64(s1_seconds);
                v.push(cells::s1(r.addr, r.pid(), rate, length, round).await);
            }
            for (cell, rows) in &mut results.s2 {
                eprintln!(
                    "bench: round {} · {} · S2 {} c={}",
                    round + 1,
                    r.system,
                    cell.profile.name(),
                    cell.concurrency
                );
                let tag = format!(
                    "{:?}-{round}-{}-{}",
                    r.system,
                    cell.profile.model(),
                    cell.concurrency
                );
                let s2 = cells::s2(
                    r.addr,
                    r.pid(),
                    sim.clone(),
                    cell.profile,
                    cell.concurrency,
                    s2_streams,
                    &tag,
                )
                .await;
                if let Some((_, v)) = rows.iter_mut().find(|(s, _)| *s == r.system) {
                    v.push(s2);
                }
            }
            if let Some((_, v)) = results.s4.iter_mut().find(|(s, _)| *s == r.system) {
                let length = Duration::from_secs_f64(args.s4_seconds);
                let mut points = Vec::new();
                for c in [1, 8, 32, 64] {
                    eprintln!("bench: round {} · {} · S4 c={c}", round + 1, r.system);
                    points.push(cells::s4(r.addr, r.pid(), c, length).await);
                }
                v.push(points);
            }
            if let (Some((bin, script)), Some((_, v))) =
                (&wrk, results.s9.iter_mut().find(|(s, _)| *s == r.system))
            {
                let length = Duration::from_secs_f64(args.s9_seconds);
                let mut points = Vec::new();
                for c in wrk::CONNECTIONS {
                    eprintln!("bench: round {} · {} · S9 wrk c={c}", round + 1, r.system);
                    points.extend(wrk::s9(bin, script, r.addr, r.pid(), c, length).await);
                }
                v.push(points);
            }
            if round == 0 {
                sweeps(args, r, &sim, &mut results).await;
            }
        }
    }
    let systems_run: Vec<System> = running.iter().map(|r| r.system).collect();
    drop(running);
    if cell_on("s6") && !args.smoke {
        results.s6 = s6(&sim, &dir, &tokentap, pin).await;
    }
    if args.memory_streams > 0 && !args.smoke && cell_on("s8") {
        for system in systems_run.into_iter().filter(|s| *s != System::Direct) {
            eprintln!("bench: S8 memory · {system}");
            // A fresh process: its idle figure is its own.
            let Ok(r) = start(system) else { continue };
            let Some(pid) = r.pid() else { continue };
            let streams = if system == System::Litellm {
                args.memory_streams.min(100)
            } else {
                args.memory_streams
            };
            results
                .s8
                .push((system, cells::s8(r.addr, pid, streams).await));
        }
    }
    results.pathologies = report::pathologies(&results);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    std::fs::write(dir.join("results.md"), report::markdown(&results))?;
    Ok((results, dir))
}

/// S3 and S5 for one system (once: sweeps are long, and interleaving
/// matters less along a curve than for one figure).
async fn sweeps(
    args: &BenchArgs,
    r: &systems::Running,
    sim: &Arc<Simulator>,
    results: &mut Results,
) {
    let slow = r.system == System::Litellm;
    if let Some((_, v)) = results.s3.iter_mut().find(|(s, _)| *s == r.system) {
        let rates: &[f64] = if slow {
            &sweep::S3_RATES_SLOW
        } else {
            &sweep::S3_RATES
        };
        for &rate in rates {
            eprintln!("bench: {} · S3 {rate:.0}/s", r.system);
            let length = Duration::from_secs_f64(args.s3_seconds);
            let p = sweep::s3(r.addr, r.pid(), rate, length).await;
            let stop = p.error_share() > sweep::S3_MAX_ERRORS;
            v.push(p);
            if stop {
                break;
            }
        }
    }
    if let Some((_, v)) = results.s5.iter_mut().find(|(s, _)| *s == r.system) {
        for n in sweep::S5_STREAMS.into_iter().filter(|n| *n <= args.s5_max) {
            eprintln!("bench: {} · S5 {n} streams", r.system);
            let tag = format!("s5-{:?}-{n}", r.system);
            let p = sweep::s5(r.addr, r.pid(), sim.clone(), n, &tag).await;
            // Direct goes on (it is the mock's own ceiling); a system stops
            // at its first count that loses, stalls or fails.
            let stop = r.system != System::Direct && !p.delivered();
            v.push(p);
            tokio::time::sleep(Duration::from_secs(1)).await;
            if stop {
                break;
            }
        }
    }
}

/// S6: a fresh, recording tokentap; the client reads it directly, then
/// through HAProxy with default buffering.
async fn s6(
    sim: &Arc<Simulator>,
    dir: &std::path::Path,
    tokentap: &std::path::Path,
    pin: bool,
) -> Vec<accuracy::S6> {
    let log = dir.join("s6-records.jsonl");
    let tap = match systems::start_recording_tokentap(sim.addr, dir, tokentap, pin, &log) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bench: S6 skipped: tokentap did not start: {e}");
            return Vec::new();
        }
    };
    eprintln!("bench: S6 accuracy · client reads tokentap");
    let mut runs = vec![
        (
            "client ← tokentap · S2 profiles (32 streams)",
            accuracy::traffic(tap.addr, sim, &accuracy::mix(), "s6-direct").await,
        ),
        (
            "client ← tokentap · 256 paced streams at once",
            accuracy::traffic(tap.addr, sim, &accuracy::paced(), "s6-paced").await,
        ),
    ];
    let hostile = systems::haproxy_available()
        .then(|| systems::start_haproxy_defaults(tap.addr, dir, pin))
        .and_then(Result::ok);
    if let Some(h) = &hostile {
        eprintln!("bench: S6 accuracy · client reads HAProxy (defaults) ← tokentap");
        runs.push((
            "client ← HAProxy (defaults) ← tokentap · S2 profiles",
            accuracy::traffic(h.addr, sim, &accuracy::mix(), "s6-hostile").await,
        ));
    }
    let want = runs.iter().map(|(_, v)| v.len()).sum();
    let samples = accuracy::read_log(&log, want, Duration::from_secs(10)).await;
    runs.iter()
        .map(|(name, streams)| accuracy::compare(name, streams, &samples))
        .collect()
}

/// The `tokentap bench` command.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (results, dir) = rt.block_on(bench(args))?;
    print!("{}", report::markdown(&results));
    eprintln!("bench: results in {}", dir.display());
    if results.pathologies.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("pathologies: {}", results.pathologies.join("; "))
    }
}
