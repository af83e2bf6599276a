//! The report's charts as SVG, drawn by plotters (SVG backend, no system
//! fonts: text is left to the browser). Each function returns one chart;
//! with nothing to draw it returns a chart that says why, so the page always
//! has every chart.

use plotters::prelude::*;
use tokentap_core::analysis::context::ContextReport;
use tokentap_core::analysis::fairness::FairnessReport;
use tokentap_core::analysis::itl::StallEvent;
use tokentap_core::analysis::series::Curve;
use tokentap_core::analysis::stats::quantile_unchecked;

const W: u32 = 640;
const H: u32 = 360;
const MAX_LINE_POINTS: usize = 2_000;

type Res = Result<(), Box<dyn std::error::Error>>;

fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Res) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (W, H)).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root));
        let presented = root.present();
        if drawn.is_err() || presented.is_err() {
            drop(root);
            return empty("chart could not be drawn");
        }
    }
    out
}

/// A chart with only a message.
pub fn empty(message: &str) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let style = ("sans-serif", 16).into_font().color(&BLACK);
        let _ = root.draw(&Text::new(message.to_owned(), (20, (H / 2) as i32), style));
        let _ = root.present();
    }
    out
}

fn range(lo: f64, hi: f64) -> std::ops::Range<f64> {
    if hi > lo {
        lo..hi + (hi - lo) * 0.05
    } else {
        lo..lo + 1.0
    }
}

/// Sorted values thinned to at most `MAX_LINE_POINTS` CDF points.
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let step = (n / MAX_LINE_POINTS).max(1);
    let mut pts: Vec<(f64, f64)> = sorted
        .iter()
        .enumerate()
        .step_by(step)
        .map(|(i, v)| (*v, (i + 1) as f64 / n as f64))
        .collect();
    if let Some(last) = sorted.last() {
        pts.push((*last, 1.0));
    }
    pts
}

/// Cumulative distributions of one or more series (values in any order).
pub fn cdf(title: &str, x_desc: &str, series: &[(&str, Vec<f64>)], why_empty: &str) -> String {
    let sorted: Vec<(&str, Vec<f64>)> = series
        .iter()
        .map(|(name, v)| {
            let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            v.sort_by(f64::total_cmp);
            (*name, v)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if sorted.is_empty() {
        return empty(why_empty);
    }
    // Clip the axis at the 99.5th percentile so one outlier does not squash
    // the curve (the tail is in the tables).
    let hi = sorted
        .iter()
        .filter_map(|(_, v)| quantile_unchecked(v, 0.995))
        .fold(0.0, f64::max);
    let lo = sorted
        .iter()
        .filter_map(|(_, v)| v.first().copied())
        .fold(f64::INFINITY, f64::min)
        .min(0.0);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(range(lo, hi), 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("fraction ≤ x")
            .draw()?;
        for (i, (name, v)) in sorted.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = cdf_points(v).into_iter().filter(|p| p.0 <= hi).collect();
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
                .label(format!("{name} (n = {})", v.len()))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
        Ok(())
    })
}

/// TPOT against concurrency per window, with the knee marked.
pub fn tradeoff(c: &Curve) -> String {
    let q = c.knee.as_ref().map_or("p50", |k| k.quantile);
    let pts: Vec<(f64, f64)> = c
        .points
        .iter()
        .filter_map(|p| Some((p.concurrency.mean, p.tpot_ms.get(q)?)))
        .collect();
    let thr: Vec<(f64, f64)> = c
        .points
        .iter()
        .map(|p| (p.concurrency.mean, p.output_tokens_per_s))
        .collect();
    if pts.is_empty() && thr.is_empty() {
        return empty("no window had TPOT samples");
    }
    let x_hi = c
        .points
        .iter()
        .map(|p| p.concurrency.mean)
        .fold(0.0, f64::max);
    let y_hi = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let t_hi = thr.iter().map(|p| p.1).fold(0.0, f64::max);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Throughput–latency: {q} TPOT and output tokens/s by window"),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .right_y_label_area_size(55)
            .build_cartesian_2d(range(0.0, x_hi), range(0.0, y_hi))?
            .set_secondary_coord(range(0.0, x_hi), range(0.0, t_hi));
        chart
            .configure_mesh()
            .x_desc("concurrency (time-weighted mean)")
            .y_desc(format!("TPOT {q} (ms)"))
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("output tokens/s")
            .draw()?;
        let mut sorted = pts.clone();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(sorted, BLUE.stroke_width(2)))?
            .label(format!("TPOT {q}"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, BLUE.filled())))?;
        let mut t = thr.clone();
        t.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_secondary_series(LineSeries::new(t, GREEN.stroke_width(2)))?
            .label("output tokens/s")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN));
        if let Some(k) = &c.knee {
            chart
                .draw_series(std::iter::once(Circle::new(
                    (k.concurrency, k.tpot_ms),
                    7,
                    RED.stroke_width(3),
                )))?
                .label(format!("knee at {:.1}", k.concurrency))
                .legend(|(x, y)| Circle::new((x + 10, y), 5, RED.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        Ok(())
    })
}

