//! The two plots of the evaluation as self-contained SVG (no plotting dependency, no fonts to
//! embed; any browser or Markdown viewer renders them): hit rate per workload per policy (grouped
//! bars) and hit rate against cache capacity (one panel per workload, a line per policy). Each
//! plot's frame (`Frame`) places title and legend from their text's width, so no label covers
//! another however many policies are shown or however long their names.

mod legend;
pub(crate) mod text;

use std::fmt::Write;

use legend::Legend;

const COLORS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f",
];

fn color(i: usize) -> &'static str {
    COLORS[i % COLORS.len()]
}

/// Line plots tell policies apart by more than colour — lines lie on top of each other when two
/// policies tie, and a colour-blind reader or a grey print loses hue: each policy also gets a
/// dash pattern and a marker shape (the pair repeats only past 12 policies).
const DASHES: [&str; 4] = ["", "8 4", "2 3", "10 3 2 3"];
const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Square, Marker::Triangle];

#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Square,
    Triangle,
}

impl Marker {
    fn svg(self, x: f64, y: f64, fill: &str) -> String {
        match self {
            Marker::Circle => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{fill}\"/>"),
            Marker::Square => format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"{fill}\"/>",
                x - 3.5,
                y - 3.5
            ),
            Marker::Triangle => format!(
                "<polygon points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"{fill}\"/>",
                x,
                y - 4.5,
                x - 4.0,
                y + 3.0,
                x + 4.0,
                y + 3.0
            ),
        }
    }
}

/// The `stroke-dasharray` attribute of policy `i`'s line (none for a solid one).
fn dash_attr(i: usize) -> String {
    match DASHES[i % DASHES.len()] {
        "" => String::new(),
        dash => format!(" stroke-dasharray=\"{dash}\""),
    }
}

fn marker(i: usize) -> Marker {
    MARKERS[(i + i / DASHES.len()) % MARKERS.len()]
}

/// A line legend's swatch: a short stretch of policy `i`'s line with its marker.
fn line_swatch(i: usize, r: &text::Rect) -> String {
    let y = r.y + r.h / 2.0;
    format!(
        "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n{}",
        r.x - 4.0,
        r.x + r.w + 2.0,
        color(i),
        dash_attr(i),
        marker(i).svg(r.x + r.w / 2.0 - 1.0, y, color(i))
    )
}

/// The title's font size and baseline.
const TITLE_SIZE: f64 = 15.0;
const TITLE_BASELINE: f64 = 22.0;

/// Where a plot's parts go: the canvas (as wide as the title needs), the legend and the top of the
/// plotting area, which moves down by the legend's extra rows (the canvas grows by as much).
struct Frame {
    w: f64,
    h: f64,
    legend: Legend,
    top: f64,
}

impl Frame {
    /// A canvas at least `min_w` wide and as wide as the title needs; the legend runs from
    /// `legend_left` to a margin short of the right edge.
    fn new(
        title: &str,
        policies: &[String],
        min_w: f64,
        h: f64,
        top: f64,
        legend_left: f64,
        legend_baseline: f64,
    ) -> Frame {
        const RIGHT_MARGIN: f64 = 20.0;
        let w = min_w.max(text::width(title, TITLE_SIZE) + 2.0 * RIGHT_MARGIN);
        let legend = Legend::layout(policies, legend_left, w - RIGHT_MARGIN, legend_baseline);
        let extra = legend.extra_height();
        Frame {
            w,
            h: h + extra,
            legend,
            top: top + extra,
        }
    }

    fn bars(title: &str, policies: &[String]) -> Frame {
        Frame::new(title, policies, 900.0, 420.0, 60.0, 60.0, 44.0)
    }

    fn panels(title: &str, panels: usize, policies: &[String]) -> Frame {
        let (columns, rows) = grid(panels);
        Frame::new(
            title,
            policies,
            PANEL_W * columns as f64 + 20.0,
            PANELS_TOP + rows as f64 * PANEL_H + 10.0,
            PANELS_TOP,
            60.0,
            46.0,
        )
    }

