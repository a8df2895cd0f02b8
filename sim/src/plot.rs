//! The two plots of the evaluation as self-contained SVG (no plotting dependency, no fonts to
//! embed; any browser or Markdown viewer renders them): hit rate per workload per policy (grouped
//! bars) and hit rate against cache capacity (one panel per workload, a line per policy).

use std::fmt::Write;

const COLORS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f",
];

fn color(i: usize) -> &'static str {
    COLORS[i % COLORS.len()]
}

fn header(w: f64, h: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
        w / 2.0,
        escape(title)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn legend(out: &mut String, policies: &[String], x: f64, y: f64) {
    for (i, p) in policies.iter().enumerate() {
        let lx = x + i as f64 * 120.0;
        let _ = writeln!(
            out,
            "<rect x=\"{lx}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
            y - 10.0,
            color(i)
        );
        let _ = writeln!(out, "<text x=\"{}\" y=\"{y}\">{}</text>", lx + 16.0, escape(p));
    }
}

/// Grouped bars: `values[w][p]` = hit rate (0–1) of policy `p` on workload `w`.
pub fn hit_rate_bars(title: &str, workloads: &[String], policies: &[String], values: &[Vec<f64>]) -> String {
    let (w, h) = (900.0, 420.0);
    let (left, right, top, bottom) = (60.0, 20.0, 60.0, 60.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let mut out = header(w, h, title);
    legend(&mut out, policies, left, 44.0);
    axis_y(&mut out, left, top, plot_w, plot_h, "token hit rate (%)");
    let group = plot_w / workloads.len().max(1) as f64;
    let bar = group * 0.8 / policies.len().max(1) as f64;
    for (wi, name) in workloads.iter().enumerate() {
        let gx = left + wi as f64 * group + group * 0.1;
        for (pi, v) in values[wi].iter().enumerate() {
            let bh = v.clamp(0.0, 1.0) * plot_h;
            let x = gx + pi as f64 * bar;
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{}\"><title>{} {}: {:.1}%</title></rect>",
                top + plot_h - bh,
                bar * 0.92,
                color(pi),
                escape(name),
                escape(&policies[pi]),
                v * 100.0
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            gx + group * 0.4,
            top + plot_h + 20.0,
            escape(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn axis_y(out: &mut String, left: f64, top: f64, plot_w: f64, plot_h: f64, label: &str) {
    for i in 0..=5 {
        let frac = i as f64 / 5.0;
        let y = top + plot_h - frac * plot_h;
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>",
            left + plot_w
        );
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>",
            left - 6.0,
            y + 4.0,
            frac * 100.0
        );
    }
    let _ = writeln!(
        out,
        "<text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        left - 40.0,
        top + plot_h / 2.0,
        escape(label)
    );
}

/// One panel per workload: `series[w][p]` = hit rates at `capacities[w]` (blocks) for policy `p`.
pub fn capacity_lines(
    title: &str,
    workloads: &[String],
    policies: &[String],
    capacities: &[Vec<usize>],
    series: &[Vec<Vec<f64>>],
) -> String {
    line_panels(title, "cache blocks", workloads, policies, capacities, series)
}

/// One panel per entry of `panels`, x on a log scale: `series[panel][p]` = hit rates at
/// `xs[panel]` for policy `p`. Ticks of 1,000 and more are written in thousands.
pub fn line_panels(
    title: &str,
    x_label: &str,
    panels: &[String],
    policies: &[String],
    xs: &[Vec<usize>],
    series: &[Vec<Vec<f64>>],
) -> String {
    let (workloads, capacities) = (panels, xs);
    let panel_w = 260.0;
    let (pw, ph) = (panel_w - 70.0, 220.0);
    let w = panel_w * workloads.len().max(1) as f64 + 20.0;
    let h = 360.0;
    let top = 70.0;
    let mut out = header(w, h, title);
    legend(&mut out, policies, 60.0, 46.0);
    for (wi, name) in workloads.iter().enumerate() {
        let left = 20.0 + wi as f64 * panel_w + 45.0;
        axis_y(
            &mut out,
            left,
            top,
            pw,
            ph,
            if wi == 0 { "token hit rate (%)" } else { "" },
        );
        let caps = &capacities[wi];
        let (lo, hi) = (
            caps.iter().copied().min().unwrap_or(1) as f64,
            caps.iter().copied().max().unwrap_or(1) as f64,
        );
        let x_of = |c: usize| {
            if hi > lo {
                left + ((c as f64).ln() - lo.ln()) / (hi.ln() - lo.ln()) * pw
            } else {
                left + pw / 2.0
            }
        };
        for &c in caps {
            let tick = if c >= 1000 {
                format!("{}k", (c as f64 / 1000.0).round())
            } else {
                c.to_string()
            };
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{tick}</text>",
                x_of(c),
                top + ph + 16.0,
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{} ({})</text>",
            left + pw / 2.0,
            top + ph + 36.0,
            escape(name),
            escape(x_label)
        );
        for (pi, ys) in series[wi].iter().enumerate() {
            let points: Vec<String> = caps
                .iter()
                .zip(ys)
                .map(|(&c, y)| format!("{:.1},{:.1}", x_of(c), top + ph - y.clamp(0.0, 1.0) * ph))
                .collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                points.join(" "),
                color(pi)
            );
            for p in &points {
                let (x, y) = p.split_once(',').expect("x,y");
                let _ = writeln!(out, "<circle cx=\"{x}\" cy=\"{y}\" r=\"2.5\" fill=\"{}\"/>", color(pi));
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_well_formed_svg() {
        let w = vec!["gsm8k".to_string(), "mmlu".to_string()];
        let p = vec!["lru".to_string(), "belady".to_string()];
        let bars = hit_rate_bars("t", &w, &p, &[vec![0.4, 0.6], vec![0.5, 0.7]]);
        assert!(bars.starts_with("<svg") && bars.trim_end().ends_with("</svg>"));
        assert_eq!(bars.matches("<rect x=").count(), 4 + 2);
        let lines = capacity_lines(
            "t",
            &w,
            &p,
            &[vec![100, 200], vec![100, 200]],
            &[
                vec![vec![0.1, 0.2], vec![0.2, 0.3]],
                vec![vec![0.1, 0.2], vec![0.2, 0.3]],
            ],
        );
        assert_eq!(lines.matches("<polyline").count(), 4);
    }
}
