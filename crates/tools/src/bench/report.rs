//! Results → Markdown (one table per cell, rows = systems in one order,
//! figures added against direct with absolutes beside them) and the
//! pathology verdicts the smoke run fails on.

use super::cells::{S1, S2};
use super::stats::{iqr, median};
use super::systems::System;
use super::{Results, StreamCell};
use std::fmt::Write as _;

pub(super) fn rounds_of<T>(rows: &[(System, Vec<T>)], system: System) -> Option<&Vec<T>> {
    rows.iter().find(|(s, _)| *s == system).map(|(_, v)| v)
}

/// For cells with several points per round (S4's concurrencies, S9's
/// connection counts): the median over rounds of `f` at the point `at`
/// picks (non-finite figures left out, as `median` does). NaN when the
/// system did not run.
pub(super) fn median_at<P>(
    rows: &[(System, Vec<Vec<P>>)],
    system: System,
    at: impl Fn(&P) -> bool,
    f: impl Fn(&P) -> f64,
) -> f64 {
    rounds_of(rows, system).map_or(f64::NAN, |rounds| {
        median(
            rounds
                .iter()
                .filter_map(|points| points.iter().find(|p| at(p)))
                .map(f)
                .collect(),
        )
    })
}

/// Median over rounds of f(system round) − f(direct round).
fn added<T>(rows: &[(System, Vec<T>)], system: System, f: impl Fn(&T) -> f64) -> (f64, f64) {
    let (Some(sys), Some(dir)) = (rounds_of(rows, system), rounds_of(rows, System::Direct)) else {
        return (f64::NAN, f64::NAN);
    };
    let diffs: Vec<f64> = sys.iter().zip(dir).map(|(a, b)| f(a) - f(b)).collect();
    (median(diffs.clone()), iqr(diffs))
}

fn abs<T>(rows: &[(System, Vec<T>)], system: System, f: impl Fn(&T) -> f64) -> f64 {
    rounds_of(rows, system).map_or(f64::NAN, |v| median(v.iter().map(f).collect()))
}

fn sum<T>(rows: &[(System, Vec<T>)], system: System, f: impl Fn(&T) -> u64) -> u64 {
    rounds_of(rows, system).map_or(0, |v| v.iter().map(f).sum())
}

pub(super) fn us(x: f64) -> String {
    if x.is_nan() {
        "—".into()
    } else if x.abs() >= 10_000.0 {
        format!("{:.1} ms", x / 1e3)
    } else {
        format!("{x:.0} µs")
    }
}

fn opt_us(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{v:.1}"))
}

fn systems_in(r: &Results) -> Vec<System> {
    System::ROWS
        .into_iter()
        .filter(|s| r.versions.iter().any(|(x, _)| x == s))
        .collect()
}