    /// The box the title takes, centred at the top.
    #[cfg(test)]
    fn title_box(&self, title: &str) -> text::Rect {
        text::centred_text_box(title, TITLE_SIZE, self.w / 2.0, TITLE_BASELINE)
    }

    /// The SVG's opening: canvas, background, title and legend.
    fn header(&self, title: &str) -> String {
        let mut out = self.header_without_legend(title);
        self.legend.write(&mut out, |i, r| {
            format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
                r.x,
                r.y,
                r.w,
                r.h,
                color(i)
            )
        });
        out
    }

    /// The same opening with line swatches (dash and marker) in the legend.
    fn line_header(&self, title: &str) -> String {
        let mut out = self.header_without_legend(title);
        self.legend.write(&mut out, line_swatch);
        out
    }

    fn header_without_legend(&self, title: &str) -> String {
        let (w, h) = (self.w, self.h);
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"{}\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"{TITLE_BASELINE}\" text-anchor=\"middle\" font-size=\"{TITLE_SIZE}\" font-weight=\"bold\">{}</text>\n",
            legend::FONT_SIZE,
            w / 2.0,
            escape(title)
        )
    }
}

/// One panel of `line_panels`: its width and height (plotting area and the margins for its axis
/// labels and name), at most three to a row — six side by side would each be too narrow to read.
const PANEL_W: f64 = 400.0;
const PANEL_H: f64 = 330.0;
const PANEL_PLOT_H: f64 = 260.0;
const PANELS_PER_ROW: usize = 3;
/// Where the first row of panels starts (below title and one legend row).
const PANELS_TOP: f64 = 70.0;

/// Columns and rows of a grid of `panels`.
fn grid(panels: usize) -> (usize, usize) {
    let panels = panels.max(1);
    let columns = panels.min(PANELS_PER_ROW);
    (columns, panels.div_ceil(columns))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Grouped bars: `values[w][p]` = hit rate (0–1) of policy `p` on workload `w`.
pub fn hit_rate_bars(title: &str, workloads: &[String], policies: &[String], values: &[Vec<f64>]) -> String {
    let frame = Frame::bars(title, policies);
    let (left, right, top, bottom) = (60.0, 20.0, frame.top, 60.0);
    let plot_w = frame.w - left - right;
    let plot_h = frame.h - top - bottom;
    let mut out = frame.header(title);
    axis_y(&mut out, left, top, plot_w, plot_h, &YAxis::hit_rate(), true);
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

/// A panel's y axis: its label, the value at its top, and what a tick shows per unit of value
/// (100 for a fraction shown in percent).
#[derive(Debug, Clone)]
pub struct YAxis {
    pub label: String,
    pub max: f64,
    pub tick_scale: f64,
}

impl YAxis {
    /// Token hit rate: a fraction, shown in percent.
    pub fn hit_rate() -> Self {
        Self {
            label: "token hit rate (%)".into(),
            max: 1.0,
            tick_scale: 100.0,
        }
    }

    /// A quantity from 0 to a round number above `largest`.
    pub fn up_to(label: &str, largest: f64) -> Self {
        let largest = largest.max(1e-9);
        let step = 10f64.powf(largest.log10().floor());
        let max = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * step)
            .find(|&m| m >= largest)
            .unwrap_or(10.0 * step);
        Self {
            label: label.into(),
            max,
            tick_scale: 1.0,
        }
    }
}

fn axis_y(out: &mut String, left: f64, top: f64, plot_w: f64, plot_h: f64, axis: &YAxis, labelled: bool) {
    for i in 0..=5 {
        let frac = i as f64 / 5.0;
        let y = top + plot_h - frac * plot_h;
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>",
            left + plot_w
        );
        let tick = frac * axis.max * axis.tick_scale;
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            top + plot_h - frac * plot_h + 4.0,
            if tick >= 1e4 {
                format!("{:.0}k", tick / 1000.0)
            } else if tick.fract().abs() < 1e-9 || tick >= 10.0 {
                format!("{tick:.0}")
            } else {
                format!("{tick:.1}")
            }
        );
    }
    if labelled {
        let _ = writeln!(
            out,
            "<text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            left - 40.0,
            top + plot_h / 2.0,
            escape(&axis.label)
        );
    }
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
    let axes = vec![YAxis::hit_rate(); panels.len()];
    measure_panels(title, x_label, panels, &axes, policies, xs, series)
}

