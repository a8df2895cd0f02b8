//! What a JSON text costs to parse, read off its bytes before anything parses it.
//!
//! Two costs of client JSON are not bounded by its size in bytes:
//!
//! - **elements**: 15 MiB of `[{},{},…]` is five million maps once parsed, so a body's objects,
//!   arrays and values are counted and a body over its budget is refused unparsed;
//! - **nesting depth**: every recursive walk of a JSON tree — a parser, a scanner, `Drop` of a
//!   parsed value — takes stack per level, and 16 KiB of `[[[[…` is 8,000 levels: enough to
//!   overflow a worker thread's stack and abort the whole process, every tenant with it.
//!   `serde_json` stops its own parser at [`PARSER_DEPTH_LIMIT`], but a walk that does not go
//!   through it (a hand-written scanner, `IgnoredAny`, which skips without counting) does not.
//!
//! [`measure`] reads both in one pass over the bytes that allocates nothing and does not recurse,
//! so it is safe on any input, and stops as soon as either bound is passed. It is not a
//! validator: whatever parses next refuses what is not JSON.

/// The deepest nesting `serde_json` parses (it refuses the 128th level: its recursion limit).
/// A depth limit above this cannot be honoured by anything that parses with it.
pub const PARSER_DEPTH_LIMIT: usize = 127;

/// A depth bound for client JSON that leaves room for what clients send: a chat request nests
/// 5–6 levels (body, messages, content parts, …) and a tool's JSON Schema or arguments a dozen
/// more. The proxy's `--max-json-depth` default.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// What [`measure`] read, each figure counted only up to just past its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Objects, arrays and values: one per opening bracket and per comma outside strings, plus
    /// the first value.
    pub elements: usize,
    /// The deepest nesting of objects and arrays; a scalar or empty text is 0, `[]` is 1.
    pub depth: usize,
}

/// The bounds a text is measured against: [`measure`] stops reading once one is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most elements of interest.
    pub elements: usize,
    /// The deepest nesting of interest.
    pub depth: usize,
}

impl Bounds {
    /// Whether `shape` is within these bounds.
    pub fn admit(&self, shape: Shape) -> Result<(), Exceeded> {
        if shape.depth > self.depth {
            Err(Exceeded::Depth)
        } else if shape.elements > self.elements {
            Err(Exceeded::Elements)
        } else {
            Ok(())
        }
    }
}

/// Which bound a text passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// Nested deeper than [`Bounds::depth`].
    Depth,
    /// More elements than [`Bounds::elements`].
    Elements,
}

/// Read `bytes`' elements and nesting depth, stopping once either passes its bound in `bounds`
/// (then that figure is one past the bound: the caller only needs to know it is over).
pub fn measure(bytes: &[u8], bounds: Bounds) -> Shape {
    let mut shape = Shape {
        elements: usize::from(!bytes.iter().all(u8::is_ascii_whitespace)),
        depth: 0,
    };
    let mut open = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                shape.elements += 1;
                open += 1;
                shape.depth = shape.depth.max(open);
            }
            b',' => shape.elements += 1,
            // Unbalanced closers are the parser's to refuse; here they must not wrap.
            b']' | b'}' => open = open.saturating_sub(1),
            _ => {}
        }
        if shape.elements > bounds.elements || shape.depth > bounds.depth {
            break;
        }
    }
    shape
}

/// Whether `bytes` nest no deeper than `max_depth` (elements unbounded).
pub fn within_depth(bytes: &[u8], max_depth: usize) -> bool {
    let bounds = Bounds {
        elements: usize::MAX,
        depth: max_depth,
    };
    measure(bytes, bounds).depth <= max_depth
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNBOUNDED: Bounds = Bounds {
        elements: usize::MAX,
        depth: usize::MAX,
    };

    #[test]
    fn elements_are_brackets_and_commas_outside_strings() {
        assert_eq!(measure(b"", UNBOUNDED).elements, 0);
        assert_eq!(measure(b"  7 ", UNBOUNDED).elements, 1);
        assert_eq!(measure(br#"{"a":[1,2,3],"b":{}}"#, UNBOUNDED).elements, 7);
        assert_eq!(
            measure(br#"["[,{,\",", 1]"#, UNBOUNDED).elements,
            3,
            "brackets in strings are text"
        );
    }

    #[test]
    fn depth_is_the_deepest_open_bracket_and_strings_do_not_count() {
        assert_eq!(measure(b"1", UNBOUNDED).depth, 0);
        assert_eq!(measure(b"[]", UNBOUNDED).depth, 1);
        assert_eq!(measure(br#"{"a":[{"b":[]}],"c":[[]]}"#, UNBOUNDED).depth, 4);
        assert_eq!(measure(br#"["[[[[[[", "\"[[["]"#, UNBOUNDED).depth, 1);
        assert_eq!(measure(b"]]]][", UNBOUNDED).depth, 1, "stray closers do not wrap");
    }

    #[test]
    fn the_depth_agrees_with_serde_json_at_its_own_limit() {
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        for levels in [PARSER_DEPTH_LIMIT, PARSER_DEPTH_LIMIT + 1] {
            let text = nested(levels);
            assert_eq!(measure(text.as_bytes(), UNBOUNDED).depth, levels);
            let parsed = serde_json::from_str::<serde_json::Value>(&text);
            assert_eq!(parsed.is_ok(), levels <= PARSER_DEPTH_LIMIT, "{levels} levels");
        }
    }

    #[test]
    fn a_million_levels_are_measured_without_recursion_and_stop_at_the_bound() {
        let deep = "{\"a\":".repeat(1_000_000);
        let bounds = Bounds {
            elements: usize::MAX,
            depth: 64,
        };
        assert_eq!(measure(deep.as_bytes(), bounds).depth, 65, "stops one past the bound");
        assert_eq!(bounds.admit(measure(deep.as_bytes(), bounds)), Err(Exceeded::Depth));
        assert!(!within_depth(deep.as_bytes(), 64));
        assert!(within_depth(b"[[1]]", 2));
        let flood = "[{},".repeat(100);
        let few = Bounds {
            elements: 50,
            depth: 64,
        };
        assert_eq!(few.admit(measure(flood.as_bytes(), few)), Err(Exceeded::Elements));
    }
}
