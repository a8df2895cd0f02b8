//! How much room a label takes. The SVG names no font file (each viewer uses its own sans-serif
//! face), so widths are estimated, never measured: per character, an upper bound of the widest
//! common face, DejaVu Sans Bold — wider than Helvetica, Arial and DejaVu Sans Book, the faces a
//! viewer or the PNG's rasteriser picks. Overestimating costs a little space; underestimating lets
//! labels run into each other. `png`'s tests check the bound against the fonts resvg renders with.

/// An axis-aligned box in SVG units (y grows downwards).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// The layout only places boxes; checking them is the tests' job.
#[cfg(test)]
impl Rect {
    pub fn right(&self) -> f64 {
        self.x + self.w
    }

    pub fn bottom(&self) -> f64 {
        self.y + self.h
    }

    /// Whether the two boxes share any area (touching edges do not count).
    pub fn intersects(&self, other: &Rect) -> bool {
        self.x < other.right() && other.x < self.right() && self.y < other.bottom() && other.y < self.bottom()
    }

    /// Whether the box lies within a `w` × `h` canvas whose corner is the origin.
    pub fn inside(&self, w: f64, h: f64) -> bool {
        self.x >= 0.0 && self.y >= 0.0 && self.right() <= w && self.bottom() <= h
    }
}

/// Above the baseline a line of text reaches at most this share of its font size (accents
/// included), below it this share (descenders).
const ASCENT: f64 = 0.95;
const DESCENT: f64 = 0.25;

/// The estimated width of `text` at `font_size`, never less than its rendered width.
pub(crate) fn width(text: &str, font_size: f64) -> f64 {
    text.chars().map(em).sum::<f64>() * font_size
}

/// The box of `text` drawn with its start at `x` (`text-anchor` start) and its baseline at `y`.
pub(crate) fn text_box(text: &str, font_size: f64, x: f64, baseline: f64) -> Rect {
    Rect {
        x,
        y: baseline - ASCENT * font_size,
        w: width(text, font_size),
        h: (ASCENT + DESCENT) * font_size,
    }
}

/// The same box for centred text (`text-anchor="middle"`): the title's, which only the tests
/// check (its canvas is made wide enough for it).
#[cfg(test)]
pub(crate) fn centred_text_box(text: &str, font_size: f64, centre: f64, baseline: f64) -> Rect {
    let mut r = text_box(text, font_size, centre, baseline);
    r.x -= r.w / 2.0;
    r
}

/// A character's width in ems, rounded up from DejaVu Sans Bold's advances by class: the narrow
/// strokes, the wide letters, other capitals, and everything else (lower case, digits, most
/// punctuation). A character outside ASCII counts as the widest.
fn em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | 'I' | 'J' | '.' | ',' | ':' | ';' | '\'' | '!' | '|' | ' ' => 0.42,
        'f' | 't' | 'r' | '-' | '(' | ')' | '[' | ']' | '/' => 0.55,
        'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.12,
        c if c.is_ascii_uppercase() => 0.90,
        c if c.is_ascii() => 0.74,
        _ => 1.12,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_that_share_only_an_edge_do_not_intersect() {
        let a = Rect {
            x: 0.0,
            y: 0.0,
            w: 10.0,
            h: 10.0,
        };
        let b = Rect { x: 10.0, ..a };
        let c = Rect { x: 9.0, y: 9.0, ..a };
        assert!(!a.intersects(&b) && !b.intersects(&a));
        assert!(a.intersects(&c) && c.intersects(&a));
        assert!(a.inside(10.0, 10.0) && !c.inside(10.0, 10.0));
    }

    #[test]
    fn wider_letters_take_more_room() {
        assert!(width("mmmm", 12.0) > width("aaaa", 12.0));
        assert!(width("aaaa", 12.0) > width("iiii", 12.0));
        assert_eq!(width("ab", 24.0), 2.0 * width("ab", 12.0));
    }
}
