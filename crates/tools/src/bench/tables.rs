//! The sweep, accuracy and wrk tables (S3, S5, S6, S9) of the Markdown
//! report; the other per-round cells are in `report.rs`.

use super::accuracy::S6;
use super::report::{median_at, rounds_of as of, us};
use super::sweep::{S3, S3_MAX_ERRORS, S5};
use super::systems::System;
use super::wrk::{CONNECTIONS, S9};
use super::Results;
use std::fmt::Write as _;

/// A rate a system held: answered at ≥ 95 % of the offered rate with
/// errors ≤ 0.1 % and p99 under 10 ms.
fn held(p: &S3) -> bool {
    p.achieved >= 0.95 * p.offered && p.error_share() <= S3_MAX_ERRORS && p.latency.p99 < 10_000.0
}

pub fn s3(md: &mut String, r: &Results, systems: &[System]) {
    let _ = writeln!(md, "\n## S3 · open-loop rate sweep, non-streaming\n");
    let _ = writeln!(md, "Requests arrive at the offered rate whatever the system does (a new connection whenever every open one is busy). Each cell: latency p50 / p99 from send to last byte; ✗ = errors above 0.1 % (the sweep stops there), ‡ = the driver itself ran late (its p99 lateness above 5 ms; its timer fires once per millisecond), so the point says more about the driver's core than the system. \"Held\" = the highest rate answered at ≥ 95 % of the offered rate with ≤ 0.1 % errors and p99 < 10 ms. LiteLLM has its own rates (in its cells).\n");
    let rates: Vec<f64> = of(&r.s3, System::Direct)
        .or_else(|| r.s3.first().map(|(_, v)| v))
        .map(|v| v.iter().map(|p| p.offered).collect())
        .unwrap_or_default();
    let mut head = String::from("| system |");
    for rate in &rates {
        let _ = write!(head, " {rate:.0}/s |");
    }
    let _ = writeln!(md, "{head} held | CPU µs per request there |");
    let _ = writeln!(md, "|---|{}---|---|", "---|".repeat(rates.len()));
    for s in systems {
        let Some(v) = of(&r.s3, *s) else { continue };
        let mut row = format!("| {s} |");
        for i in 0..rates.len().max(v.len()) {
            let Some(p) = v.get(i) else {
                row.push_str(" |");
                continue;
            };
            let rate = if rates.get(i) == Some(&p.offered) {
                String::new()
            } else {
                format!("{:.0}/s: ", p.offered)
            };
            let mark = match (p.error_share() > S3_MAX_ERRORS, p.driver_bound()) {
                (true, _) => " ✗",
                (false, true) => " ‡",
                _ => "",
            };
            let _ = write!(
                row,
                " {rate}{} / {}{mark} |",
                us(p.latency.p50),
                us(p.latency.p99)
            );
        }
        let best = v.iter().rev().find(|p| held(p));
        let _ = writeln!(
            md,
            "{row} {} | {} |",
            best.map_or("—".into(), |p| format!("{:.0}/s", p.offered)),
            best.and_then(|p| p.cpu_us_per_request)
                .map_or("—".into(), |c| format!("{c:.1}"))
        );
    }
}

/// The largest stream count with every event delivered, no stall, and
/// (against direct at the same count) added delay p99 ≤ 1 ms.
fn ceiling<'a>(v: &'a [S5], direct: Option<&[S5]>, is_direct: bool) -> Option<&'a S5> {
    v.iter()
        .take_while(|p| {
            p.delivered()
                && (is_direct
                    || direct
                        .and_then(|d| d.iter().find(|x| x.streams == p.streams))
                        .is_none_or(|d| p.delay.p99 - d.delay.p99 <= 1_000.0))
        })
        .last()
}

pub fn s5(md: &mut String, r: &Results, systems: &[System]) {
    let _ = writeln!(md, "\n## S5 · stream-concurrency ceiling, 20 ms pacing\n");
    let _ = writeln!(md, "N streams of 100 events 20 ms apart, started over one second (every stream open at once for about a second). Each cell: per-event delay p99 (client read − simulator write) and, in brackets, added over direct at the same N; ✗ = an event lost, a stream failed or a gap above 200 ms. The ceiling is the largest N with every event delivered, no stall and added p99 ≤ 1 ms. The simulator and the client share one core: direct's own ceiling is the mock's, and a system ceiling that reaches it is marked mock-bound (the system may hold more).\n");
    let counts: Vec<u32> = of(&r.s5, System::Direct)
        .or_else(|| r.s5.first().map(|(_, v)| v))
        .map(|v| v.iter().map(|p| p.streams).collect())
        .unwrap_or_default();
    let direct = of(&r.s5, System::Direct).map(Vec::as_slice);
    let mock = direct
        .and_then(|d| ceiling(d, None, true))
        .map(|p| p.streams);
    let mut head = String::from("| system |");
    for n in &counts {
        let _ = write!(head, " {n} |");
    }
    let _ = writeln!(
        md,
        "{head} ceiling | events/s there | CPU µs per event there | system CPU share there |"
    );
    let _ = writeln!(md, "|---|{}---|---|---|---|", "---|".repeat(counts.len()));
    for s in systems {
        let Some(v) = of(&r.s5, *s) else { continue };
        let mut row = format!("| {s} |");
        for n in &counts {
            let Some(p) = v.iter().find(|p| p.streams == *n) else {
                row.push_str(" |");
                continue;
            };
            let added = direct
                .and_then(|d| d.iter().find(|x| x.streams == *n))
                .filter(|_| *s != System::Direct && p.delay.n > 0)
                .map(|d| format!(" ({})", us(p.delay.p99 - d.delay.p99)))
                .unwrap_or_default();
            let bad = if p.delivered() {
                String::new()
            } else {
                format!(
                    " ✗ ({} failed, {} lost, {} stalled)",
                    p.failed, p.tokens_lost, p.stalled
                )
            };
            // Events matched to the simulator's writes (LiteLLM drops the
            // request id, so its events cannot be).
            let delay = if p.delay.n == 0 {
                "n/a".to_string()
            } else {
                us(p.delay.p99)
            };
            let _ = write!(row, " {delay}{added}{bad} |");
        }
        let c = ceiling(v, direct, *s == System::Direct);
        let label = match (c, mock) {
            (None, _) => "< first".to_string(),
            (Some(p), Some(m)) if *s != System::Direct && p.streams >= m => {
                format!("≥ {} (mock-bound)", p.streams)
            }
            (Some(p), _) => p.streams.to_string(),
        };
        let _ = writeln!(
            md,
            "{row} {label} | {} | {} | {} |",
            c.map_or("—".into(), |p| format!("{:.0}", p.events_per_s)),
            c.and_then(|p| p.cpu_us_per_event)
                .map_or("—".into(), |x| format!("{x:.2}")),
            c.and_then(|p| p.cpu_share)
                .map_or("—".into(), |x| format!("{:.0} %", 100.0 * x)),
        );
    }
}

