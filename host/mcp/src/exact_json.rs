//! Whether a request body reaches the server exactly as the client wrote it.
//!
//! rmcp parses each request into `serde_json` values and the server receives their serialization,
//! so two things of the client's text would not survive, and the memo key (computed over those
//! values, [`crate::keys`]) would then describe something the client never sent:
//!
//! - a number `serde_json` cannot hold exactly — an integer past 64 bits, a decimal past a
//!   double's precision, an integer written past `u64` (it would reach the server as a float):
//!   `12345678901234567890123` and `…124` would both reach the server as `1.2345678901234568e22`,
//!   and share one memoized result;
//! - a key written twice in one object: JSON leaves its meaning open (RFC 8259 §4), so the
//!   gateway and the server may each read another of the values.
//!
//! Both are refused, with the place (a JSON Pointer) and what to send instead, rather than
//! forwarded changed: then the key is exact over the JSON the server receives. Everything else —
//! whitespace, key order, `1e2` for `100.0` — carries the same value through.

use std::collections::HashSet;

/// Why a body cannot be carried exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inexact {
    /// An object names `key` more than once.
    DuplicateKey {
        /// The object's JSON Pointer; empty for the top level.
        at: String,
        /// The repeated key, decoded.
        key: String,
    },
    /// A number `serde_json` would not carry exactly.
    Number {
        /// The number's JSON Pointer.
        at: String,
        /// The number as the client wrote it.
        literal: String,
    },
}

impl std::fmt::Display for Inexact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inexact::DuplicateKey { at, key } => write!(
                f,
                "the key {} appears more than once in the object at {}: the server and the gateway \
                 could read different values; send each key once",
                shorten(&serde_json::Value::String(key.clone()).to_string()),
                pointer_or_root(at)
            ),
            Inexact::Number { at, literal } => write!(
                f,
                "the number {} at {} cannot reach the server exactly (the gateway carries numbers as \
                 64-bit integers or doubles); send it as a string",
                shorten(literal),
                pointer_or_root(at)
            ),
        }
    }
}

fn pointer_or_root(at: &str) -> &str {
    if at.is_empty() {
        "the top level"
    } else {
        at
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// What a well-formed body says at its top level, and whether it is exact.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scanned<'a> {
    /// `method`, when it is a string.
    pub method: Option<String>,
    /// `id`, as written.
    pub id: Option<&'a str>,
    /// The first thing found that would not reach the server as written; `None`: exact.
    pub inexact: Option<Inexact>,
}

/// Scan `body`; `None` when it is not JSON at all, or nests deeper than `serde_json` parses
/// (rmcp answers both itself).
pub fn scan(body: &[u8]) -> Option<Scanned<'_>> {
    // The scanner below recurses once per level, and `IgnoredAny` skips any depth without
    // counting: measured first, without recursion, so no body can take the stack. (The gateway
    // refuses a tighter `--max-json-depth` before this; this bound is the scanner's own.)
    if !agentrt_guards::json_shape::within_depth(body, agentrt_guards::json_shape::PARSER_DEPTH_LIMIT) {
        return None;
    }
    // Well-formed, so the scanner below can trust the grammar.
    serde_json::from_slice::<serde::de::IgnoredAny>(body).ok()?;
    let text = std::str::from_utf8(body).ok()?;
    let mut scanner = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
        path: Vec::new(),
        top: Scanned::default(),
    };
    let inexact = scanner.value().err();
    Some(Scanned { inexact, ..scanner.top })
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    path: Vec<String>,
    top: Scanned<'a>,
}

impl<'a> Scanner<'a> {
    fn skip_whitespace(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn pointer(&self) -> String {
        self.path
            .iter()
            .map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1")))
            .collect()
    }

    fn value(&mut self) -> Result<(), Inexact> {
        self.skip_whitespace();
        match self.bytes[self.at] {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => {
                self.string();
                Ok(())
            }
            b't' | b'n' => {
                self.at += 4;
                Ok(())
            }
            b'f' => {
                self.at += 5;
                Ok(())
            }
            _ => self.number(),
        }
    }

    /// The span of the string starting at `self.at`, quotes included.
    fn string(&mut self) -> &'a str {
        let start = self.at;
        self.at += 1;
        while self.bytes[self.at] != b'"' {
            self.at += if self.bytes[self.at] == b'\\' { 2 } else { 1 };
        }
        self.at += 1;
        &self.text[start..self.at]
    }

    fn object(&mut self) -> Result<(), Inexact> {
        let top_level = self.path.is_empty();
        self.at += 1;
        let mut keys = HashSet::new();
        loop {
            self.skip_whitespace();
            if self.bytes[self.at] == b'}' {
                self.at += 1;
                return Ok(());
            }
            let raw_key = self.string();
            // Decoded: `"a"` and `"\u0061"` are one key.
            let key: String = serde_json::from_str(raw_key).expect("a well-formed JSON string");
            if !keys.insert(key.clone()) {
                return Err(Inexact::DuplicateKey {
                    at: self.pointer(),
                    key,
                });
            }
            self.skip_whitespace();
            self.at += 1; // ':'
            self.skip_whitespace();
            let value_start = self.at;
            self.path.push(key);
            self.value()?;
            let key = self.path.pop().expect("pushed above");
            if top_level {
                let raw = &self.text[value_start..self.at];
                match key.as_str() {
                    "method" => self.top.method = serde_json::from_str(raw).ok(),
                    "id" => self.top.id = Some(raw),
                    _ => {}
                }
            }
            self.skip_whitespace();
            if self.bytes[self.at] == b',' {
                self.at += 1;
            }
        }
    }

