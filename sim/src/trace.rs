//! The trace format: JSON Lines, one request per line.
//!
//! ```json
//! {"session": "gsm8k-17", "agent": "verifier", "after_ms": 40.0,
//!  "prompt": [{"seg": "sys/verifier", "tokens": 850}, {"seg": "gsm8k-17/question", "tokens": 120}],
//!  "output_tokens": 180}
//! ```
//!
//! - Requests of one session are issued in file order; each is issued `after_ms` after the previous
//!   request of the same session completed (the first: `after_ms` after the trace starts).
//! - A segment's token ids are a function of its `seg` name and its length ([`crate::tokens`]).
//! - An agent's *anchor* is the leading run of `sys/*` and `tools/*` segments of its prompt.
//! - An optional `"tool_call": true` says the call's answer ended in a tool call (the model's
//!   output asks for a tool: OpenAI's `finish_reason: "tool_calls"`, Anthropic's `stop_reason:
//!   "tool_use"`), so the agent's next call comes when the tool returns. The replay tells the
//!   policy (`tool-call`) when the answer is complete; absent = false.
//! - An optional `"hints"` says what the agent framework knew of the session at this request
//!   (issue 35's lifecycle hints): `"closes": true` on a session's last request (the framework
//!   closed it once the answer came), and `"wait": {"kind": "tool"|"user", "tool": "NAME",
//!   "expected_ms": N}` for what the session waits for after this request's answer (`tool` and
//!   `expected_ms` optional). The replay turns them into `session-end` (reason `closed`) and
//!   `session-wait` events only under `sim run --hints closed|all`; absent = no hints.
//! - An optional `"tenant"` names who sent the request when one engine serves several tenants
//!   (absent: `default`). Agents and sessions are the tenant's own: `planner` in two tenants is two
//!   agents. Each named tenant's blocks are salted (vLLM's `cache_salt`), so tenants never share
//!   cached blocks.
//!
//! Reading is strict — any malformed line is an error naming the line number and the field — so
//! that a trace from elsewhere fails loudly instead of replaying something else. Unknown extra
//! fields are allowed (a trace may carry more than the simulator needs).

use std::fmt;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// One named piece of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub seg: String,
    pub tokens: u32,
}

impl Segment {
    pub fn new(seg: impl Into<String>, tokens: u32) -> Self {
        Self {
            seg: seg.into(),
            tokens,
        }
    }

    /// Anchor segments (system prompt, tool definitions) start with these prefixes.
    pub fn is_anchor(&self) -> bool {
        self.seg.starts_with("sys/") || self.seg.starts_with("tools/")
    }
}

/// What a session waits for after a request's answer (`hints.wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitKind {
    Tool,
    User,
}

/// A wait hint: its kind, the tool's name when a tool is awaited and known, and the duration the
/// framework expected (ms), when it gave one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitHint {
    pub kind: WaitKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_ms: Option<f64>,
}

/// A request's lifecycle hints (the trace's `hints`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Hints {
    /// The session is over once this request's answer is complete.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub closes: bool,
    /// What the session waits for after the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitHint>,
}

impl Hints {
    pub fn is_empty(&self) -> bool {
        !self.closes && self.wait.is_none()
    }
}

/// The tenant of a request without a `tenant` field.
pub const DEFAULT_TENANT: &str = "default";

/// One request of a trace. Field order is the format's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceRequest {
    /// Who sent it, when the trace mixes tenants; `None` = [`DEFAULT_TENANT`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub session: String,
    pub agent: String,
    pub after_ms: f64,
    pub prompt: Vec<Segment>,
    pub output_tokens: u32,
    /// The answer ended in a tool call (see the module doc); `false` is not written.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tool_call: bool,
    /// Lifecycle hints (see the module doc); empty ones are not written.
    #[serde(skip_serializing_if = "Hints::is_empty")]
    pub hints: Hints,
}

impl TraceRequest {
    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
    }

    pub fn prompt_tokens(&self) -> u32 {
        self.prompt.iter().map(|s| s.tokens).sum()
    }

    /// How many leading segments form the agent's anchor.
    pub fn anchor_len(&self) -> usize {
        self.prompt.iter().take_while(|s| s.is_anchor()).count()
    }
}

/// A whole trace, in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub requests: Vec<TraceRequest>,
}

