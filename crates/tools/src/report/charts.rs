//! The report's charts as SVG, drawn by plotters (SVG backend, no system
//! fonts: text is left to the browser). Each function returns one chart;
//! with nothing to draw it returns a chart that says why, so the page always
//! has every chart.

use plotters::coord::CoordTranslate;
use plotters::prelude::*;
use std::ops::Range;
use tokentap_core::analysis::context::ContextReport;
use tokentap_core::analysis::fairness::FairnessReport;
use tokentap_core::analysis::itl::StallEvent;
use tokentap_core::analysis::series::Curve;

const W: u32 = 640;
const H: u32 = 360;
const MAX_LINE_POINTS: usize = 2_000;

pub(super) type Res = Result<(), Box<dyn std::error::Error>>;

pub(super) fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Res,
) -> String {
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

fn range(lo: f64, hi: f64) -> Range<f64> {
    if hi > lo {
        lo..hi + (hi - lo) * 0.05
    } else {
        lo..lo + 1.0
    }
}

/// An axis that holds every (finite) value: from the lowest (or 0) to the
/// highest, with 5 % headroom. Every chart's axes come from here, so no
/// point falls outside them.
pub(super) fn axis(values: impl IntoIterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((0.0_f64, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    range(lo, hi)
}

/// The chart area every chart shares: title, margins, label areas.
pub(super) fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55);
    b
}

/// The legend box every chart with several series draws.
pub(super) fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Res
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(at)
        .draw()?;
    Ok(())
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

/// What a CDF chart plots: its x axis and each series' points, the last
/// at (largest value, 1.0).
struct CdfPlan<'a> {
    x: Range<f64>,
    series: Vec<CdfSeries<'a>>,
}

/// A series' name, its number of values, its points.
type CdfSeries<'a> = (&'a str, usize, Vec<(f64, f64)>);

fn cdf_plan<'a>(series: &[(&'a str, Vec<f64>)]) -> Option<CdfPlan<'a>> {
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
        return None;
    }
    // The whole range: every curve reaches 1.0 at its largest value.
    let x = axis(sorted.iter().flat_map(|(_, v)| v.iter().copied()));
    let series = sorted
        .iter()
        .map(|(name, v)| (*name, v.len(), cdf_points(v)))
        .collect();
    Some(CdfPlan { x, series })
}

/// Cumulative distributions of one or more series (values in any order).
pub fn cdf(title: &str, x_desc: &str, series: &[(&str, Vec<f64>)], why_empty: &str) -> String {
    let Some(plan) = cdf_plan(series) else {
        return empty(why_empty);
    };
    svg(|root| {
        let mut chart = frame(root, title).build_cartesian_2d(plan.x.clone(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("fraction ≤ x")
            .draw()?;
        for (i, (name, n, pts)) in plan.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(format!("{name} (n = {n})"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
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
    let knee = c.knee.as_ref().map(|k| (k.concurrency, k.tpot_ms));
    let x = axis(
        c.points
            .iter()
            .map(|p| p.concurrency.mean)
            .chain(knee.map(|k| k.0)),
    );
    let y = axis(pts.iter().map(|p| p.1).chain(knee.map(|k| k.1)));
    let t = axis(thr.iter().map(|p| p.1));
    svg(|root| {
        let mut chart = frame(
            root,
            &format!("Throughput–latency: {q} TPOT and output tokens/s by window"),
        )
        .right_y_label_area_size(55)
        .build_cartesian_2d(x.clone(), y)?
        .set_secondary_coord(x, t);
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
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

/// TTFT against uncached input tokens, with the fitted line.
pub fn ttft_vs_input(c: &ContextReport) -> String {
    if c.points.is_empty() {
        return empty("no request with input tokens and a TTFT");
    }
    let x = axis(c.points.iter().map(|p| p.0));
    let y = axis(c.points.iter().map(|p| p.1));
    let x_hi = x.end;
    svg(|root| {
        let mut chart = frame(root, "TTFT vs input length").build_cartesian_2d(x, y)?;
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
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
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
    let y = axis(bars.iter().map(|b| b.1));
    let n = bars.len();
    svg(|root| {
        let title = format!(
            "Mean TTFT per tenant (Jain {})",
            f.jain_ttft.map_or("n/a".into(), |j| format!("{j:.3}"))
        );
        let mut chart = frame(root, &title).build_cartesian_2d(0.0..n as f64, y)?;
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
    let x = axis(pts.iter().map(|p| p.0));
    let y = axis(pts.iter().map(|p| p.1));
    svg(|root| {
        let mut chart = frame(root, &format!("Stalls over time ({})", events.len()))
            .build_cartesian_2d(x, y)?;
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

    /// A long tail (the real engine's 13.9 s TTFT among ~1 s ones), a
    /// negative value, one value alone: every CDF reaches 1.0 at its
    /// largest value and the axis holds every value.
    #[test]
    fn every_cdf_reaches_one_at_its_maximum_inside_the_axis() {
        let mut tail: Vec<f64> = (0..999).map(|i| 900.0 + f64::from(i)).collect();
        tail.push(13_900.0);
        let cases: Vec<Vec<(&str, Vec<f64>)>> = vec![
            vec![("all", tail.clone())],
            vec![
                ("hit", vec![-3.0, 5.0]),
                ("miss", vec![40.0, 7.0, f64::NAN]),
            ],
            vec![("one", vec![12.5])],
            vec![("big", (0..10_000).map(f64::from).collect())],
        ];
        for series in cases {
            let plan = cdf_plan(&series).unwrap();
            for ((_, values), (name, n, pts)) in series.iter().zip(&plan.series) {
                let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
                let max = finite.iter().copied().fold(f64::MIN, f64::max);
                assert_eq!(*n, finite.len());
                assert_eq!(pts.last(), Some(&(max, 1.0)), "{name}");
                for v in &finite {
                    assert!(plan.x.contains(v), "{name}: {v} outside {:?}", plan.x);
                }
                assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
                assert!(pts.len() <= MAX_LINE_POINTS + 1);
            }
        }
        assert!(cdf_plan(&[("none", vec![])]).is_none());
    }

    #[test]
    fn every_axis_holds_every_point() {
        for values in [
            vec![3.0, 13_900.0, 1.0],
            vec![-250.0, 10.0],
            vec![0.0],
            vec![7.0, 7.0],
            vec![],
        ] {
            let a = axis(values.iter().copied().chain([f64::INFINITY]));
            assert!(a.start < a.end);
            for v in &values {
                assert!(a.contains(v), "{v} outside {a:?}");
            }
        }
    }
}