/// TTFT against uncached input tokens, with the fitted line.
pub fn ttft_vs_input(c: &ContextReport) -> String {
    if c.points.is_empty() {
        return empty("no request with input tokens and a TTFT");
    }
    let x_hi = c.points.iter().map(|p| p.0).fold(0.0, f64::max);
    let y_hi = c.points.iter().map(|p| p.1).fold(0.0, f64::max);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption("TTFT vs input length", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(range(0.0, x_hi), range(0.0, y_hi))?;
        chart
            .configure_mesh()
            .x_desc("uncached input tokens")
            .y_desc("TTFT (ms)")
            .draw()?;
        chart
            .draw_series(
                c.points
                    .iter()
                    .map(|p| Circle::new(*p, 2, BLUE.mix(0.5).filled())),
            )?
            .label("requests")
            .legend(|(x, y)| Circle::new((x + 10, y), 3, BLUE.filled()));
        if let Some(f) = &c.ttft_fit {
            let line = vec![
                (0.0, f.intercept),
                (x_hi, f.intercept + f.slope * x_hi / 1e3),
            ];
            chart
                .draw_series(LineSeries::new(line, RED.stroke_width(2)))?
                .label(format!(
                    "fit: {:.2} ms + {:.3} ms per 1k tokens (R² {:.3})",
                    f.intercept, f.slope, f.r2
                ))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        Ok(())
    })
}

/// Mean TTFT per tenant.
pub fn fairness(f: &FairnessReport) -> String {
    let bars: Vec<(&str, f64)> = f
        .tenants
        .iter()
        .filter_map(|t| Some((t.tenant.as_str(), t.ttft_mean_ms?)))
        .collect();
    if bars.is_empty() {
        return empty("no tenant with a TTFT");
    }
    let y_hi = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let n = bars.len();
    svg(|root| {
        let title = format!(
            "Mean TTFT per tenant (Jain {})",
            f.jain_ttft.map_or("n/a".into(), |j| format!("{j:.3}"))
        );
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..n as f64, range(0.0, y_hi))?;
        let names: Vec<String> = bars.iter().map(|b| b.0.to_owned()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.min(20))
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                names.get(i).cloned().unwrap_or_default()
            })
            .x_desc("tenant")
            .y_desc("mean TTFT (ms)")
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64;
            Rectangle::new([(x + 0.15, 0.0), (x + 0.85, b.1)], BLUE.mix(0.7).filled())
        }))?;
        Ok(())
    })
}

/// Stalls over time: each stall's gap at the time it ended.
pub fn stalls(events: &[StallEvent], start_unix_ms: f64) -> String {
    if events.is_empty() {
        return empty("no stalls detected");
    }
    let pts: Vec<(f64, f64)> = events
        .iter()
        .map(|e| ((e.at_unix_ms - start_unix_ms) / 1e3, e.gap_ms))
        .collect();
    let x_hi = pts.iter().map(|p| p.0).fold(0.0, f64::max);
    let y_hi = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Stalls over time ({})", events.len()),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(range(0.0, x_hi), range(0.0, y_hi))?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first request")
            .y_desc("stalled gap (ms)")
            .draw()?;
        chart.draw_series(pts.iter().map(|p| Cross::new(*p, 4, RED.stroke_width(2))))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_and_empty_ones_say_why() {
        let s = cdf("TTFT", "ms", &[("all", vec![1.0, 2.0, 3.0])], "none");
        assert!(s.starts_with("<svg") && s.contains("<polyline"));
        let e = cdf("TTFT", "ms", &[("all", vec![])], "no streams");
        assert!(e.contains("no streams"));
        assert!(stalls(&[], 0.0).contains("no stalls"));
    }
}
