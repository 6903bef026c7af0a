//! Small server-rendered line charts (inline SVG, no script) for the
//! dashboard, drawn from the gateway's own samples, and the number formats
//! the pages share (thousands separators, KiB/MiB, uptimes).

use std::fmt::Write as _;

/// Chart size in SVG units (it scales with the page).
const W: f64 = 360.0;
const H: f64 = 150.0;
/// Left margin for the axis labels, bottom margin for the time labels.
const LEFT: f64 = 36.0;
const BOTTOM: f64 = 18.0;

/// Line colours, one per series (colour-blind safe palette).
const COLOURS: [&str; 6] = [
    "#1f6fd1", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e",
];

/// One line of a chart: its label and a value per sample (`None`: no value
/// then, the line breaks).
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Values, oldest first, one per sample time.
    pub values: Vec<Option<f64>>,
}

/// A line chart of `series` over the sample times `at` (Unix seconds,
/// oldest first), as inline SVG. `max` fixes the top of the scale (e.g.
/// 255 for ServiceLevel); otherwise it follows the data. `unit` follows
/// the axis numbers. The SVG carries a text summary for screen readers.
pub fn line_chart(
    title: &str,
    at: &[i64],
    series: &[Series],
    max: Option<f64>,
    unit: &str,
) -> String {
    let top = max.unwrap_or_else(|| {
        let m = series
            .iter()
            .flat_map(|s| s.values.iter().flatten())
            .fold(0.0_f64, |a, b| a.max(*b));
        nice_ceiling(m)
    });
    let n = at.len();
    let x = |i: usize| {
        if n <= 1 {
            W
        } else {
            LEFT + (W - LEFT) * i as f64 / (n - 1) as f64
        }
    };
    let y = |v: f64| (H - BOTTOM) - (H - BOTTOM - 4.0) * (v / top).clamp(0.0, 1.0);
    let latest: Vec<String> = series
        .iter()
        .map(|s| {
            let v = s.values.iter().rev().flatten().next();
            format!(
                "{} {}",
                s.label,
                v.map_or("no value".to_string(), |v| format!("{}{unit}", number(*v)))
            )
        })
        .collect();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{}: {}">"#,
        escape(title),
        escape(&latest.join(", "))
    );
    // Grid: bottom, middle and top lines with their values.
    for frac in [0.0, 0.5, 1.0] {
        let v = top * frac;
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{W}" y2="{yy:.1}" stroke="#d9dee5" stroke-width="1"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="axis">{}</text>"##,
            LEFT - 4.0,
            yy + 4.0,
            escape(&number(v))
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}" class="axis">{}</text><text x="{W}" y="{:.1}" text-anchor="end" class="axis">now</text>"#,
        H - 3.0,
        escape(&ago(at)),
        H - 3.0
    );
    for (k, s) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let mut points = Vec::new();
        let flush = |points: &mut Vec<String>, svg: &mut String| {
            if points.len() == 1 {
                // A lone value: a dot.
                let p = &points[0];
                if let Some((px, py)) = p.split_once(',') {
                    let _ = write!(
                        svg,
                        r#"<circle cx="{px}" cy="{py}" r="2" fill="{colour}"/>"#
                    );
                }
            } else if points.len() > 1 {
                let _ = write!(
                    svg,
                    r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}" data-series="{}"/>"#,
                    points.join(" "),
                    escape(&s.label)
                );
            }
            points.clear();
        };
        for (i, v) in s.values.iter().enumerate() {
            match v {
                Some(v) => points.push(format!("{:.1},{:.1}", x(i), y(*v))),
                None => flush(&mut points, &mut svg),
            }
        }
        flush(&mut points, &mut svg);
    }
    svg.push_str("</svg>");
    if series.len() > 1 || !series.iter().any(|s| s.label == title) {
        svg.push_str(r#"<p class="legend">"#);
        for (k, s) in series.iter().enumerate() {
            let _ = write!(
                svg,
                r#"<span><i class="swatch-{}"></i>{}</span>"#,
                k % COLOURS.len(),
                escape(&s.label)
            );
        }
        svg.push_str("</p>");
    }
    svg
}

/// How long ago the first sample was ("15 min ago", "40 s ago").
fn ago(at: &[i64]) -> String {
    match (at.first(), at.last()) {
        (Some(a), Some(b)) if b > a => {
            let s = b - a;
            if s >= 120 {
                format!("{} min ago", (s + 30) / 60)
            } else {
                format!("{s} s ago")
            }
        }
        _ => "collecting…".to_string(),
    }
}

/// The smallest of 1, 2, 5 × 10^k at or above `v` (at least 1).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// A number for people: thousands separated, one decimal below 10 when it
/// has one ("1,234", "12", "3.5", "0").
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    if v.abs() < 10.0 && v.fract().abs() >= 0.05 {
        return format!("{v:.1}");
    }
    thousands(v.round() as i64)
}

/// An integer with thousands separators ("12,345").
pub fn thousands(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A byte count in B, KiB, MiB or GiB ("512 B", "1.5 MiB").
pub fn bytes(v: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut x = v as f64;
    let mut u = 0;
    while x >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v} B")
    } else if x < 10.0 {
        format!("{x:.1} {}", UNITS[u])
    } else {
        format!("{x:.0} {}", UNITS[u])
    }
}

/// An uptime for people ("3 d 4 h", "2 h 5 min", "40 s").
pub fn uptime(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let (days, hours, mins) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    if days > 0 {
        format!("{days} d {hours} h")
    } else if hours > 0 {
        format!("{hours} h {mins} min")
    } else if mins > 0 {
        format!("{mins} min")
    } else {
        format!("{s} s")
    }
}

/// Text safe inside SVG/HTML text and attributes.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234), "1,234");
        assert_eq!(thousands(-1_234_567), "-1,234,567");
        assert_eq!(number(3.46), "3.5");
        assert_eq!(number(12.4), "12");
        assert_eq!(number(12_345.0), "12,345");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(300 * 1024 * 1024), "300 MiB");
        assert_eq!(uptime(std::time::Duration::from_secs(40)), "40 s");
        assert_eq!(uptime(std::time::Duration::from_secs(7_500)), "2 h 5 min");
        assert_eq!(
            uptime(std::time::Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3 d 4 h"
        );
    }

    #[test]
    fn a_chart_draws_each_series_breaks_at_gaps_and_says_the_latest_value() {
        let at: Vec<i64> = (0..10).map(|i| i * 5).collect();
        let a = Series {
            label: "plc1".into(),
            values: (0..10).map(|i| Some(f64::from(i) * 20.0)).collect(),
        };
        let b = Series {
            label: "plc<2>".into(),
            values: (0..10).map(|i| (i != 4).then_some(200.0)).collect(),
        };
        let svg = line_chart("ServiceLevel", &at, &[a, b], Some(255.0), "");
        assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
        assert!(
            svg.contains("aria-label=\"ServiceLevel: plc1 180, plc&lt;2&gt; 200\""),
            "{svg}"
        );
        assert!(svg.contains("45 s ago"), "{svg}");
        assert!(svg.contains(">255<"), "{svg}");
        assert!(!svg.contains("plc<2>"), "escaped: {svg}");
    }

    #[test]
    fn the_scale_follows_the_data_to_a_round_number() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(130.0), 200.0);
        assert_eq!(nice_ceiling(4_100.0), 5_000.0);
    }
}