/// A malformed line: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// The offending field as a path (`prompt[2].tokens`), or empty for the line as a whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "trace line {}: {}", self.line, self.message)
        } else {
            write!(f, "trace line {}: field `{}`: {}", self.line, self.field, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

fn describe(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}…", &s[..s.floor_char_boundary(40)])
    } else {
        s
    }
}

struct LineParser {
    line: usize,
}

impl LineParser {
    fn err(&self, field: &str, message: impl Into<String>) -> TraceError {
        TraceError {
            line: self.line,
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn field<'a>(&self, obj: &'a serde_json::Map<String, Value>, name: &str) -> Result<&'a Value, TraceError> {
        obj.get(name).ok_or_else(|| self.err(name, "missing required field"))
    }

    fn string(&self, v: &Value, field: &str) -> Result<String, TraceError> {
        match v.as_str() {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            Some(_) => Err(self.err(field, "must not be empty")),
            None => Err(self.err(field, format!("expected a string, got {}", describe(v)))),
        }
    }

    fn positive_u32(&self, v: &Value, field: &str) -> Result<u32, TraceError> {
        match v.as_u64() {
            Some(n) if n >= 1 && n <= u64::from(u32::MAX) => Ok(n as u32),
            _ => Err(self.err(field, format!("expected a positive integer, got {}", describe(v)))),
        }
    }

    fn parse(&self, text: &str) -> Result<TraceRequest, TraceError> {
        let value: Value = serde_json::from_str(text).map_err(|e| self.err("", format!("not valid JSON: {e}")))?;
        let obj = value
            .as_object()
            .ok_or_else(|| self.err("", format!("expected a JSON object, got {}", describe(&value))))?;
        let tenant = obj.get("tenant").map(|t| self.string(t, "tenant")).transpose()?;
        let session = self.string(self.field(obj, "session")?, "session")?;
        let agent = self.string(self.field(obj, "agent")?, "agent")?;
        let after = self.field(obj, "after_ms")?;
        let after_ms = match after.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => x,
            _ => {
                return Err(self.err(
                    "after_ms",
                    format!("expected a non-negative number, got {}", describe(after)),
                ))
            }
        };
        let prompt_value = self.field(obj, "prompt")?;
        let items = prompt_value.as_array().ok_or_else(|| {
            self.err(
                "prompt",
                format!("expected an array of segments, got {}", describe(prompt_value)),
            )
        })?;
        if items.is_empty() {
            return Err(self.err("prompt", "must hold at least one segment"));
        }
        let mut prompt = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("prompt[{i}]");
            let seg = item
                .as_object()
                .ok_or_else(|| self.err(&path, format!("expected a segment object, got {}", describe(item))))?;
            let name_path = format!("{path}.seg");
            let name = self.string(
                seg.get("seg")
                    .ok_or_else(|| self.err(&name_path, "missing required field"))?,
                &name_path,
            )?;
            let tokens_path = format!("{path}.tokens");
            let tokens = self.positive_u32(
                seg.get("tokens")
                    .ok_or_else(|| self.err(&tokens_path, "missing required field"))?,
                &tokens_path,
            )?;
            prompt.push(Segment { seg: name, tokens });
        }
        let output_tokens = self.positive_u32(self.field(obj, "output_tokens")?, "output_tokens")?;
        let tool_call = match obj.get("tool_call") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err("tool_call", format!("expected true or false, got {}", describe(v))))?,
        };
        let hints = match obj.get("hints") {
            None => Hints::default(),
            Some(v) => self.hints(v)?,
        };
        Ok(TraceRequest {
            tenant,
            session,
            agent,
            after_ms,
            prompt,
            output_tokens,
            tool_call,
            hints,
        })
    }

    fn hints(&self, v: &Value) -> Result<Hints, TraceError> {
        let obj = v
            .as_object()
            .ok_or_else(|| self.err("hints", format!("expected an object, got {}", describe(v))))?;
        let closes = match obj.get("closes") {
            None => false,
            Some(c) => c
                .as_bool()
                .ok_or_else(|| self.err("hints.closes", format!("expected true or false, got {}", describe(c))))?,
        };
        let wait = obj.get("wait").map(|w| self.wait(w)).transpose()?;
        Ok(Hints { closes, wait })
    }

    fn wait(&self, v: &Value) -> Result<WaitHint, TraceError> {
        let obj = v
            .as_object()
            .ok_or_else(|| self.err("hints.wait", format!("expected an object, got {}", describe(v))))?;
        let kind = match obj.get("kind").and_then(Value::as_str) {
            Some("tool") => WaitKind::Tool,
            Some("user") => WaitKind::User,
            _ => {
                let got = obj.get("kind").map_or("nothing".to_string(), describe);
                return Err(self.err("hints.wait.kind", format!("expected \"tool\" or \"user\", got {got}")));
            }
        };
        let tool = obj.get("tool").map(|t| self.string(t, "hints.wait.tool")).transpose()?;
        let expected_ms = match obj.get("expected_ms") {
            None => None,
            Some(e) => match e.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => Some(x),
                _ => {
                    return Err(self.err(
                        "hints.wait.expected_ms",
                        format!("expected a non-negative number, got {}", describe(e)),
                    ))
                }
            },
        };
        Ok(WaitHint {
            kind,
            tool,
            expected_ms,
        })
    }
}