pub fn markdown(r: &Results) -> String {
    let mut md = String::new();
    let m = &r.machine;
    let _ = writeln!(md, "## Machine\n");
    let _ = writeln!(
        md,
        "{} · {} CPUs · {:.0} GiB · Linux {} · clocksource {} · systems {} · {} round(s), interleaved\n",
        m.cpu,
        m.cpus,
        m.memory_gib,
        m.kernel,
        m.clocksource,
        if m.pinned {
            "pinned to core 1 (driver and simulator on core 0)"
        } else {
            "not pinned"
        },
        r.rounds
    );
    let _ = writeln!(md, "Command: `{}`\n", r.command);
    for (s, v) in &r.versions {
        let _ = writeln!(md, "- {s}: {v}");
    }
    for s in &r.skipped {
        let _ = writeln!(md, "- skipped — {s}");
    }
    let systems = systems_in(r);

    if !r.s1.is_empty() {
        let _ = writeln!(md, "\n## S1 · non-streaming, one connection, open loop\n");
        let _ = writeln!(md, "Latency from each request's scheduled start to its last byte (no coordinated omission); added = system − direct, median of round medians (IQR over rounds).\n");
        let _ = writeln!(md, "| system | rate | added p50 | added p90 | added p99 | added p99.9 | p50 / p99 | CPU µs per request | errors | idle CPU |");
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
        for s in &systems {
            let rate = r.s1_rate.iter().find(|(x, _)| x == s).map_or(0.0, |x| x.1);
            let (a50, i50) = added(&r.s1, *s, |x: &S1| x.latency.p50);
            let (a90, _) = added(&r.s1, *s, |x: &S1| x.latency.p90);
            let (a99, _) = added(&r.s1, *s, |x: &S1| x.latency.p99);
            let (a999, _) = added(&r.s1, *s, |x: &S1| x.latency.p999);
            let _ = writeln!(
                md,
                "| {s} | {rate:.0}/s | {} (±{}) | {} | {} | {} | {} / {} | {} | {} | {:.0} % |",
                us(a50),
                us(i50 / 2.0),
                us(a90),
                us(a99),
                us(a999),
                us(abs(&r.s1, *s, |x: &S1| x.latency.p50)),
                us(abs(&r.s1, *s, |x: &S1| x.latency.p99)),
                opt_us(rounds_of(&r.s1, *s).and_then(|v| {
                    let c: Vec<f64> = v.iter().filter_map(|x| x.cpu_us_per_request).collect();
                    (!c.is_empty()).then(|| median(c))
                })),
                sum(&r.s1, *s, |x: &S1| x.errors),
                100.0 * abs(&r.s1, *s, |x: &S1| x.idle),
            );
        }
    }

    for (cell, rows) in &r.s2 {
        let _ = writeln!(
            md,
            "\n## S2 · streaming {} at concurrency {}\n",
            cell.profile.name(),
            cell.concurrency
        );
        let _ = writeln!(md, "Event delay = the client's read − the simulator's write of that event (one clock); gap distortion = |client gap − simulator gap|; events per read counts token events per client read that carried any.\n");
        let _ = writeln!(md, "| system | added TTFT p50 | TTFT p50 / p99 | event delay p50 / p99 / max | added delay p50 / p99 | gap distortion p50 / p99 | events per read | lost / misordered tokens | streams (failed) | CPU µs per event |");
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
        for s in &systems {
            let Some(v) = rounds_of(rows, *s) else {
                continue;
            };
            let (t50, _) = added(rows, *s, |x: &S2| x.ttft.p50);
            let (d50, _) = added(rows, *s, |x: &S2| x.event_delay.p50);
            let (d99, _) = added(rows, *s, |x: &S2| x.event_delay.p99);
            let matched: u64 = v.iter().map(|x| x.matched).sum();
            let delay = |f: &dyn Fn(&S2) -> f64| {
                if matched == 0 {
                    "n/a".to_string()
                } else {
                    us(abs(rows, *s, f))
                }
            };
            let _ = writeln!(
                md,
                "| {s} | {} | {} / {} | {} / {} / {} | {} / {} | {} / {} | {:.2} | {} / {} | {} ({}) | {} |",
                us(t50),
                us(abs(rows, *s, |x: &S2| x.ttft.p50)),
                us(abs(rows, *s, |x: &S2| x.ttft.p99)),
                delay(&|x: &S2| x.event_delay.p50),
                delay(&|x: &S2| x.event_delay.p99),
                delay(&|x: &S2| x.event_delay.max),
                if matched == 0 { "n/a".into() } else { us(d50) },
                if matched == 0 { "n/a".into() } else { us(d99) },
                delay(&|x: &S2| x.gap_distortion.p50),
                delay(&|x: &S2| x.gap_distortion.p99),
                abs(rows, *s, |x: &S2| x.events_per_read),
                sum(rows, *s, |x: &S2| x.tokens_lost),
                sum(rows, *s, |x: &S2| x.tokens_misordered),
                sum(rows, *s, |x: &S2| x.streams),
                sum(rows, *s, |x: &S2| x.failed),
                opt_us(v.iter().filter_map(|x| x.cpu_us_per_event).reduce(f64::min).map(|_| {
                    median(v.iter().filter_map(|x| x.cpu_us_per_event).collect())
                })),
            );
        }
    }

    if !r.s3.is_empty() {
        super::tables::s3(&mut md, r, &systems);
    }
    if !r.s4.is_empty() {
        s4_table(&mut md, r, &systems);
    }
    if !r.s9.is_empty() {
        super::tables::s9(&mut md, r, &systems);
    }
    if !r.s5.is_empty() {
        super::tables::s5(&mut md, r, &systems);
    }
    if !r.s6.is_empty() {
        super::tables::s6(&mut md, &r.s6);
    }

    if let (Some(on), Some(off)) = (
        rounds_of(&r.s1, System::Tokentap),
        rounds_of(&r.s1, System::TokentapOff),
    ) {
        let _ = writeln!(md, "\n## S7 · the cost of measuring (tokentap on − off)\n");
        let d50 = median(
            on.iter()
                .zip(off)
                .map(|(a, b)| a.latency.p50 - b.latency.p50)
                .collect(),
        );
        let cpu = |v: &Vec<S1>| median(v.iter().filter_map(|x| x.cpu_us_per_request).collect());
        let _ = writeln!(md, "| figure | on − off |\n|---|---|");
        let _ = writeln!(md, "| S1 latency p50 | {} |", us(d50));
        let _ = writeln!(md, "| S1 CPU per request | {:.1} µs |", cpu(on) - cpu(off));
        if rounds_of(&r.s9, System::Tokentap).is_some()
            && rounds_of(&r.s9, System::TokentapOff).is_some()
        {
            for c in super::wrk::CONNECTIONS {
                let cpu = |s: System| {
                    median_at(
                        &r.s9,
                        s,
                        |x| x.connections == c,
                        |x| x.cpu_us_per_request.unwrap_or(f64::NAN),
                    )
                };
                let _ = writeln!(
                    md,
                    "| S9 wrk c={c} CPU per request | {:.1} µs |",
                    cpu(System::Tokentap) - cpu(System::TokentapOff)
                );
            }
        }
        for (cell, rows) in &r.s2 {
            let c = |s: System| {
                rounds_of(rows, s).map_or(f64::NAN, |v| {
                    median(v.iter().filter_map(|x| x.cpu_us_per_event).collect())
                })
            };
            let _ = writeln!(
                md,
                "| S2 {} c={} CPU per event (incl. the connection's share) | {:.2} µs |",
                cell.profile.name(),
                cell.concurrency,
                c(System::Tokentap) - c(System::TokentapOff)
            );
        }
    }

    if !r.s8.is_empty() {
        let _ = writeln!(md, "\n## S8 · memory (a fresh process per system)\n");
        let _ = writeln!(md, "| system | idle | with streams open (plateau / peak) | after | streams (failed) |\n|---|---|---|---|---|");
        let mib = |k: u64| format!("{:.1} MiB", k as f64 / 1024.0);
        for s in System::ROWS {
            if let Some((_, m)) = r.s8.iter().find(|(x, _)| *x == s) {
                let _ = writeln!(
                    md,
                    "| {s} | {} | {} / {} | {} | {} ({}) |",
                    mib(m.idle_kib),
                    mib(m.plateau_kib),
                    mib(m.peak_kib),
                    mib(m.after_kib),
                    m.streams,
                    m.failed
                );
            }
        }
    }
    let _ = writeln!(
        md,
        "\n## Verdict\n\n{}\n",
        if r.pathologies.is_empty() {
            "No pathology: no 40/200 ms plateau, no merged events, no lost or reordered tokens through tokentap.".to_string()
        } else {
            format!("PATHOLOGIES: {}", r.pathologies.join("; "))
        }
    );
    md
}