    fn array(&mut self) -> Result<(), Inexact> {
        self.at += 1;
        let mut index = 0usize;
        loop {
            self.skip_whitespace();
            if self.bytes[self.at] == b']' {
                self.at += 1;
                return Ok(());
            }
            self.path.push(index.to_string());
            self.value()?;
            self.path.pop();
            index += 1;
            self.skip_whitespace();
            if self.bytes[self.at] == b',' {
                self.at += 1;
            }
        }
    }

    fn number(&mut self) -> Result<(), Inexact> {
        let start = self.at;
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
        {
            self.at += 1;
        }
        let literal = &self.text[start..self.at];
        if carried_exactly(literal) {
            Ok(())
        } else {
            Err(Inexact::Number {
                at: self.pointer(),
                literal: literal.to_string(),
            })
        }
    }
}

/// Whether `literal` (a JSON number) means the same after `serde_json` parses and writes it:
/// the same decimal value, and still an integer if it was written as one.
pub fn carried_exactly(literal: &str) -> bool {
    let Ok(number) = serde_json::from_str::<serde_json::Number>(literal) else {
        return false;
    };
    let written = number.to_string();
    written == literal || (is_integer(literal) == is_integer(&written) && decimal(literal) == decimal(&written))
}

fn is_integer(literal: &str) -> bool {
    !literal.contains(['.', 'e', 'E'])
}

/// A JSON number's exact value as (negative, significant digits, power of ten); zero has no
/// digits and no sign.
fn decimal(literal: &str) -> (bool, String, i64) {
    let (negative, unsigned) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], unsigned[i + 1..].parse::<i64>().unwrap_or(i64::MAX)),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let mut power = exponent.saturating_sub(fraction.len() as i64);
    let trimmed = digits.trim_start_matches('0');
    let significant = trimmed.trim_end_matches('0');
    power = power.saturating_add((trimmed.len() - significant.len()) as i64);
    if significant.is_empty() {
        return (false, String::new(), 0);
    }
    (negative, significant.to_string(), power)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inexact(body: &str) -> Option<Inexact> {
        scan(body.as_bytes()).expect("JSON").inexact
    }

    #[test]
    fn numbers_serde_json_holds_exactly_pass_and_others_are_named() {
        for fine in [
            "0",
            "42",
            "-9223372036854775808",
            "18446744073709551615",
            "0.1",
            "1.5e300",
            "1e2",
            "1E-7",
            "-0.0",
            "2.50",
        ] {
            assert!(carried_exactly(fine), "{fine}");
        }
        for lossy in [
            "12345678901234567890123",
            "18446744073709551616",
            "0.30000000000000000001",
            "1e-400",
            "3.141592653589793238462643",
            // serde_json reads the integer -0 as the float -0.0: an integer would arrive a float.
            "-0",
        ] {
            assert!(!carried_exactly(lossy), "{lossy}");
        }
        assert_eq!(
            inexact(r#"{"params":{"arguments":{"n":[1,12345678901234567890123]}}}"#),
            Some(Inexact::Number {
                at: "/params/arguments/n/1".into(),
                literal: "12345678901234567890123".into()
            })
        );
    }

    #[test]
    fn a_key_twice_is_named_even_when_spelled_differently() {
        assert_eq!(
            inexact(r#"{"params":{"arguments":{"q":"a","\u0071":"b"}}}"#),
            Some(Inexact::DuplicateKey {
                at: "/params/arguments".into(),
                key: "q".into()
            })
        );
        assert_eq!(
            inexact(r#"{"a":{"q":1},"b":{"q":1}}"#),
            None,
            "one key in each of two objects"
        );
        let message = Inexact::DuplicateKey {
            at: "/a~1b".into(),
            key: "q".into(),
        }
        .to_string();
        assert!(message.contains("\"q\"") && message.contains("/a~1b"), "{message}");
    }

    #[test]
    fn the_top_level_method_and_id_are_read_as_written() {
        let body =
            br#" {"jsonrpc":"2.0", "id" : "x-1", "method":"tools\/call","params":{"name":"t","arguments":{"id":5}}}"#;
        let scanned = scan(body).unwrap();
        assert_eq!(scanned.method.as_deref(), Some("tools/call"));
        assert_eq!(scanned.id, Some(r#""x-1""#));
        assert_eq!(scanned.inexact, None);
        assert!(scan(b"{").is_none(), "not JSON: left to rmcp");
        assert_eq!(scan(b"[1, 2.5, true, null, \"s\\\"\"]").unwrap().inexact, None);
    }

    #[test]
    fn a_body_nested_past_the_parser_limit_is_left_unscanned_not_recursed_into() {
        // 1 M levels: the recursive scanner would overflow any thread's stack on it.
        // Well-formed (balanced), so only the depth stands between it and the scanner.
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let deep = format!("{}1{}", open.repeat(1_000_000), close.repeat(1_000_000));
            assert!(scan(deep.as_bytes()).is_none(), "{open}");
        }
        let fine = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(scan(fine.as_bytes()).unwrap().inexact, None);
    }
}