impl Trace {
    /// Parse a whole trace. Blank lines are skipped; anything else must be a valid request.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        Self::read(text.as_bytes())
    }

    pub fn read(reader: impl BufRead) -> Result<Trace, TraceError> {
        let mut requests = Vec::new();
        for (i, line) in reader.lines().enumerate() {
            let parser = LineParser { line: i + 1 };
            let line = line.map_err(|e| parser.err("", format!("cannot read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            requests.push(parser.parse(&line)?);
        }
        if requests.is_empty() {
            return Err(TraceError {
                line: 0,
                field: String::new(),
                message: "the trace holds no requests".to_string(),
            });
        }
        Ok(Trace { requests })
    }

    pub fn load(path: &Path) -> anyhow::Result<Trace> {
        let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("opening trace {}: {e}", path.display()))?;
        Trace::read(std::io::BufReader::new(file)).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn write(&self, mut out: impl Write) -> std::io::Result<()> {
        for r in &self.requests {
            serde_json::to_writer(&mut out, r)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let file = std::fs::File::create(path).map_err(|e| anyhow::anyhow!("creating {}: {e}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        self.write(&mut w)?;
        w.flush()?;
        Ok(())
    }

    pub fn sessions(&self) -> usize {
        let mut names: Vec<&str> = self.requests.iter().map(|r| r.session.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"session": "gsm8k-17", "agent": "verifier", "after_ms": 40.0, "prompt": [{"seg": "sys/verifier", "tokens": 850}, {"seg": "tools/calc", "tokens": 400}, {"seg": "gsm8k-17/question", "tokens": 120}, {"seg": "gsm8k-17/solver-1", "tokens": 210}], "output_tokens": 180}"#;

    #[test]
    fn reads_the_documented_example_and_round_trips() {
        let trace = Trace::parse(&format!("{GOOD}\n\n{GOOD}\n")).unwrap();
        assert_eq!(trace.requests.len(), 2);
        let r = &trace.requests[0];
        assert_eq!((r.session.as_str(), r.agent.as_str()), ("gsm8k-17", "verifier"));
        assert_eq!(r.after_ms, 40.0);
        assert_eq!(r.prompt_tokens(), 1580);
        assert_eq!(r.anchor_len(), 2);
        assert_eq!(r.output_tokens, 180);
        let mut bytes = Vec::new();
        trace.write(&mut bytes).unwrap();
        assert_eq!(Trace::parse(std::str::from_utf8(&bytes).unwrap()).unwrap(), trace);
    }

    fn error_of(line2: &str) -> TraceError {
        Trace::parse(&format!("{GOOD}\n{line2}\n")).unwrap_err()
    }

    #[test]
    fn malformed_lines_name_the_line_and_the_field() {
        let cases = [
            (
                r#"{"session": "s", "agent": "a", "after_ms": 0, "prompt": [{"seg": "x", "tokens": -4}], "output_tokens": 1}"#,
                "prompt[0].tokens",
            ),
            (
                r#"{"session": "s", "agent": "a", "after_ms": 0, "prompt": [{"tokens": 4}], "output_tokens": 1}"#,
                "prompt[0].seg",
            ),
            (
                r#"{"session": "s", "agent": "a", "after_ms": -1, "prompt": [{"seg": "x", "tokens": 4}], "output_tokens": 1}"#,
                "after_ms",
            ),
            (
                r#"{"session": "s", "agent": "a", "after_ms": 0, "prompt": [{"seg": "x", "tokens": 4}]}"#,
                "output_tokens",
            ),
            (
                r#"{"session": 3, "agent": "a", "after_ms": 0, "prompt": [{"seg": "x", "tokens": 4}], "output_tokens": 1}"#,
                "session",
            ),
            (
                r#"{"session": "s", "after_ms": 0, "prompt": [{"seg": "x", "tokens": 4}], "output_tokens": 1}"#,
                "agent",
            ),
            (
                r#"{"session": "s", "agent": "a", "after_ms": 0, "prompt": [], "output_tokens": 1}"#,
                "prompt",
            ),
            (
                r#"{"session": "s", "agent": "a", "after_ms": 0, "prompt": "sys/x", "output_tokens": 1}"#,
                "prompt",
            ),
            (
                r#"{"session": "s", "agent": "a", "after_ms": 0, "prompt": [{"seg": "x", "tokens": 4}], "output_tokens": 0}"#,
                "output_tokens",
            ),
        ];
        for (line, field) in cases {
            let e = error_of(line);
            assert_eq!(e.line, 2, "{line}");
            assert_eq!(e.field, field, "{line}");
            let shown = e.to_string();
            assert!(shown.contains("line 2") && shown.contains(field), "{shown}");
        }
        let e = error_of("{not json");
        assert_eq!((e.line, e.field.as_str()), (2, ""));
        assert!(e.to_string().contains("not valid JSON"));
        assert!(error_of("[1, 2]").to_string().contains("expected a JSON object"));
        assert!(Trace::parse("\n\n").unwrap_err().message.contains("no requests"));
        let e = error_of(
            r#"{"tenant": 7, "session": "s", "agent": "a", "after_ms": 0, "prompt": [{"seg": "x", "tokens": 4}], "output_tokens": 1}"#,
        );
        assert_eq!(e.field, "tenant");
    }

    #[test]
    fn hints_are_read_strictly_and_round_trip() {
        let closing = GOOD.replacen('{', r#"{"hints": {"closes": true}, "#, 1);
        let waiting = GOOD.replacen(
            '{',
            r#"{"hints": {"wait": {"kind": "tool", "tool": "bash", "expected_ms": 1500}}, "#,
            1,
        );
        let trace = Trace::parse(&format!("{GOOD}\n{closing}\n{waiting}\n")).unwrap();
        assert!(trace.requests[0].hints.is_empty());
        assert!(trace.requests[1].hints.closes && trace.requests[1].hints.wait.is_none());
        let wait = trace.requests[2].hints.wait.as_ref().unwrap();
        assert_eq!(
            (wait.kind, wait.tool.as_deref(), wait.expected_ms),
            (WaitKind::Tool, Some("bash"), Some(1500.0))
        );
        let mut bytes = Vec::new();
        trace.write(&mut bytes).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            !text.lines().next().unwrap().contains("hints"),
            "no hints stay unwritten"
        );
        assert_eq!(Trace::parse(&text).unwrap(), trace);
        let bad = GOOD.replacen('{', r#"{"hints": {"wait": {"kind": "nap"}}, "#, 1);
        assert_eq!(error_of(&bad).field, "hints.wait.kind");
        let bad = GOOD.replacen('{', r#"{"hints": {"closes": "yes"}, "#, 1);
        assert_eq!(error_of(&bad).field, "hints.closes");
    }

    #[test]
    fn a_request_may_name_its_tenant_and_defaults_to_default() {
        let tagged = GOOD.replacen('{', r#"{"tenant": "team-a", "#, 1);
        let trace = Trace::parse(&format!("{GOOD}\n{tagged}\n")).unwrap();
        assert_eq!(trace.requests[0].tenant(), DEFAULT_TENANT);
        assert_eq!(trace.requests[1].tenant(), "team-a");
        let mut bytes = Vec::new();
        trace.write(&mut bytes).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(!text.lines().next().unwrap().contains("tenant"), "absent stays absent");
        assert_eq!(Trace::parse(&text).unwrap(), trace);
    }
}