/// S4: requests per second (and p99) per concurrency, medians over rounds;
/// the best rate with p99 under 5 ms; marked when within 10 % of direct
/// (the driver and simulator on their one core, not the system, set it).
fn s4_table(md: &mut String, r: &Results, systems: &[System]) {
    let _ = writeln!(
        md,
        "\n## S4 · closed loop, non-streaming, keep-alive connections\n"
    );
    let _ = writeln!(md, "Requests per second (p99 latency) at each concurrency, median over rounds; \"best\" is the highest rate whose p99 stayed under 5 ms; † = within 10 % of direct, so bound by the driver and simulator (one core), not by the system.\n");
    let concurrencies: Vec<u32> =
        r.s4.first()
            .and_then(|(_, rounds)| rounds.first())
            .map(|p| p.iter().map(|x| x.concurrency).collect())
            .unwrap_or_default();
    let mut head = String::from("| system |");
    for c in &concurrencies {
        let _ = write!(head, " c={c} |");
    }
    let _ = writeln!(
        md,
        "{head} best (p99 < 5 ms) | CPU µs per request at the best |"
    );
    let _ = writeln!(md, "|---|{}---|---|", "---|".repeat(concurrencies.len()));
    let point = |s: System, c: u32, f: &dyn Fn(&super::cells::S4) -> f64| -> f64 {
        median_at(&r.s4, s, |x| x.concurrency == c, f)
    };
    for s in systems {
        if rounds_of(&r.s4, *s).is_none() {
            continue;
        }
        let mut row = format!("| {s} |");
        let mut best: Option<(f64, u32)> = None;
        for c in &concurrencies {
            let rps = point(*s, *c, &|x| x.rps);
            let p99 = point(*s, *c, &|x| x.latency.p99);
            let direct = point(System::Direct, *c, &|x| x.rps);
            let bound = if *s != System::Direct && rps >= 0.9 * direct {
                " †"
            } else {
                ""
            };
            let _ = write!(row, " {rps:.0}{bound} ({}) |", us(p99));
            if p99 < 5_000.0 && best.is_none_or(|(b, _)| rps > b) {
                best = Some((rps, *c));
            }
        }
        let cpu = best.map_or(f64::NAN, |(_, c)| {
            point(*s, c, &|x| x.cpu_us_per_request.unwrap_or(f64::NAN))
        });
        let _ = writeln!(
            md,
            "{row} {} | {} |",
            best.map_or("—".into(), |(b, c)| format!("{b:.0}/s at c={c}")),
            if cpu.is_nan() {
                "—".into()
            } else {
                format!("{cpu:.1}")
            }
        );
    }
}

