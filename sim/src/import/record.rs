//! Reading one source record strictly: a missing or mistyped field is an error naming the file,
//! the record (line number, or path inside a JSON document) and the field, never a silent default.

use std::path::Path;

use anyhow::{anyhow, Context};
use serde_json::{Map, Value};

/// One JSON object of a source file, with where it came from.
pub struct Record<'a> {
    obj: &'a Map<String, Value>,
    /// `FILE line N` or `FILE requests[3]`: prefixed to every error.
    at: String,
}

fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}…", &s[..s.floor_char_boundary(40)])
    } else {
        s
    }
}

impl<'a> Record<'a> {
    pub fn new(value: &'a Value, at: String) -> anyhow::Result<Self> {
        let obj = value
            .as_object()
            .ok_or_else(|| anyhow!("{at}: expected a JSON object, got {}", shown(value)))?;
        Ok(Self { obj, at })
    }

    pub fn at(&self) -> &str {
        &self.at
    }

    pub fn err(&self, field: &str, what: impl std::fmt::Display) -> anyhow::Error {
        anyhow!("{}: field `{field}`: {what}", self.at)
    }

    pub fn get(&self, field: &str) -> Option<&'a Value> {
        self.obj.get(field)
    }

    fn field(&self, field: &str) -> anyhow::Result<&'a Value> {
        self.obj.get(field).ok_or_else(|| self.err(field, "missing"))
    }

    /// A non-negative integer that fits in `u32`.
    pub fn u32(&self, field: &str) -> anyhow::Result<u32> {
        let v = self.field(field)?;
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| self.err(field, format!("expected a non-negative integer, got {}", shown(v))))
    }

    pub fn i64(&self, field: &str) -> anyhow::Result<i64> {
        let v = self.field(field)?;
        v.as_i64()
            .ok_or_else(|| self.err(field, format!("expected an integer, got {}", shown(v))))
    }

    /// A finite, non-negative number.
    pub fn time(&self, field: &str) -> anyhow::Result<f64> {
        let v = self.field(field)?;
        v.as_f64()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| self.err(field, format!("expected a non-negative number, got {}", shown(v))))
    }

    /// The same, or `None` when the field is absent or null.
    pub fn time_opt(&self, field: &str) -> anyhow::Result<Option<f64>> {
        match self.obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.time(field).map(Some),
        }
    }

    pub fn str_opt(&self, field: &str) -> anyhow::Result<Option<&'a str>> {
        match self.obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected a string, got {}", shown(v)))),
        }
    }

    /// An array of block ids (non-negative integers).
    pub fn ids(&self, field: &str) -> anyhow::Result<Vec<u64>> {
        let v = self.field(field)?;
        let items = v
            .as_array()
            .ok_or_else(|| self.err(field, format!("expected an array of block ids, got {}", shown(v))))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_u64().ok_or_else(|| {
                    self.err(
                        &format!("{field}[{i}]"),
                        format!("expected a block id, got {}", shown(x)),
                    )
                })
            })
            .collect()
    }
}

/// Every non-blank line of a JSON Lines file, parsed, with its 1-based line number.
pub fn read_jsonl(path: &Path) -> anyhow::Result<Vec<(usize, Value)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line)
            .map_err(|e| anyhow!("{} line {}: not valid JSON: {e}", path.display(), i + 1))?;
        out.push((i + 1, value));
    }
    anyhow::ensure!(!out.is_empty(), "{}: no records", path.display());
    Ok(out)
}
