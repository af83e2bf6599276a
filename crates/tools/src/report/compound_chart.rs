//! The compound tap's stacked breakdown as a chart: per row of the report
//! (the requests at p50, p90, p99 of E2E and TTFT, and the mean), one bar
//! whose segments are its parts — LLM, tool, retrieval, guardrail calls and
//! the residual — adding up to the figure.

use super::charts::{axis, empty, frame, legend, svg};
use plotters::prelude::*;
use tokentap_core::analysis::compound::CompoundReport;
use tokentap_core::correlate::compound::Part;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(150, 150, 150),
];

/// The stacked bars of E2E then TTFT rows.
pub fn stacked(c: &CompoundReport) -> String {
    let bars: Vec<(String, Vec<f64>)> = [("E2E", &c.e2e), ("TTFT", &c.ttft)]
        .iter()
        .flat_map(|(w, st)| {
            st.rows.iter().map(move |r| {
                let parts = Part::ALL
                    .iter()
                    .map(|p| r.parts_ms.get(p.as_str()).copied().unwrap_or_default())
                    .collect();
                (format!("{w} {}", r.at), parts)
            })
        })
        .collect();
    if bars.is_empty() {
        return empty("no compound request broken down");
    }
    let y = axis(bars.iter().map(|(_, p)| p.iter().sum::<f64>()));
    let n = bars.len();
    svg(|root| {
        let mut chart = frame(root, "Where compound requests spent their time")
            .build_cartesian_2d(0.0..n as f64, y)?;
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| names.get(x.floor() as usize).cloned().unwrap_or_default())
            .y_desc("ms")
            .draw()?;
        for (k, part) in Part::ALL.iter().enumerate() {
            let color = COLORS.get(k).copied().unwrap_or(BLACK);
            chart
                .draw_series(bars.iter().enumerate().map(|(i, (_, parts))| {
                    let below: f64 = parts.iter().take(k).sum();
                    let mine = parts.get(k).copied().unwrap_or_default();
                    let x = i as f64;
                    Rectangle::new(
                        [(x + 0.15, below), (x + 0.85, below + mine)],
                        color.filled(),
                    )
                }))?
                .label(part.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}
