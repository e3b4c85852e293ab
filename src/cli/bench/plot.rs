//! `sprout bench --plot FILE.svg|png`: the bench's results as one chart of two panels,
//! tokens/s per mode (bars labelled with their value) and where each mode's step time went
//! (schedule, encode, GPU, update; stacked to 100%), under a title naming the workload and
//! the adapter.
//!
//! The format follows the file's extension; anything but `.svg` or `.png` is an error
//! before the bench runs ([`PlotFormat::of`]). Text is drawn with the font of
//! [`crate::cli::chart_font`]. This module knows nothing of the bench's
//! modes: it draws labelled bars.

use std::path::Path;

use anyhow::{Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordu32};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use sprout::engine::StepTimings;

use crate::cli::chart_font;

const SIZE: (u32, u32) = (1200, 520);

/// The chart's file format, from its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

impl PlotFormat {
    /// The format `path` names by its extension, or an error saying which exist.
    pub fn of(path: &Path) -> Result<PlotFormat> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(PlotFormat::Svg),
            Some("png") => Ok(PlotFormat::Png),
            _ => bail!(
                "--plot {}: name a .svg or .png file (the extension picks the format)",
                path.display()
            ),
        }
    }
}

/// One mode's bar: its name, throughput and step-time split.
pub struct ModeBar<'a> {
    pub label: &'a str,
    pub tokens_per_s: f64,
    pub time: StepTimings,
}

/// Draws `bars` into `path` (SVG or PNG by its extension) under `title`.
pub fn draw(path: &Path, title: &str, bars: &[ModeBar]) -> Result<()> {
    if bars.is_empty() {
        bail!("no modes ran, so there is nothing to plot");
    }
    chart_font::register()?;
    let failed = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    match PlotFormat::of(path)? {
        PlotFormat::Svg => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            panels(&root, title, bars).map_err(|e| failed(&e))?;
            root.present().map_err(|e| failed(&e))
        }
        PlotFormat::Png => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            panels(&root, title, bars).map_err(|e| failed(&e))?;
            root.present().map_err(|e| failed(&e))
        }
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    bars: &[ModeBar],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let root = root.titled(title, (FontFamily::Monospace, 18))?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    throughput(&left, bars)?;
    time_split(&right, bars)
}

/// The axis of `n` bars, one segment each (an integer range counts its end, hence - 1).
fn bar_axis(n: usize) -> SegmentedCoord<RangedCoordu32> {
    (0..n as u32 - 1).into_segmented()
}

/// Where bar `i` of `n` spans on [`bar_axis`]: its segment, the last one closed by the
/// axis' end.
fn span(i: usize, n: usize) -> (SegmentValue<u32>, SegmentValue<u32>) {
    let right = match i + 1 == n {
        true => SegmentValue::Last,
        false => SegmentValue::Exact(i as u32 + 1),
    };
    (SegmentValue::Exact(i as u32), right)
}

fn label_of<'a>(bars: &'a [ModeBar], v: &SegmentValue<u32>) -> &'a str {
    match v {
        SegmentValue::CenterOf(i) => bars.get(*i as usize).map_or("", |b| b.label),
        _ => "",
    }
}

type BarChart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<SegmentedCoord<RangedCoordu32>, RangedCoordf64>>;

/// A panel of one bar per mode from 0 to `top`, with the modes named under their bars and
/// the y axis labelled by `y_label`.
fn bar_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    bars: &[ModeBar],
    top: f64,
    y_label: &dyn Fn(&f64) -> String,
) -> Result<BarChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FontFamily::Monospace, 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(bar_axis(bars.len()), 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(bars.len())
        .x_label_formatter(&|v| label_of(bars, v).to_string())
        .y_labels(6)
        .y_label_formatter(y_label)
        .label_style((FontFamily::Monospace, 13))
        .draw()?;
    Ok(chart)
}

/// Bar `i` of `n`, from `low` to `high`, with a gap on each side.
fn bar(
    i: usize,
    n: usize,
    low: f64,
    high: f64,
    colour: RGBColor,
) -> Rectangle<(SegmentValue<u32>, f64)> {
    let (l, r) = span(i, n);
    let mut bar = Rectangle::new([(l, low), (r, high)], colour.filled());
    bar.set_margin(0, 0, 14, 14);
    bar
}

