//! `sprout mismatch --plot FILE.svg|png`: two charts side by side, drawn with plotters. Left,
//! the CDF of |r| per row (log x axis: a format's tokens spread over decades of |r|, and an
//! exact 0, as the f32 row's, is drawn at the axis' left end); right, `k3_kl` by position
//! bucket per row (log y axis, exact 0 at its foot), since mismatch grows along long
//! outputs.
//!
//! Text is laid out and (for PNG) drawn with the font of [`crate::cli::chart_font`].

use std::path::Path;

use anyhow::{Result, anyhow, bail};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use sprout::mismatch::{bucket_bounds, bucket_of};

use super::report::Row;
use crate::cli::chart_font::{self, FAMILY};

/// |r| below this (exact zeros too) is drawn at the left edge of the log axis.
const FLOOR: f64 = 1e-7;
/// k3_kl below this (exact zeros too) is drawn at the foot of the log axis.
const K3_FLOOR: f64 = 1e-9;
/// Points per CDF curve, at most (the curves are step functions of thousands of tokens).
const CURVE_POINTS: usize = 400;
const SIZE: (u32, u32) = (1400, 560);

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

/// Draws `rows` into `path`, as SVG or PNG by its extension.
pub fn write(path: &Path, rows: &[Row]) -> Result<()> {
    chart_font::register()?;
    match extension(path)?.as_str() {
        "svg" => draw(SVGBackend::new(path, SIZE).into_drawing_area(), rows),
        _ => draw(BitMapBackend::new(path, SIZE).into_drawing_area(), rows),
    }
}

/// `path`'s extension, lower case, if it is one the plot can be written as.
pub fn extension(path: &Path) -> Result<String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if ext != "svg" && ext != "png" {
        bail!(
            "--plot {}: the plot is written as .svg or .png (by the file's extension)",
            path.display()
        );
    }
    Ok(ext)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, rows: &[Row]) -> Result<()> {
    root.fill(&WHITE).map_err(draw_error)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    cdf(&left, rows)?;
    by_position(&right, rows)?;
    root.present().map_err(draw_error)
}

fn color(i: usize) -> RGBColor {
    // Distinct, print-safe colours (Okabe and Ito's), then plotters' palette.
    const COLORS: [RGBColor; 7] = [
        RGBColor(0, 0, 0),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
    ];
    COLORS.get(i).copied().unwrap_or_else(|| {
        let c = Palette99::pick(i).to_rgba();
        RGBColor(c.0, c.1, c.2)
    })
}

/// The step CDF of sorted values as at most [`CURVE_POINTS`] points, values floored at
/// [`FLOOR`].
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let step = n.div_ceil(CURVE_POINTS).max(1);
    let mut points: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .chain(std::iter::once(n - 1))
        .map(|i| (sorted[i].max(FLOOR), (i + 1) as f64 / n as f64))
        .collect();
    points.dedup();
    points
}

fn cdf<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, rows: &[Row]) -> Result<()> {
    let top = rows
        .iter()
        .filter_map(|r| r.mismatch.abs_r_sorted.last().copied())
        .fold(FLOOR * 10.0, f64::max);
    let x_max = 10f64.powf((top * 1.5).log10().ceil());
    let mut chart = ChartBuilder::on(area)
        .caption(
            "CDF of |r| = |logp_rollout - logp_train| per token",
            (FAMILY, 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((FLOOR..x_max).log_scale(), 0f64..1f64)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("|r| (exact 0 drawn at 1e-7)")
        .y_desc("fraction of tokens")
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .label_style((FAMILY, 14))
        .draw()
        .map_err(draw_error)?;
    for (i, row) in rows.iter().enumerate() {
        let points = cdf_points(&row.mismatch.abs_r_sorted);
        curve(&mut chart, points, &row.format, color(i))?;
    }
    legend(&mut chart)
}

/// One row's line, with its legend entry.
fn curve<'a, DB: DrawingBackend + 'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, DB, CT>,
    points: Vec<(f64, f64)>,
    label: &str,
    c: RGBColor,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(points, c.stroke_width(2)))
        .map_err(draw_error)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    Ok(())
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(draw_error)
}

fn by_position<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, rows: &[Row]) -> Result<()> {
    let buckets = rows
        .iter()
        .filter_map(|r| r.mismatch.by_position.last())
        .map(|b| bucket_of(b.start) + 1)
        .max()
        .unwrap_or(1);
    let top = rows
        .iter()
        .flat_map(|r| r.mismatch.by_position.iter().map(|b| b.stats.k3_kl))
        .fold(K3_FLOOR * 10.0, f64::max);
    let y_max = 10f64.powf((top * 1.5).log10().ceil());
    let mut chart = ChartBuilder::on(area)
        .caption("k3_kl by position in the completion", (FAMILY, 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            -0.3f64..(buckets as f64 - 0.7),
            (K3_FLOOR..y_max).log_scale(),
        )
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("token positions")
        .y_desc("k3_kl (exact 0 drawn at 1e-9)")
        .x_labels(buckets)
        .x_label_formatter(&|x| {
            let i = x.round();
            match (x - i).abs() < 1e-6 && i >= 0.0 {
                true => {
                    let (start, end) = bucket_bounds(i as usize);
                    format!("{start}-{}", end - 1)
                }
                false => String::new(),
            }
        })
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .label_style((FAMILY, 14))
        .draw()
        .map_err(draw_error)?;
    for (i, row) in rows.iter().enumerate() {
        let c = color(i);
        let points: Vec<(f64, f64)> = row
            .mismatch
            .by_position
            .iter()
            .map(|b| {
                let x = bucket_of(b.start) as f64;
                (x, b.stats.k3_kl.max(K3_FLOOR))
            })
            .collect();
        curve(&mut chart, points.clone(), &row.format, c)?;
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))
            .map_err(draw_error)?;
    }
    legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_curves_are_thinned_and_end_at_one() {
        let sorted: Vec<f64> = (0..1000).map(|i| i as f64 / 1000.0).collect();
        let p = cdf_points(&sorted);
        assert!(p.len() <= CURVE_POINTS + 1, "{}", p.len());
        assert_eq!(p.last(), Some(&(0.999, 1.0)));
        assert_eq!(p[0], (FLOOR, 0.001));
        assert_eq!(cdf_points(&[0.0]), [(FLOOR, 1.0)]);
    }

    #[test]
    fn only_svg_and_png_are_written() {
        assert_eq!(extension(Path::new("a/b.SVG")).unwrap(), "svg");
        assert_eq!(extension(Path::new("b.png")).unwrap(), "png");
        let e = extension(Path::new("b.pdf")).unwrap_err().to_string();
        assert!(e.contains(".svg or .png"), "{e}");
    }
}
