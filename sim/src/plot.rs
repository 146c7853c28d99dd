//! Line charts as standalone SVG: one chart per measure, one line per series, with axes,
//! ticks and a legend. Enough for the reproduced figures, and no drawing dependency.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// (x, y) points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// A chart's labels.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" tick step for a range (1, 2 or 5 times a power of ten).
fn tick_step(span: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / 5.0;
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * power)
}

fn format_tick(value: f64) -> String {
    if value.abs() >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The parts every chart shares: the document, the title, the y grid with its ticks, the
/// axes and the y label. Returns the open document and the y scale.
fn frame(title: &str, y_label: &str, y_max: f64) -> (String, impl Fn(f64) -> f64) {
    let y_step = tick_step(y_max);
    let y_top = ((y_max / y_step).ceil() * y_step).max(y_step);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sy = move |y: f64| TOP + plot_h - y / y_top * plot_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r#"<path d="M{LEFT} {TOP} V{} H{}" fill="none" stroke="black"/>"#,
        TOP + plot_h,
        LEFT + plot_w
    );
    let mut y = 0.0;
    while y <= y_top + y_step / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{0}" y1="{1}" y2="{1}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            LEFT + plot_w,
            sy(y),
            LEFT - 6.0,
            sy(y) + 4.0,
            format_tick(y)
        );
        y += y_step;
    }
    let _ = writeln!(
        out,
        r#"<text x="16" y="{0}" text-anchor="middle" transform="rotate(-90 16 {0})">{1}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    (out, sy)
}

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let points = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
        for &(x, y) in points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
        if !x_min.is_finite() {
            (x_min, x_max) = (0.0, 1.0);
        }
        if x_max <= x_min {
            x_max = x_min + 1.0;
        }
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (x - x_min) / (x_max - x_min) * plot_w;
        let (mut out, sy) = frame(&self.title, &self.y_label, y_max);
        let x_step = tick_step(x_max - x_min);
        let mut x = (x_min / x_step).ceil() * x_step;
        while x <= x_max + x_step / 1000.0 {
            let _ = writeln!(
                out,
                r#"<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="black"/><text x="{0}" y="{3}" text-anchor="middle">{4}</text>"#,
                sx(x),
                TOP + plot_h,
                TOP + plot_h + 5.0,
                TOP + plot_h + 19.0,
                format_tick(x)
            );
            x += x_step;
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 12.0,
            escape(&self.x_label)
        );
        // Lines, markers and the legend.
        for (k, series) in self.series.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            let path: Vec<String> = series
                .points
                .iter()
                .enumerate()
                .map(|(i, &(x, y))| {
                    format!(
                        "{}{:.1} {:.1}",
                        if i == 0 { "M" } else { "L" },
                        sx(x),
                        sy(y)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                r#"<path d="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for &(x, y) in &series.points {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                    sx(x),
                    sy(y)
                );
            }
            let ly = TOP + 10.0 + 20.0 * k as f64;
            let lx = LEFT + plot_w + 15.0;
            let _ = writeln!(
                out,
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        out.push_str("</svg>\n");
        out
    }
}

/// Stacked bars: one bar per group, one segment per part (the migration paper's turnaround breakdown).
#[derive(Debug, Clone)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    /// The parts' names, bottom to top.
    pub parts: Vec<String>,
    /// Each bar's label and its parts' values (same order as `parts`).
    pub bars: Vec<(String, Vec<f64>)>,
}

impl BarChart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let y_max = self
            .bars
            .iter()
            .map(|(_, values)| values.iter().sum::<f64>())
            .fold(0.0, f64::max);
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let slot = plot_w / self.bars.len().max(1) as f64;
        let (mut out, sy) = frame(&self.title, &self.y_label, y_max);
        for (i, (label, values)) in self.bars.iter().enumerate() {
            let x = LEFT + slot * i as f64 + slot * 0.2;
            let mut base = 0.0;
            for (k, value) in values.iter().enumerate() {
                let colour = COLOURS[k % COLOURS.len()];
                let _ = writeln!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/>"#,
                    sy(base + value),
                    slot * 0.6,
                    (sy(base) - sy(base + value)).max(0.0)
                );
                base += value;
            }
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                x + slot * 0.3,
                TOP + plot_h + 19.0,
                escape(label),
                x + slot * 0.3,
                sy(base) - 4.0,
                format_tick((base * 1000.0).round() / 1000.0)
            );
        }
        for (k, part) in self.parts.iter().enumerate() {
            let ly = TOP + 10.0 + 20.0 * k as f64;
            let lx = LEFT + plot_w + 15.0;
            let _ = writeln!(
                out,
                r#"<rect x="{lx}" y="{}" width="14" height="10" fill="{}"/><text x="{}" y="{}">{}</text>"#,
                ly - 5.0,
                COLOURS[k % COLOURS.len()],
                lx + 20.0,
                ly + 4.0,
                escape(part)
            );
        }
        out.push_str("</svg>\n");
        out
    }
}