fn throughput<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bars: &[ModeBar],
) -> DrawResult<DB> {
    let top = bars.iter().map(|b| b.tokens_per_s).fold(0.0, f64::max);
    // Room above the tallest bar for its value; a run of zero tokens/s still gets an axis.
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let label = |y: &f64| format!("{y:.1}");
    let mut chart = bar_chart(area, "generated tokens/s", bars, top, &label)?;
    let colour = RGBColor(46, 139, 87);
    let n = bars.len();
    chart.draw_series(
        bars.iter()
            .enumerate()
            .map(|(i, b)| bar(i, n, 0.0, b.tokens_per_s, colour)),
    )?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            format!("{:.1}", b.tokens_per_s),
            (
                SegmentValue::CenterOf(i as u32),
                b.tokens_per_s + top * 0.06,
            ),
            TextStyle::from((FontFamily::Monospace, 13).into_font())
                .pos(Pos::new(HPos::Center, VPos::Bottom)),
        )
    }))?;
    Ok(())
}

/// The parts of a step, in the order they run, with their colours.
const PARTS: [(&str, RGBColor); 4] = [
    ("schedule", RGBColor(230, 159, 0)),
    ("encode", RGBColor(86, 180, 233)),
    ("gpu", RGBColor(0, 114, 178)),
    ("update", RGBColor(204, 121, 167)),
];

/// A step split's shares in percent, in the order of [`PARTS`]; all zero when no time
/// was measured.
fn shares(t: &StepTimings) -> [f64; 4] {
    let parts = [t.schedule_s, t.encode_s, t.gpu_s, t.update_s];
    let total: f64 = parts.iter().sum();
    if total <= 0.0 {
        return [0.0; 4];
    }
    parts.map(|p| 100.0 * p / total)
}

fn time_split<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bars: &[ModeBar],
) -> DrawResult<DB> {
    // The axis runs past 100% to hold the legend clear of the bars; it is labelled to 100.
    let label = |y: &f64| match *y <= 100.0 {
        true => format!("{y:.0}%"),
        false => String::new(),
    };
    let caption = "step time split (% of each mode's step time)";
    let mut chart = bar_chart(area, caption, bars, 125.0, &label)?;
    let split: Vec<[f64; 4]> = bars.iter().map(|b| shares(&b.time)).collect();
    let n = split.len();
    for (part, (name, colour)) in PARTS.iter().enumerate() {
        chart
            .draw_series(split.iter().enumerate().map(|(i, s)| {
                let below: f64 = s[..part].iter().sum();
                bar(i, n, below, below + s[part], *colour)
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperMiddle)
        .label_font((FontFamily::Monospace, 13))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars() -> Vec<ModeBar<'static>> {
        let time = |gpu_s| StepTimings {
            schedule_s: 0.1,
            encode_s: 0.2,
            gpu_s,
            update_s: 0.1,
        };
        vec![
            ModeBar {
                label: "sequential",
                tokens_per_s: 3.25,
                time: time(1.0),
            },
            ModeBar {
                label: "sprout",
                tokens_per_s: 17.5,
                time: time(4.0),
            },
        ]
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("sprout-plot-{}-{name}", std::process::id()))
    }

    #[test]
    fn an_svg_chart_names_every_mode_and_value() {
        let path = scratch("chart.svg");
        draw(&path, "a title", &bars()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for text in [
            "a title",
            "sequential",
            "sprout",
            "17.5",
            "3.2",
            "gpu",
            "schedule",
        ] {
            assert!(svg.contains(text), "{text} is missing from the chart");
        }
    }

    #[test]
    fn one_mode_is_drawn_too() {
        let path = scratch("one.svg");
        let one = &bars()[1..];
        draw(&path, "one", one).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.contains("sprout") && svg.contains("17.5"));
    }

    #[test]
    fn a_png_chart_is_a_png_of_the_chart_size() {
        let path = scratch("chart.png");
        draw(&path, "a title", &bars()).unwrap();
        let png = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // The IHDR chunk: width and height, big-endian.
        let (w, h) = (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap()),
        );
        assert_eq!((w, h), SIZE);
    }

    #[test]
    fn only_svg_and_png_are_drawn() {
        assert_eq!(PlotFormat::of(Path::new("b.SVG")).unwrap(), PlotFormat::Svg);
        assert_eq!(
            PlotFormat::of(Path::new("x/b.png")).unwrap(),
            PlotFormat::Png
        );
        for bad in ["b.jpg", "b", "svg"] {
            let e = PlotFormat::of(Path::new(bad)).unwrap_err().to_string();
            assert!(e.contains(".svg or .png"), "{e}");
        }
    }

    #[test]
    fn shares_add_to_a_hundred_or_are_all_zero() {
        let s = shares(&bars()[1].time);
        assert!((s.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        assert_eq!(shares(&StepTimings::default()), [0.0; 4]);
    }
}