/// [`line_panels`] with each panel's own y axis (`axes[panel]`): a hit rate beside a rate of
/// calls, say. A panel's y label is written when it is the first of its row or its axis differs
/// from its left neighbour's.
pub fn measure_panels(
    title: &str,
    x_label: &str,
    panels: &[String],
    axes: &[YAxis],
    policies: &[String],
    xs: &[Vec<usize>],
    series: &[Vec<Vec<f64>>],
) -> String {
    let (workloads, capacities) = (panels, xs);
    let (pw, ph) = (PANEL_W - 70.0, PANEL_PLOT_H);
    let frame = Frame::panels(title, workloads.len(), policies);
    let (columns, _) = grid(workloads.len());
    let mut out = frame.line_header(title);
    for (wi, name) in workloads.iter().enumerate() {
        let left = 20.0 + (wi % columns) as f64 * PANEL_W + 45.0;
        let top = frame.top + (wi / columns) as f64 * PANEL_H;
        let y = &axes[wi];
        let labelled = wi % columns == 0 || axes[wi - 1].label != y.label;
        axis_y(&mut out, left, top, pw, ph, y, labelled);
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
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{tick}</text>",
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
            let points: Vec<(f64, f64)> = caps
                .iter()
                .zip(ys)
                .map(|(&c, v)| (x_of(c), top + ph - (v / y.max).clamp(0.0, 1.0) * ph))
                .collect();
            let line: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>",
                line.join(" "),
                color(pi),
                dash_attr(pi)
            );
            for &(x, y) in &points {
                let _ = writeln!(out, "{}", marker(pi).svg(x, y, color(pi)));
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

    #[test]
    fn six_workloads_are_two_rows_of_three_readable_panels_with_distinct_line_styles() {
        let w = names(&["a", "b", "c", "d", "e", "f"]);
        let p = names(&TABLE_POLICIES);
        let caps = vec![vec![100, 200, 400]; w.len()];
        let series = vec![vec![vec![0.3, 0.4, 0.5]; p.len()]; w.len()];
        let svg = capacity_lines("t", &w, &p, &caps, &series);
        let frame = Frame::panels("t", w.len(), &p);
        // Three panels across: a page's width, not a banner; each plot at least 300 × 250.
        assert!(frame.w <= 1300.0, "{}", frame.w);
        const { assert!(PANEL_W - 70.0 >= 300.0 && PANEL_PLOT_H >= 250.0) };
        assert!(frame.h >= frame.top + 2.0 * PANEL_H, "two rows fit: {}", frame.h);
        // Panels 0 and 3 share a column, one row apart.
        assert_eq!(grid(6), (3, 2));
        assert_eq!(grid(1), (1, 1));
        assert_eq!(svg.matches("<polyline").count(), w.len() * p.len());
        // Each of the first policies draws its own dash pattern and marker, also in the legend.
        let styles: std::collections::HashSet<(String, &str)> =
            (0..p.len()).map(|i| (dash_attr(i), color(i))).collect();
        assert_eq!(styles.len(), p.len());
        let first_four: std::collections::HashSet<String> = (0..4).map(dash_attr).collect();
        assert_eq!(first_four.len(), 4);
        assert!(svg.contains("stroke-dasharray=\"8 4\""));
        assert!(svg.contains("<polygon") && svg.contains("<circle") && svg.contains("<rect x="));
        let swatches = svg
            .lines()
            .filter(|l| l.starts_with("<line") && l.contains("stroke-width=\"2\""))
            .count();
        assert_eq!(swatches, p.len(), "one line swatch per legend entry");
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The policies `sim table` compares, in its order.
    const TABLE_POLICIES: [&str; 7] = crate::harness::DEFAULT_POLICY_NAMES;

    /// Made-up names, long and wide, more than a row holds, one longer than any legend.
    fn many_long_names() -> Vec<String> {
        let mut list: Vec<String> = (0..24)
            .map(|i| {
                format!(
                    "policy-{i}-{}",
                    ["WWMM", "mixture-of-experts", "a", "Bélády-oracle"][i % 4]
                )
            })
            .collect();
        list.push("an-unreasonably-long-policy-name-".repeat(8));
        list
    }

    /// The top tick's label ("100") rises this far above the plotting area.
    const TOP_TICK_RISE: f64 = 8.0;

    /// No two of the frame's text boxes (title, swatches, names) intersect, none leaves the
    /// canvas, and the legend ends above the plotting area.
    fn assert_clear(frame: &Frame, title: &str, what: &str) {
        let mut boxes = vec![("title".to_string(), frame.title_box(title))];
        for e in &frame.legend.entries {
            boxes.push((format!("swatch of {}", e.name), e.swatch));
            boxes.push((format!("name {}", e.name), e.label));
        }
        for (i, (a, ra)) in boxes.iter().enumerate() {
            assert!(
                ra.inside(frame.w, frame.h),
                "{what}: {a} {ra:?} leaves the {}×{} canvas",
                frame.w,
                frame.h
            );
            for (b, rb) in &boxes[i + 1..] {
                assert!(!ra.intersects(rb), "{what}: {a} {ra:?} overlaps {b} {rb:?}");
            }
            if a != "title" {
                assert!(
                    ra.bottom() <= frame.top - TOP_TICK_RISE,
                    "{what}: {a} {ra:?} reaches into the plot (top {})",
                    frame.top
                );
            }
        }
    }

    #[test]
    fn legends_never_overlap_nor_leave_the_canvas() {
        let bars_title = "Token hit rate at the headline cache (4096 blocks)";
        let fleet_title = "fleet: token hit rate against applications sharing the engine (4096 blocks)";
        for (list, kind) in [
            (names(&TABLE_POLICIES), "table's policies"),
            (many_long_names(), "long names"),
        ] {
            let bars = Frame::bars(bars_title, &list);
            assert_clear(&bars, bars_title, &format!("bars, {kind}"));
            for panels in [1, 3, 6] {
                let lines = Frame::panels(fleet_title, panels, &list);
                assert_clear(&lines, fleet_title, &format!("{panels} panels, {kind}"));
            }
        }
    }

    #[test]
    fn more_legend_rows_move_the_plot_down_and_grow_the_canvas() {
        let (few, many) = (names(&["lru"]), many_long_names());
        let (a, b) = (Frame::bars("t", &few), Frame::bars("t", &many));
        assert_eq!(a.legend.rows, 1);
        assert!(b.legend.rows > 1);
        let grown = b.legend.extra_height();
        assert!(grown > 0.0);
        assert_eq!((b.top, b.h), (a.top + grown, a.h + grown));
    }

    #[test]
    fn the_svg_draws_the_frame_laid_out() {
        let w = names(&["gsm8k", "mmlu"]);
        let p = names(&TABLE_POLICIES);
        let values = vec![vec![0.5; p.len()]; w.len()];
        let svg = hit_rate_bars("t", &w, &p, &values);
        let frame = Frame::bars("t", &p);
        assert!(svg.contains(&format!("height=\"{}\"", frame.h)));
        for e in &frame.legend.entries {
            let drawn = format!("<text x=\"{:.1}\" y=\"{:.1}\">{}</text>", e.label.x, e.baseline, e.name);
            assert!(svg.contains(&drawn), "{drawn} missing");
        }
    }
}