/// What must never happen through tokentap (timings aside): a delay
/// plateau (Nagle × delayed ACK, 40 ms; corking, 200 ms), events merged
/// into one read (in paced profiles: a burst's come together anyway),
/// tokens lost or out of order, failed streams.
pub fn pathologies(r: &Results) -> Vec<String> {
    r.s2.iter()
        .flat_map(|(cell, rows)| stream_pathologies(cell, rows))
        .collect()
}

/// A round's events per read as evidence of merging: 1.00 (no evidence)
/// where the host stalled the relay, i.e. most events came on time (delay
/// p50 under half the pacing) but the tail waited longer than the pacing.
/// Two events then sat in the relay's upstream socket and one read took
/// both, through any relay (BENCHMARKS.md, "Events per read in F's run":
/// nginx and HAProxy merged alike). A relay that holds events shows the
/// hold at the median, and one that merges without a delay does so with
/// the tail under the pacing: both still count.
fn judged_events_per_read(x: &S2, every_us: f64) -> f64 {
    let stalled = x.event_delay.p99 > every_us && x.event_delay.p50 < every_us / 2.0;
    if stalled {
        1.0
    } else {
        x.events_per_read
    }
}

/// [`pathologies`] of one S2 cell.
fn stream_pathologies(cell: &StreamCell, rows: &[(System, Vec<S2>)]) -> Vec<String> {
    let mut out = Vec::new();
    let name = format!("S2 {} c={}", cell.profile.name(), cell.concurrency);
    for s in [System::Tokentap, System::TokentapOff] {
        let Some(v) = rounds_of(rows, s) else {
            continue;
        };
        let (d90, _) = added(rows, s, |x: &S2| x.event_delay.p90);
        if d90 > 20_000.0 {
            out.push(format!(
                "{s} {name}: events delayed by a plateau (added p90 {})",
                us(d90)
            ));
        }
        // A burst's events come together to every system, direct too:
        // read together is no merge there.
        let every_us = f64::from(cell.profile.every_ms) * 1e3;
        let epr = abs(rows, s, |x: &S2| judged_events_per_read(x, every_us));
        if cell.profile.every_ms > 0 && epr.is_finite() && epr > 1.01 {
            let raw = abs(rows, s, |x: &S2| x.events_per_read);
            out.push(format!(
                "{s} {name}: {epr:.2} events per read (merged; {raw:.2} in all rounds)"
            ));
        }
        let lost: u64 = v.iter().map(|x| x.tokens_lost + x.tokens_misordered).sum();
        if lost > 0 {
            out.push(format!("{s} {name}: {lost} tokens lost or misordered"));
        }
        let failed: u64 = v.iter().map(|x| x.failed).sum();
        if failed > 0 {
            out.push(format!("{s} {name}: {failed} streams failed"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::stats::Dist;
    use super::*;

    #[test]
    fn median_at_takes_the_picked_point_of_every_round() {
        // Two rounds of (point, figure); the second round lacks point 2.
        let rows = vec![(
            System::Tokentap,
            vec![
                vec![(1, 10.0), (2, 100.0)],
                vec![(1, 30.0)],
                vec![(1, f64::NAN), (2, 300.0)],
            ],
        )];
        let at = |p: u32| move |x: &(u32, f64)| x.0 == p;
        assert_eq!(median_at(&rows, System::Tokentap, at(1), |x| x.1), 20.0);
        assert_eq!(median_at(&rows, System::Tokentap, at(2), |x| x.1), 200.0);
        assert!(median_at(&rows, System::Tokentap, at(3), |x| x.1).is_nan());
        assert!(median_at(&rows, System::Nginx, at(1), |x| x.1).is_nan());
    }

    #[test]
    fn events_read_together_are_a_merge_only_where_the_simulator_paced_them() {
        let merged = S2 {
            streams: 3,
            events_per_read: 2.0,
            ..S2::default()
        };
        let rows = vec![(System::Tokentap, vec![merged])];
        let cell = |every_ms| StreamCell {
            profile: super::super::cells::Profile {
                events: 64,
                every_ms,
            },
            concurrency: 1,
        };
        let paced = stream_pathologies(&cell(20), &rows);
        assert!(
            matches!(paced.as_slice(), [one] if one.contains("events per read (merged")),
            "{paced:?}"
        );
        assert!(stream_pathologies(&cell(0), &rows).is_empty());
    }

    #[test]
    fn merges_a_stalled_host_explains_are_no_pathology_but_a_hold_is() {
        let round = |epr: f64, p50: f64, p99: f64| S2 {
            streams: 8,
            events_per_read: epr,
            event_delay: Dist {
                p50,
                p90: p50,
                p99,
                ..Dist::default()
            },
            ..S2::default()
        };
        let cell = StreamCell {
            profile: super::super::cells::Profile {
                events: 256,
                every_ms: 5,
            },
            concurrency: 8,
        };
        let judge = |rounds: Vec<S2>| stream_pathologies(&cell, &[(System::Tokentap, rounds)]);
        // F's run, tokentap at 256 × 5 ms c=8: merges only in the rounds
        // whose tail waited 9–16 ms while the median event came in 0.2 ms.
        let stalled = vec![
            round(1.00, 163.0, 458.0),
            round(1.04, 196.0, 10_452.0),
            round(1.27, 776.0, 15_720.0),
            round(1.00, 179.0, 1_822.0),
            round(1.04, 193.0, 8_757.0),
        ];
        assert!(judge(stalled).is_empty());
        // Merges while every event came well within the pacing: no stall
        // explains them.
        let on_time = vec![round(1.2, 150.0, 900.0); 3];
        assert!(matches!(judge(on_time).as_slice(), [m] if m.contains("merged")));
        // A relay that holds each event for the next: the hold is the median.
        let hold = vec![round(2.0, 5_000.0, 9_000.0); 3];
        assert!(matches!(judge(hold).as_slice(), [m] if m.contains("merged")));
    }
}
