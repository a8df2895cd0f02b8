//! The hints' wire form, read and checked whole before anything is applied: the body of
//! `POST /v1/agentrt/hints` and the two request headers. Every refusal names the field (as
//! `hints[3].kind`) or the header, what it expected and what it got, so a framework's author can
//! fix the call from the message alone.

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use crate::names::{check_name, NameFault};

/// Most hints one call may carry.
pub const MAX_HINTS_PER_CALL: usize = 64;
/// Largest body of `POST /v1/agentrt/hints`.
pub const MAX_HINTS_BODY_BYTES: usize = 16 << 10;
/// Deepest JSON nesting the body may have (the wire form needs 3).
pub const MAX_HINTS_DEPTH: usize = 8;
/// Longest `session`, `agent`, `tool`, `from_agent`, `to_agent` (a name's limit, as for
/// `x-agent-id`).
pub const MAX_NAME_BYTES: usize = crate::names::MAX_NAME_BYTES;
/// Longest `expected_ms`: a day.
pub const MAX_EXPECTED_MS: u64 = 86_400_000;
/// The header that closes a session with its request.
pub const SESSION_END_HEADER: &str = "x-agentrt-session-end";
/// The header that names the agent a graph or handoff runs next.
pub const NEXT_AGENT_HEADER: &str = "x-agentrt-next-agent";

/// What a paused session waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitFor {
    /// A tool, by name.
    Tool(String),
    /// A person.
    User,
}

/// One hint, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// The session is over.
    Closed {
        /// The session key, as requests name it.
        session: String,
    },
    /// The session paused.
    Wait {
        /// The session key.
        session: String,
        /// The agent that paused, if the framework said.
        agent: Option<String>,
        /// A tool or a person.
        wait: WaitFor,
        /// The framework's expected duration.
        expected_ms: Option<u64>,
    },
    /// The agent that runs next.
    Handoff {
        /// The session key.
        session: String,
        /// The agent handing over, if the framework said.
        from_agent: Option<String>,
        /// The agent that runs next.
        to_agent: String,
    },
}

impl Hint {
    /// The session key it names.
    pub fn session(&self) -> &str {
        match self {
            Hint::Closed { session } | Hint::Wait { session, .. } | Hint::Handoff { session, .. } => session,
        }
    }
}

/// Why a call's hints were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `malformed` or `too_large` (the label of `agentrt_hints_refused_total`).
    pub reason: &'static str,
    /// What is wrong and where, for a person.
    pub message: String,
}

fn malformed(message: String) -> Refusal {
    Refusal {
        reason: "malformed",
        message,
    }
}

/// The hints of a call's body, all checked; any fault refuses the whole call.
pub fn parse_body(body: &[u8]) -> Result<Vec<Hint>, Refusal> {
    if !agentrt_guards::json_shape::within_depth(body, MAX_HINTS_DEPTH) {
        return Err(malformed(format!(
            "the body nests deeper than {MAX_HINTS_DEPTH} levels; send {{\"hints\": [{{\"type\": …}}, …]}}"
        )));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("the body is not JSON ({e}); send {{\"hints\": [...]}}")))?;
    let Some(object) = value.as_object() else {
        return Err(malformed(format!(
            "the body must be a JSON object {{\"hints\": [...]}}, got {}",
            kind_of(&value)
        )));
    };
    if let Some(other) = object.keys().find(|k| *k != "hints") {
        return Err(malformed(format!("{other}: unknown field; the body has only `hints`")));
    }
    let hints = match object.get("hints") {
        Some(Value::Array(hints)) => hints,
        Some(other) => return Err(malformed(format!("hints: expected an array, got {}", kind_of(other)))),
        None => return Err(malformed("hints: missing; send {\"hints\": [...]}".into())),
    };
    if hints.len() > MAX_HINTS_PER_CALL {
        return Err(Refusal {
            reason: "too_large",
            message: format!(
                "hints: {} hints in one call, over the limit of {MAX_HINTS_PER_CALL}; send them in several calls",
                hints.len()
            ),
        });
    }
    hints
        .iter()
        .enumerate()
        .map(|(i, hint)| parse_hint(hint, &format!("hints[{i}]")).map_err(malformed))
        .collect()
}

fn parse_hint(hint: &Value, at: &str) -> Result<Hint, String> {
    let Some(fields) = hint.as_object() else {
        return Err(format!("{at}: expected an object, got {}", kind_of(hint)));
    };
    let kind = fields.get("type").ok_or_else(|| format!("{at}.type: missing"))?;
    let Some(kind) = kind.as_str() else {
        return Err(format!("{at}.type: expected a string, got {}", kind_of(kind)));
    };
    let allowed: &[&str] = match kind {
        "session_closed" => &["type", "session"],
        "wait" => &["type", "session", "agent", "kind", "tool", "expected_ms"],
        "handoff" => &["type", "session", "from_agent", "to_agent"],
        other => {
            return Err(format!(
                "{at}.type: expected \"session_closed\", \"wait\" or \"handoff\", got {other:?}"
            ))
        }
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "{at}.{unknown}: not a field of a {kind:?} hint (its fields: {})",
            allowed.join(", ")
        ));
    }
    let session = name(fields, at, "session")?.ok_or_else(|| format!("{at}.session: missing"))?;
    match kind {
        "session_closed" => Ok(Hint::Closed { session }),
        "wait" => parse_wait(fields, at, session),
        _ => Ok(Hint::Handoff {
            session,
            from_agent: name(fields, at, "from_agent")?,
            to_agent: name(fields, at, "to_agent")?.ok_or_else(|| format!("{at}.to_agent: missing"))?,
        }),
    }
}