pub fn s6(md: &mut String, v: &[S6]) {
    let _ = writeln!(
        md,
        "\n## S6 · accuracy: tokentap's record against the client and the simulator\n"
    );
    let _ = writeln!(md, "tokentap's record log (one line per request, matched by x-request-id) against the client's reads and the simulator's write of every token (one clock). TTFT: tokentap's minus the client's has a constant bias (the client's TTFT also holds the two legs between it and the tap; the simulator's misses the tap↔simulator path); the error is the distance from that bias. ITL: every gap of every stream against the simulator's gap. The hostile variant puts HAProxy with default buffering between the client and tokentap.\n");
    let _ = writeln!(md, "| variant | streams (failed) | recorded | event counts equal | TTFT − client's: bias / error p50 / p99 | TTFT − simulator's: bias / error p99 | ITL error tokentap p50 / p99 / max | ITL error client p50 / p99 | ITL p50 simulator / tokentap / client | client events per read |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for x in v {
        let _ = writeln!(
            md,
            "| {} | {} ({}) | {} | {} | {} / {} / {} | {} / {} | {} / {} / {} | {} / {} | {} / {} / {} | {:.2} |",
            x.variant,
            x.streams,
            x.failed,
            x.recorded,
            x.counts_equal,
            us(x.ttft_client_bias),
            us(x.ttft_client_error.p50),
            us(x.ttft_client_error.p99),
            us(x.ttft_truth_bias),
            us(x.ttft_truth_error.p99),
            us(x.itl_error_tap.p50),
            us(x.itl_error_tap.p99),
            us(x.itl_error_tap.max),
            us(x.itl_error_client.p50),
            us(x.itl_error_client.p99),
            us(x.itl_p50_truth),
            us(x.itl_p50_tap),
            us(x.itl_p50_client),
            x.client_events_per_read
        );
    }
}

/// S9 (wrk): per connection count, requests per second, p99 and CPU per
/// request (medians over rounds), and the CPU per request as a ratio to
/// nginx's in the same run.
pub fn s9(md: &mut String, r: &Results, systems: &[System]) {
    let _ = writeln!(
        md,
        "\n## S9 · wrk (1 thread), non-streaming, keep-alive connections\n"
    );
    let _ = writeln!(md, "Debian's `wrk` on the driver's core sends the S4 request; per connection count: requests per second (p99), CPU µs per request of the system (median over rounds), and that CPU as a multiple of nginx's. Errors: non-2xx responses and socket errors over all rounds.\n");
    let point = |s: System, c: u32, f: &dyn Fn(&S9) -> f64| -> f64 {
        median_at(&r.s9, s, |x| x.connections == c, f)
    };
    let cpu = |x: &S9| x.cpu_us_per_request.unwrap_or(f64::NAN);
    let mut head = String::from("| system |");
    for c in CONNECTIONS {
        let _ = write!(head, " c={c}: req/s (p99) | CPU µs/req | × nginx |");
    }
    let _ = writeln!(md, "{head} errors |");
    let _ = writeln!(md, "|---|{}---|", "---|---|---|".repeat(CONNECTIONS.len()));
    for s in systems {
        let Some(rounds) = of(&r.s9, *s) else {
            continue;
        };
        let mut row = format!("| {s} |");
        for c in CONNECTIONS {
            let mine = point(*s, c, &cpu);
            let nginx = point(System::Nginx, c, &cpu);
            // No CPU figure (direct) or no nginx in the run: a dash.
            let fmt = |x: f64, digits: usize| {
                if x.is_finite() {
                    format!("{x:.digits$}")
                } else {
                    "—".to_string()
                }
            };
            let _ = write!(
                row,
                " {:.0} ({}) | {} | {} |",
                point(*s, c, &|x| x.rps),
                us(point(*s, c, &|x| x.latency.p99)),
                fmt(mine, 1),
                fmt(mine / nginx, 2)
            );
        }
        let errors: u64 = rounds
            .iter()
            .flatten()
            .map(|x| x.non_2xx + x.socket_errors)
            .sum();
        let _ = writeln!(md, "{row} {errors} |");
    }
}
