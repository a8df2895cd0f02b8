//! A plot's legend: a coloured swatch and a name per policy, laid out left to right from each
//! name's width and wrapped onto a new row before an entry would pass the plot's right edge. The
//! plot grows its top margin by the extra rows (`extra_height`), so the legend never covers it.

use std::fmt::Write;

use super::text::{self, Rect};

/// The legend's font size: the SVG's default.
pub(crate) const FONT_SIZE: f64 = 12.0;
/// Height of one row of entries.
pub(crate) const ROW: f64 = 18.0;
/// The swatch's side, and the gap between it and its name.
const SWATCH: f64 = 12.0;
const SWATCH_GAP: f64 = 4.0;
/// Space between one entry's name and the next entry's swatch.
const ENTRY_GAP: f64 = 16.0;

/// One entry: its swatch, its name as drawn (shortened with "…" only when the name alone is
/// wider than the legend), the box that name takes and its baseline.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub swatch: Rect,
    pub name: String,
    pub label: Rect,
    pub baseline: f64,
}

#[derive(Clone, Debug)]
pub(crate) struct Legend {
    pub entries: Vec<Entry>,
    pub rows: usize,
}

impl Legend {
    /// Lay `names` out between `left` and `right`, the first row's baseline at `baseline`.
    pub fn layout(names: &[String], left: f64, right: f64, baseline: f64) -> Legend {
        let room = (right - left - SWATCH - SWATCH_GAP).max(0.0);
        let (mut x, mut row) = (left, 0);
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            let name = fit(name, room);
            let span = SWATCH + SWATCH_GAP + text::width(&name, FONT_SIZE);
            if x > left && x + span > right {
                (x, row) = (left, row + 1);
            }
            let y = baseline + row as f64 * ROW;
            entries.push(Entry {
                swatch: Rect {
                    x,
                    y: y - 10.0,
                    w: SWATCH,
                    h: SWATCH,
                },
                label: text::text_box(&name, FONT_SIZE, x + SWATCH + SWATCH_GAP, y),
                name,
                baseline: y,
            });
            x += span + ENTRY_GAP;
        }
        Legend { entries, rows: row + 1 }
    }

    /// How much taller than one row the legend is: what the plot below moves down by.
    pub fn extra_height(&self) -> f64 {
        self.rows.saturating_sub(1) as f64 * ROW
    }

    /// The SVG of the legend; `swatch(i, rect)` draws entry `i`'s swatch in its box (a filled
    /// square for bars, a stretch of line with its marker for lines).
    pub fn write(&self, out: &mut String, swatch: impl Fn(usize, &Rect) -> String) {
        for (i, e) in self.entries.iter().enumerate() {
            let _ = writeln!(out, "{}", swatch(i, &e.swatch));
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                e.label.x,
                e.baseline,
                super::escape(&e.name)
            );
        }
    }
}

/// `name`, or as much of it as fits in `room` followed by "…".
fn fit(name: &str, room: f64) -> String {
    if text::width(name, FONT_SIZE) <= room {
        return name.to_string();
    }
    let mut kept: String = name.to_string();
    while !kept.is_empty() && text::width(&format!("{kept}…"), FONT_SIZE) > room {
        kept.pop();
    }
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn entries_wrap_before_the_right_edge() {
        let legend = Legend::layout(&names(&["alpha", "beta", "gamma", "delta"]), 10.0, 150.0, 40.0);
        assert!(legend.rows > 1);
        for e in &legend.entries {
            assert!(e.swatch.x >= 10.0 && e.label.right() <= 150.0, "{e:?}");
        }
        let first_row_baseline = legend.entries[0].swatch.y;
        let last = legend.entries.last().unwrap();
        assert_eq!(last.swatch.y, first_row_baseline + (legend.rows - 1) as f64 * ROW);
        assert_eq!(legend.extra_height(), (legend.rows - 1) as f64 * ROW);
    }

    #[test]
    fn a_name_wider_than_the_legend_is_shortened_to_fit() {
        let long = "x".repeat(200);
        let legend = Legend::layout(&names(&[&long, "lru"]), 0.0, 100.0, 20.0);
        let first = &legend.entries[0];
        assert!(first.name.ends_with('…') && first.name.len() < long.len());
        assert!(first.label.right() <= 100.0);
        assert_eq!(legend.entries[1].name, "lru");
    }

    #[test]
    fn the_baseline_written_is_the_one_laid_out() {
        let legend = Legend::layout(&names(&["lru"]), 0.0, 100.0, 44.0);
        let mut out = String::new();
        legend.write(&mut out, |_, _| String::new());
        assert!(out.contains("y=\"44.0\">lru</text>"), "{out}");
    }
}
