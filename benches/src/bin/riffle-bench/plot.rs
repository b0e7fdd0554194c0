//! The SVG plot of `cargo run --release -p riffle-bench -- snapshot --plot`: ns/op against task
//! count, log-log, one line per strategy × state.

use std::path::Path;

use plotters::prelude::*;

use super::snapshot::Row;

/// Draws the rows with the fewest changed tasks (0 when measured) for task counts above 0 (a log
/// axis has no 0).
pub(super) fn snapshot_plot(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let plotted: Vec<&Row> = rows.iter().filter(|r| r.tasks > 0).collect();
    let changed = plotted
        .iter()
        .map(|r| r.changed)
        .min()
        .ok_or_else(|| anyhow::anyhow!("no rows with more than 0 tasks to plot"))?;
    let plotted: Vec<&Row> = plotted
        .into_iter()
        .filter(|r| r.changed == changed)
        .collect();
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::MAX, f64::MIN_POSITIVE);
    for r in &plotted {
        x_max = x_max.max(r.tasks as f64);
        y_min = y_min.min(r.ns_per_op.max(0.1));
        y_max = y_max.max(r.ns_per_op);
    }
    let x_range = (1.0f64..x_max * 2.0).log_scale();
    let y_range = (y_min / 2.0..y_max * 2.0).log_scale();
    let draw_error = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());

    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(&e))?;
    let title = match changed {
        0 => "Offset-sum snapshot refresh, nothing changed: ns/op by task count".to_owned(),
        1 => "Offset-sum snapshot refresh, 1 task changed: ns/op by task count".to_owned(),
        k => format!("Offset-sum snapshot refresh, {k} tasks changed: ns/op by task count"),
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, y_range)
        .map_err(|e| draw_error(&e))?;
    chart
        .configure_mesh()
        .x_desc("tasks owned by the stream thread (log)")
        .y_desc("ns per refresh (log)")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .x_label_formatter(&|x| super::thousands(*x))
        .y_label_formatter(&|y| super::thousands(*y))
        .draw()
        .map_err(|e| draw_error(&e))?;

    let mut lines: Vec<(&str, &str)> = Vec::new();
    for r in &plotted {
        if !lines.contains(&(r.strategy.as_str(), r.state.as_str())) {
            lines.push((r.strategy.as_str(), r.state.as_str()));
        }
    }
    for (strategy, state) in lines {
        let mut points: Vec<(f64, f64)> = plotted
            .iter()
            .filter(|r| r.strategy == strategy && r.state == state)
            .map(|r| (r.tasks as f64, r.ns_per_op.max(0.1)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = if strategy == "incremental" { BLUE } else { RED };
        let style = ShapeStyle::from(color).stroke_width(2);
        let label = format!("{strategy}, {state}");
        let series = if state == "running" {
            chart.draw_series(LineSeries::new(points.clone(), style).point_size(4))
        } else {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))
        };
        series
            .map_err(|e| draw_error(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        if state != "running" {
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, style.filled())))
                .map_err(|e| draw_error(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| draw_error(&e))?;
    root.present().map_err(|e| draw_error(&e))?;
    Ok(())
}