fn parse_wait(fields: &Map<String, Value>, at: &str, session: String) -> Result<Hint, String> {
    let kind = fields.get("kind").ok_or_else(|| format!("{at}.kind: missing"))?;
    let tool = name(fields, at, "tool")?;
    let wait = match (kind.as_str(), tool) {
        (Some("tool"), Some(tool)) => WaitFor::Tool(tool),
        (Some("tool"), None) => return Err(format!("{at}.tool: missing (a tool wait names its tool)")),
        (Some("user"), None) => WaitFor::User,
        (Some("user"), Some(_)) => return Err(format!("{at}.tool: a user wait names no tool")),
        (Some(other), _) => return Err(format!("{at}.kind: expected \"tool\" or \"user\", got {other:?}")),
        (None, _) => {
            return Err(format!(
                "{at}.kind: expected \"tool\" or \"user\", got {}",
                kind_of(kind)
            ))
        }
    };
    let expected_ms = match fields.get("expected_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) if ms <= MAX_EXPECTED_MS => Some(ms),
            _ => {
                return Err(format!(
                    "{at}.expected_ms: expected an integer from 0 to {MAX_EXPECTED_MS} (milliseconds), got {v}"
                ))
            }
        },
    };
    Ok(Hint::Wait {
        session,
        agent: name(fields, at, "agent")?,
        wait,
        expected_ms,
    })
}

/// An optional name field: absent or null is `None`; otherwise a string of 1 to
/// [`MAX_NAME_BYTES`]. The names a hint stores or shows (agents, tools) follow the names' rule
/// ([`check_name`]: visible characters); a session key is only hashed, and needs only its length.
fn name(fields: &Map<String, Value>, at: &str, field: &str) -> Result<Option<String>, String> {
    match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let checked = match field {
                "session" if s.is_empty() => Err(NameFault::Empty),
                "session" if s.len() > MAX_NAME_BYTES => Err(NameFault::TooLong(s.len())),
                "session" => Ok(()),
                _ => check_name(s),
            };
            checked.map_err(|fault| format!("{at}.{field}: {fault}"))?;
            Ok(Some(s.clone()))
        }
        Some(other) => Err(format!("{at}.{field}: expected a string, got {}", kind_of(other))),
    }
}

/// What `value` is, for a refusal ("expected a string, got a number").
pub(super) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What a request says of its session's life: its headers, and its body's hint dialects
/// ([`super::dialects`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHints {
    /// `x-agentrt-session-end: closed` (or a dialect's closing): the session ends with this
    /// request's response.
    pub closed: bool,
    /// `x-agentrt-next-agent` (or a dialect's handoff): the agent that runs next.
    pub next_agent: Option<String>,
    /// Hints checked and counted that the policy contract has no event for (a retention intent,
    /// a priority, an expected output length), by kind.
    pub noted: Vec<&'static str>,
    /// Said by the body (a dialect) and not by the headers: the `source` they are counted under.
    pub in_body: bool,
}

impl RequestHints {
    /// Whether the request carries any hint.
    pub fn any(&self) -> bool {
        self.count() > 0
    }

    /// How many hints it carries (what it takes from the tenant's hint rate).
    pub fn count(&self) -> usize {
        usize::from(self.closed) + usize::from(self.next_agent.is_some()) + self.noted.len()
    }

    /// These (a request's headers' hints) with those of its `body`: a header's next agent wins.
    pub fn with_body(mut self, body: RequestHints) -> Self {
        self.in_body = !self.any() && body.any();
        self.closed |= body.closed;
        if self.next_agent.is_none() {
            self.next_agent = body.next_agent;
        }
        self.noted.extend(body.noted);
        self
    }
}

