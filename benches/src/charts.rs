//! SVG charts the harnesses write beside their tables (issue 21 item 6), so a reader sees the
//! comparison before reading a number: lines (throughput over time, CDFs on a log axis) and
//! grouped bars (one group per round, one bar per copier).
//!
//! Charts go to `KMIRROR_BENCH_CHARTS` (a directory), else `target/bench-charts`. A chart
//! that cannot be drawn is reported on stderr and never fails the benchmark.

use std::path::PathBuf;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// One line: its legend label, palette slot (the same copier keeps one color across charts)
/// and points.
pub struct Series {
    pub label: String,
    pub color: usize,
    pub points: Vec<(f64, f64)>,
}

const SIZE: (u32, u32) = (960, 540);

/// The copiers' colors: kmirror, MirrorMaker 2, Kafka follower (or the source itself); then a
/// second shade of each (their second probe), then gray.
fn color(slot: usize) -> RGBColor {
    match slot {
        0 => RGBColor(214, 39, 40),
        1 => RGBColor(31, 119, 180),
        2 => RGBColor(44, 160, 44),
        3 => RGBColor(255, 152, 150),
        4 => RGBColor(158, 202, 225),
        5 => RGBColor(161, 217, 155),
        _ => RGBColor(127, 127, 127),
    }
}

/// Where chart `name` (e.g. `mirror-catchup-cpu.svg`) goes; the directory is created.
pub fn path(name: &str) -> PathBuf {
    let dir = std::env::var_os("KMIRROR_BENCH_CHARTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench-charts"));
    let _ = std::fs::create_dir_all(&dir);
    dir.join(name)
}

fn report(name: &str, r: Result<(), String>) {
    match r {
        Ok(()) => eprintln!("chart: {}", path(name).display()),
        Err(e) => eprintln!("chart {name} not drawn: {e}"),
    }
}

fn max_of(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(0.0, f64::max)
}

/// Lines on linear axes starting at 0 (e.g. MB/s over seconds since the start).
pub fn lines(name: &str, title: &str, x_desc: &str, y_desc: &str, series: &[Series]) {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let xmax = max_of(pts().map(|p| p.0)).max(1e-9) * 1.02;
    let ymax = max_of(pts().map(|p| p.1)).max(1e-9) * 1.1;
    let axes = Axes {
        x_desc,
        y_desc,
        legend: SeriesLabelPosition::UpperRight,
    };
    report(
        name,
        line_chart(name, title, &axes, 0f64..xmax, 0f64..ymax, series, |x| x),
    );
}

/// Cumulative distributions: x on a log axis (e.g. lag in ms), y the fraction at or below.
pub fn cdf(name: &str, title: &str, x_desc: &str, series: &[Series]) {
    let xmax = max_of(series.iter().flat_map(|s| s.points.iter().map(|p| p.0))).max(2.0) * 1.2;
    let axes = Axes {
        x_desc,
        y_desc: "fraction of records",
        legend: SeriesLabelPosition::LowerRight,
    };
    let x = (1f64..xmax).log_scale();
    report(
        name,
        line_chart(name, title, &axes, x, 0f64..1.0, series, |x| x.max(1.0)),
    );
}

struct Axes<'a> {
    x_desc: &'a str,
    y_desc: &'a str,
    legend: SeriesLabelPosition,
}

/// One line per series over `x` (linear or log) and `y`; `fit_x` keeps points on the axis.
fn line_chart<X>(
    name: &str,
    title: &str,
    axes: &Axes<'_>,
    x: X,
    y: std::ops::Range<f64>,
    series: &[Series],
    fit_x: impl Fn(f64) -> f64,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let p = path(name);
        let root = SVGBackend::new(&p, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(axes.x_desc)
            .y_desc(axes.y_desc)
            .draw()?;
        for s in series {
            let c = color(s.color);
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().map(|&(x, y)| (fit_x(x), y)),
                    c.stroke_width(2),
                ))?
                .label(&s.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(axes.legend.clone())
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| e.to_string())
}

/// Grouped bars: `groups` along x (e.g. rounds), in each one bar per entry of `bars`
/// (label, palette slot, one value per group; NaN leaves a gap).
pub fn bars(
    name: &str,
    title: &str,
    y_desc: &str,
    groups: &[String],
    bars: &[(String, usize, Vec<f64>)],
) {
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let p = path(name);
        let root = SVGBackend::new(&p, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let ymax = max_of(
            bars.iter()
                .flat_map(|b| b.2.iter().copied())
                .filter(|v| v.is_finite()),
        )
        .max(1e-9)
            * 1.15;
        let n = groups.len().max(1) as f64;
        let labels: Vec<String> = groups.to_vec();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..n, 0f64..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(2 * groups.len() + 1)
            .x_label_formatter(&|x| {
                // A group's name under its middle (x = g + 0.5), nothing elsewhere.
                let g = x - 0.5;
                if (g - g.round()).abs() < 1e-6 && g >= 0.0 {
                    labels.get(g.round() as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_desc)
            .draw()?;
        let width = 0.8 / bars.len().max(1) as f64;
        for (i, (label, slot, values)) in bars.iter().enumerate() {
            let c = color(*slot);
            chart
                .draw_series(
                    values
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_finite())
                        .map(|(g, &v)| {
                            let x0 = g as f64 + 0.1 + i as f64 * width;
                            Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], c.filled())
                        }),
                )?
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    report(name, draw().map_err(|e| e.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_chart_is_an_svg_with_its_title_legend_and_data() {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("KMIRROR_BENCH_CHARTS", dir.path());
        let s = |label: &str, color, points: Vec<(f64, f64)>| Series {
            label: label.into(),
            color,
            points,
        };
        lines(
            "l.svg",
            "Lines title",
            "seconds",
            "MB/s",
            &[s(
                "kmirror",
                0,
                vec![(0.0, 0.0), (1.0, 300.0), (2.0, 310.0)],
            )],
        );
        cdf(
            "c.svg",
            "CDF title",
            "lag ms",
            &[s(
                "MirrorMaker 2",
                1,
                vec![(2.0, 0.1), (20.0, 0.9), (40.0, 1.0)],
            )],
        );
        bars(
            "b.svg",
            "Bars title",
            "CPU s/GB",
            &["round 1".into(), "round 2".into()],
            &[
                ("kmirror".into(), 0, vec![1.0, 1.2]),
                ("Kafka follower".into(), 2, vec![2.0, f64::NAN]),
            ],
        );
        for (f, title, legend, shape) in [
            ("l.svg", "Lines title", "kmirror", "<polyline"),
            ("c.svg", "CDF title", "MirrorMaker 2", "<polyline"),
            ("b.svg", "Bars title", "Kafka follower", "<rect"),
        ] {
            let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(
                svg.starts_with("<svg"),
                "{f}: {}",
                &svg[..40.min(svg.len())]
            );
            for want in [title, legend, shape] {
                assert!(svg.contains(want), "{f} lacks {want}");
            }
        }
        let bars_svg = std::fs::read_to_string(dir.path().join("b.svg")).unwrap();
        assert!(bars_svg.contains("round 1") && bars_svg.contains("round 2"));
    }
}
