//! Latency against concurrency, drawn as an SVG file.

use std::path::Path;

use plotters::prelude::*;

/// One line of the chart: a label and `(concurrency, milliseconds)` points.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// Draws the series on log-log axes into `path`.
pub(crate) fn draw(
    path: &Path,
    title: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (max_x, max_y) = all.fold((1.0f64, 0.01f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
    let min_y = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(max_y, f64::min)
        .max(0.001);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (1.0..max_x * 1.2).log_scale(),
            (min_y / 1.5..max_y * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("checks in flight")
        .y_desc("latency (ms)")
        .draw()?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, s) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