/// The hint headers of a request; a value they do not accept is refused, naming the header and
/// what it accepts.
pub fn request_hints(headers: &HeaderMap) -> Result<RequestHints, String> {
    let mut hints = RequestHints::default();
    if let Some(value) = headers.get(SESSION_END_HEADER) {
        match value.to_str().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("closed") => hints.closed = true,
            _ => {
                return Err(format!(
                    "{SESSION_END_HEADER}: expected \"closed\", got {:?}",
                    String::from_utf8_lossy(value.as_bytes())
                ))
            }
        }
    }
    if let Some(value) = headers.get(NEXT_AGENT_HEADER) {
        let name = value
            .to_str()
            .map(str::trim)
            .map_err(|_| format!("{NEXT_AGENT_HEADER}: expected an agent name in visible ASCII (as x-agent-id)"))?;
        check_name(name).map_err(|fault| format!("{NEXT_AGENT_HEADER}: the agent name is {fault}"))?;
        hints.next_agent = Some(name.to_string());
    }
    Ok(hints)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal(body: Value) -> Refusal {
        parse_body(body.to_string().as_bytes()).unwrap_err()
    }

    #[test]
    fn the_protocols_example_parses() {
        let body = json!({"hints": [
            {"type": "session_closed", "session": "S"},
            {"type": "wait", "session": "S", "agent": "researcher", "kind": "tool", "tool": "web_search", "expected_ms": 2000},
            {"type": "wait", "session": "S", "kind": "user"},
            {"type": "handoff", "session": "S", "from_agent": "planner", "to_agent": "coder"},
        ]});
        let hints = parse_body(body.to_string().as_bytes()).unwrap();
        assert_eq!(hints.len(), 4);
        assert_eq!(
            hints[1],
            Hint::Wait {
                session: "S".into(),
                agent: Some("researcher".into()),
                wait: WaitFor::Tool("web_search".into()),
                expected_ms: Some(2000)
            }
        );
        assert_eq!(
            hints[2],
            Hint::Wait {
                session: "S".into(),
                agent: None,
                wait: WaitFor::User,
                expected_ms: None
            }
        );
    }

    #[test]
    fn each_fault_is_named_by_its_field() {
        let bad_kind = refusal(json!({"hints": [{"type": "session_closed", "session": "S"},
            {"type": "wait", "session": "S", "kind": "user"}, {"type": "wait", "session": "S", "kind": "tool", "tool": "t"},
            {"type": "wait", "session": "S", "kind": "x"}]}));
        assert_eq!(
            bad_kind.message,
            "hints[3].kind: expected \"tool\" or \"user\", got \"x\""
        );
        assert_eq!(bad_kind.reason, "malformed");
        let cases = [
            (
                json!({"hints": [{"type": "closed", "session": "S"}]}),
                "hints[0].type: expected",
            ),
            (
                json!({"hints": [{"type": "session_closed"}]}),
                "hints[0].session: missing",
            ),
            (
                json!({"hints": [{"type": "session_closed", "session": "S", "sesion": 1}]}),
                "hints[0].sesion: not a field",
            ),
            (
                json!({"hints": [{"type": "wait", "session": "S", "kind": "tool"}]}),
                "hints[0].tool: missing",
            ),
            (
                json!({"hints": [{"type": "wait", "session": "S", "kind": "user", "expected_ms": -1}]}),
                "hints[0].expected_ms: expected an integer",
            ),
            (
                json!({"hints": [{"type": "handoff", "session": "S", "from_agent": "a"}]}),
                "hints[0].to_agent: missing",
            ),
            (
                json!({"hints": [{"type": "session_closed", "session": "x".repeat(257)}]}),
                "hints[0].session: 257 bytes, over the limit of 256",
            ),
            (
                json!({"hints": [{"type": "handoff", "session": "S", "to_agent": "evil\u{202e}txt"}]}),
                "hints[0].to_agent: holds U+202E",
            ),
            (
                json!({"hints": [{"type": "wait", "session": "S", "kind": "tool", "tool": "a\u{1b}[2J"}]}),
                "hints[0].tool: holds U+001B",
            ),
            (
                json!({"hints": [{"type": "session_closed", "session": ""}]}),
                "hints[0].session: empty",
            ),
            (json!({"hint": []}), "hint: unknown field"),
            (json!([1]), "the body must be a JSON object"),
        ];
        for (body, start) in cases {
            let got = refusal(body.clone()).message;
            assert!(got.starts_with(start), "{body}: {got}");
        }
        let many: Vec<Value> = (0..65)
            .map(|_| json!({"type": "session_closed", "session": "S"}))
            .collect();
        let too_many = refusal(json!({ "hints": many }));
        assert_eq!(too_many.reason, "too_large");
        assert!(too_many.message.contains("65 hints"), "{}", too_many.message);
        let deep = format!("{}{}", "[".repeat(20), "]".repeat(20));
        assert!(parse_body(deep.as_bytes())
            .unwrap_err()
            .message
            .contains("nests deeper"));
    }

    #[test]
    fn headers_take_only_what_they_accept() {
        let mut h = HeaderMap::new();
        assert!(!request_hints(&h).unwrap().any());
        h.insert(SESSION_END_HEADER, "closed".parse().unwrap());
        h.insert(NEXT_AGENT_HEADER, "coder".parse().unwrap());
        assert_eq!(
            request_hints(&h).unwrap(),
            RequestHints {
                closed: true,
                next_agent: Some("coder".into()),
                ..RequestHints::default()
            }
        );
        h.insert(SESSION_END_HEADER, "done".parse().unwrap());
        assert_eq!(
            request_hints(&h).unwrap_err(),
            "x-agentrt-session-end: expected \"closed\", got \"done\""
        );
        h.remove(SESSION_END_HEADER);
        h.insert(NEXT_AGENT_HEADER, "x".repeat(300).parse().unwrap());
        assert!(request_hints(&h).unwrap_err().starts_with("x-agentrt-next-agent:"));
    }
}
