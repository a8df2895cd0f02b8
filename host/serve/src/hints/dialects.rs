//! The field's hint dialects on a model request's body, read into agentrt's lifecycle hints and
//! taken out of the body before it goes upstream (docs/agents.md, "Hint dialects"):
//!
//! - vLLM's `kv_hints` envelope (`KvHintsEnvelope {protocol_version, message_id, actions}`, each
//!   action `{action_id, action_type, action_version, payload}`): the actions agentrt reads are
//!   [`CLOSE_ACTION`] (the session ends with this request), [`HANDOFF_ACTION`] (`payload.to_agent`
//!   runs next), [`RETAIN_ACTION`] (a retention intent, `payload.priority` 0–100) and
//!   [`PRIORITY_ACTION`] (`payload.priority` −100–100). Any other action is refused: the pinned
//!   vLLM's HTTP server reads no `kv_hints`, so it would be dropped unseen.
//! - Dynamo's `nvext.session_control` (`{session_id, action: "open" | "close", timeout}`: the
//!   session's name, and its end) and `nvext.agent_hints` (`priority`, `osl`,
//!   `speculative_prefill`, `latency_sensitivity`). `nvext` is Dynamo's frontend's, not an
//!   engine's: it is removed whole.
//! - ThunderAgent's `program_id`, in the body or in `extra_body`: the session's name.
//!
//! Retention, priority and the other scheduling hints have no event in the policy contract: they
//! are checked and counted (`outcome="no_event"`), never passed to the engine (a client's
//! priority would put its tenant ahead of every other). Bounds are the endpoint's: at most
//! [`MAX_HINTS_PER_CALL`] actions, names by the names' rule. Every fault names its field, as
//! `kv_hints.actions[2].payload.priority`.

use serde_json::{Map, Value};

use super::parse::{
    kind_of, Hint, Refusal, RequestHints, MAX_EXPECTED_MS, MAX_HINTS_DEPTH, MAX_HINTS_PER_CALL, MAX_NAME_BYTES,
};
use crate::names::check_name;

/// The top-level body fields the dialects take out (ThunderAgent's `extra_body.program_id` too).
pub const FIELDS: [&str; 3] = ["kv_hints", "nvext", "program_id"];

/// The envelope action that closes the request's session when its response ends.
pub const CLOSE_ACTION: &str = "agentrt.session_closed";
/// The envelope action that names the agent that runs next (`payload.to_agent`).
pub const HANDOFF_ACTION: &str = "agentrt.handoff";
/// The envelope action of a retention intent (`payload.priority` 0–100, `payload.duration_ms`).
pub const RETAIN_ACTION: &str = "kv.retain";
/// The envelope action of a request priority (`payload.priority`, −100 to 100).
pub const PRIORITY_ACTION: &str = "agentrt.priority";

/// What a body's dialects said: lifecycle hints for the request, and the session's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyHints {
    /// The hints, applied when the request's response ends, as a header's are.
    pub hints: RequestHints,
    /// The session named by `nvext.session_control.session_id` or `program_id`: the session of
    /// the request when neither `x-session-id` nor the body's `session_id` names one.
    pub session_key: Option<String>,
}

/// Read and remove the dialects' fields of `body`; a fault names its field and what it expects.
pub fn take_body_hints(body: &mut Map<String, Value>) -> Result<BodyHints, String> {
    let mut found = BodyHints::default();
    if let Some(envelope) = body.remove("kv_hints").filter(|v| !v.is_null()) {
        read_envelope(&envelope, &mut found.hints)?;
    }
    if let Some(nvext) = body.remove("nvext").filter(|v| !v.is_null()) {
        read_nvext(&nvext, &mut found)?;
    }
    let in_extra_body = match body.get_mut("extra_body") {
        Some(Value::Object(extra)) => {
            let id = extra.remove("program_id");
            if extra.is_empty() {
                body.remove("extra_body");
            }
            id
        }
        _ => None,
    };
    for (field, id) in [
        ("program_id", body.remove("program_id")),
        ("extra_body.program_id", in_extra_body),
    ] {
        if let Some(id) = id.filter(|v| !v.is_null()) {
            let key = program_id(&id).map_err(|e| format!("{field}: {e}"))?;
            found.session_key.get_or_insert(key);
        }
    }
    Ok(found)
}

fn read_envelope(envelope: &Value, hints: &mut RequestHints) -> Result<(), String> {
    let fields = object(envelope, "kv_hints")?;
    only(
        fields,
        "kv_hints",
        &["protocol_version", "message_id", "actions"],
        "vLLM's KvHintsEnvelope",
    )?;
    for field in ["protocol_version", "message_id"] {
        text(fields, "kv_hints", field)?;
    }
    let actions = match fields.get("actions") {
        Some(Value::Array(actions)) => actions,
        Some(other) => return Err(format!("kv_hints.actions: expected an array, got {}", kind_of(other))),
        None => return Err("kv_hints.actions: missing".into()),
    };
    if actions.len() > MAX_HINTS_PER_CALL {
        return Err(format!(
            "kv_hints.actions: {} actions, over the limit of {MAX_HINTS_PER_CALL}",
            actions.len()
        ));
    }
    for (i, action) in actions.iter().enumerate() {
        read_action(action, &format!("kv_hints.actions[{i}]"), hints)?;
    }
    Ok(())
}

fn read_action(action: &Value, at: &str, hints: &mut RequestHints) -> Result<(), String> {
    let fields = object(action, at)?;
    let known = ["action_id", "action_type", "action_version", "payload"];
    only(fields, at, &known, "vLLM's KvHintAction")?;
    for field in ["action_id", "action_version"] {
        text(fields, at, field)?;
    }
    let action_type = text(fields, at, "action_type")?;
    let payload_at = format!("{at}.payload");
    let payload = object(fields.get("payload").unwrap_or(&Value::Null), &payload_at)?;
    match action_type {
        CLOSE_ACTION => {
            only(payload, &payload_at, &[], CLOSE_ACTION)?;
            hints.closed = true;
        }
        HANDOFF_ACTION => {
            only(payload, &payload_at, &["to_agent"], HANDOFF_ACTION)?;
            let to = text(payload, &payload_at, "to_agent")?;
            check_name(to).map_err(|fault| format!("{payload_at}.to_agent: {fault}"))?;
            hints.next_agent = Some(to.to_string());
        }
        RETAIN_ACTION => {
            only(payload, &payload_at, &["priority", "duration_ms"], RETAIN_ACTION)?;
            integer(payload, &payload_at, "priority", 0, 100)?.ok_or(format!("{payload_at}.priority: missing"))?;
            integer(payload, &payload_at, "duration_ms", 0, MAX_EXPECTED_MS as i64)?;
            hints.noted.push("retain");
        }
        PRIORITY_ACTION => {
            only(payload, &payload_at, &["priority"], PRIORITY_ACTION)?;
            integer(payload, &payload_at, "priority", -100, 100)?.ok_or(format!("{payload_at}.priority: missing"))?;
            hints.noted.push("priority");
        }
        other => {
            return Err(format!(
                "{at}.action_type: agentrt reads {CLOSE_ACTION:?}, {HANDOFF_ACTION:?}, {RETAIN_ACTION:?} and \
                 {PRIORITY_ACTION:?}, got {other:?}; the engine behind agentrt does not receive the envelope"
            ))
        }
    }
    Ok(())
}

fn read_nvext(nvext: &Value, found: &mut BodyHints) -> Result<(), String> {
    let fields = object(nvext, "nvext")?;
    if let Some(control) = fields.get("session_control").filter(|v| !v.is_null()) {
        let at = "nvext.session_control";
        let control = object(control, at)?;
        only(
            control,
            at,
            &["session_id", "action", "timeout"],
            "Dynamo's session_control",
        )?;
        let session = text(control, at, "session_id")?;
        found.session_key = Some(session.to_string());
        match control.get("action") {
            None | Some(Value::Null) => {}
            Some(Value::String(a)) if a == "open" => {}
            Some(Value::String(a)) if a == "close" => found.hints.closed = true,
            Some(other) => return Err(format!("{at}.action: expected \"open\" or \"close\", got {other}")),
        }
        integer(control, at, "timeout", 0, 86_400)?;
    }
    if let Some(agent_hints) = fields.get("agent_hints").filter(|v| !v.is_null()) {
        let at = "nvext.agent_hints";
        let known = ["priority", "osl", "speculative_prefill", "latency_sensitivity"];
        let agent_hints = object(agent_hints, at)?;
        only(agent_hints, at, &known, "Dynamo's agent_hints")?;
        if integer(agent_hints, at, "priority", i32::MIN.into(), i32::MAX.into())?.is_some() {
            found.hints.noted.push("priority");
        }
        if integer(agent_hints, at, "osl", 0, u32::MAX.into())?.is_some() {
            found.hints.noted.push("osl");
        }
        match agent_hints.get("speculative_prefill") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(_)) => found.hints.noted.push("speculative_prefill"),
            Some(other) => return Err(format!("{at}.speculative_prefill: expected a boolean, got {other}")),
        }
        match agent_hints.get("latency_sensitivity") {
            None | Some(Value::Null) => {}
            Some(v) if v.as_f64().is_some_and(|s| s >= 0.0) => found.hints.noted.push("priority"),
            Some(other) => {
                return Err(format!(
                    "{at}.latency_sensitivity: expected a number of seconds, 0 or more, got {other}"
                ))
            }
        }
    }
    Ok(())
}

/// The body of ThunderAgent's `POST /programs/release`, `{"program_id": ...}`: the closing of that
/// session.
pub fn parse_release(body: &[u8]) -> Result<Hint, Refusal> {
    let malformed = |message: String| Refusal {
        reason: "malformed",
        message,
    };
    let usage = "send {\"program_id\": \"...\"}";
    if !agentrt_guards::json_shape::within_depth(body, MAX_HINTS_DEPTH) {
        return Err(malformed(format!(
            "the body nests deeper than {MAX_HINTS_DEPTH} levels; {usage}"
        )));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| malformed(format!("the body is not JSON ({e}); {usage}")))?;
    let fields = object(&value, "the body").map_err(|e| malformed(format!("{e}; {usage}")))?;
    only(fields, "the body", &["program_id"], "a release").map_err(malformed)?;
    let id = fields
        .get("program_id")
        .filter(|v| !v.is_null())
        .ok_or_else(|| malformed(format!("program_id: missing; {usage}")))?;
    let session = program_id(id).map_err(|e| malformed(format!("program_id: {e}")))?;
    Ok(Hint::Closed { session })
}

/// ThunderAgent's `program_id`: a string, or a number (ThunderAgent takes its text).
fn program_id(id: &Value) -> Result<String, String> {
    let key = match id {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("expected a string, got {}", kind_of(other))),
    };
    session_name(&key)?;
    Ok(key)
}

/// A session's name: only hashed, so it needs only its length (as a hint's `session`).
fn session_name(key: &str) -> Result<(), String> {
    match key.len() {
        0 => Err("empty".into()),
        n if n > MAX_NAME_BYTES => Err(format!("{n} bytes, over the limit of {MAX_NAME_BYTES}")),
        _ => Ok(()),
    }
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{at}: expected an object, got {}", kind_of(value)))
}

/// Refuse a field of `fields` not in `known`, naming what `what` has.
fn only(fields: &Map<String, Value>, at: &str, known: &[&str], what: &str) -> Result<(), String> {
    match fields.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(unknown) if known.is_empty() => Err(format!("{at}.{unknown}: {what} takes no fields")),
        Some(unknown) => Err(format!(
            "{at}.{unknown}: not a field of {what} (its fields: {})",
            known.join(", ")
        )),
    }
}

/// A string field of 1 to [`MAX_NAME_BYTES`] bytes.
fn text<'a>(fields: &'a Map<String, Value>, at: &str, field: &str) -> Result<&'a str, String> {
    match fields.get(field) {
        Some(Value::String(s)) => session_name(s).map(|()| s.as_str()),
        Some(other) => Err(format!("expected a string, got {}", kind_of(other))),
        None => Err("missing".into()),
    }
    .map_err(|e| format!("{at}.{field}: {e}"))
}

/// An optional integer field from `low` to `high`.
fn integer(fields: &Map<String, Value>, at: &str, field: &str, low: i64, high: i64) -> Result<Option<i64>, String> {
    match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if (low..=high).contains(&n) => Ok(Some(n)),
            _ => Err(format!(
                "{at}.{field}: expected an integer from {low} to {high}, got {v}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn take(body: Value) -> (Result<BodyHints, String>, Value) {
        let mut map = body.as_object().unwrap().clone();
        let found = take_body_hints(&mut map);
        (found, Value::Object(map))
    }

    fn envelope(actions: Value) -> Value {
        json!({"model": "m", "kv_hints": {"protocol_version": "0.1", "message_id": "m-1", "actions": actions}})
    }

    fn action(action_type: &str, payload: Value) -> Value {
        json!({"action_id": "a", "action_type": action_type, "action_version": "1", "payload": payload})
    }

    #[test]
    fn each_dialect_is_read_and_taken_out_of_the_body() {
        let (found, rest) = take(envelope(json!([
            action(CLOSE_ACTION, json!({})),
            action(HANDOFF_ACTION, json!({"to_agent": "coder"})),
            action(RETAIN_ACTION, json!({"priority": 80, "duration_ms": 5000})),
        ])));
        let found = found.unwrap();
        assert!(found.hints.closed);
        assert_eq!(found.hints.next_agent.as_deref(), Some("coder"));
        assert_eq!(found.hints.noted, vec!["retain"]);
        assert_eq!(rest, json!({"model": "m"}));

        let dynamo = json!({"model": "m", "nvext": {
            "session_control": {"session_id": "sub-1", "action": "close"},
            "agent_hints": {"priority": 5, "osl": 512, "speculative_prefill": true}}});
        let (found, rest) = take(dynamo);
        let found = found.unwrap();
        assert_eq!(
            (found.hints.closed, found.session_key.as_deref()),
            (true, Some("sub-1"))
        );
        assert_eq!(found.hints.noted, vec!["priority", "osl", "speculative_prefill"]);
        assert_eq!(rest, json!({"model": "m"}));

        let (found, rest) = take(json!({"model": "m", "extra_body": {"program_id": "swe-7"}}));
        assert_eq!(found.unwrap().session_key.as_deref(), Some("swe-7"));
        assert_eq!(rest, json!({"model": "m"}));
        let (found, rest) = take(json!({"program_id": 42, "extra_body": {"program_id": "x", "docker_ids": []}}));
        assert_eq!(found.unwrap().session_key.as_deref(), Some("42"), "the body's own wins");
        assert_eq!(rest, json!({"extra_body": {"docker_ids": []}}));
    }

    #[test]
    fn each_fault_names_its_field() {
        let cases = [
            (
                envelope(json!([
                    action(CLOSE_ACTION, json!({})),
                    action(RETAIN_ACTION, json!({"priority": 1})),
                    action(RETAIN_ACTION, json!({"priority": 101}))
                ])),
                "kv_hints.actions[2].payload.priority: expected an integer from 0 to 100, got 101",
            ),
            (
                envelope(json!([action("kv.fetch", json!({}))])),
                "kv_hints.actions[0].action_type: agentrt reads",
            ),
            (
                envelope(json!([{"action_id": "a", "action_type": CLOSE_ACTION, "payload": {}}])),
                "kv_hints.actions[0].action_version: missing",
            ),
            (
                envelope(json!([action(HANDOFF_ACTION, json!({"to_agent": "evil\u{202e}"}))])),
                "kv_hints.actions[0].payload.to_agent: holds U+202E",
            ),
            (
                json!({"kv_hints": {"protocol_version": "0.1", "message_id": "m", "actions": {}}}),
                "kv_hints.actions: expected an array",
            ),
            (json!({"kv_hints": []}), "kv_hints: expected an object"),
            (
                json!({"nvext": {"session_control": {"session_id": "s", "action": "end"}}}),
                "nvext.session_control.action: expected \"open\" or \"close\"",
            ),
            (
                json!({"nvext": {"agent_hints": {"osl": -1}}}),
                "nvext.agent_hints.osl: expected an integer",
            ),
            (
                json!({"nvext": {"agent_hints": {"urgency": 1}}}),
                "nvext.agent_hints.urgency: not a field of Dynamo's agent_hints",
            ),
            (json!({"program_id": ""}), "program_id: empty"),
            (
                json!({"extra_body": {"program_id": "x".repeat(257)}}),
                "extra_body.program_id: 257 bytes",
            ),
        ];
        for (body, start) in cases {
            let got = take(body.clone()).0.unwrap_err();
            assert!(got.starts_with(start), "{body}: {got}");
        }
        assert_eq!(
            parse_release(br#"{"program_id": "p-1"}"#),
            Ok(Hint::Closed { session: "p-1".into() })
        );
        for (body, start) in [
            (
                &br#"{"program": "p"}"#[..],
                "the body.program: not a field of a release",
            ),
            (br#"{}"#, "program_id: missing"),
            (br#"{"program_id": [1]}"#, "program_id: expected a string"),
            (br#"[]"#, "the body: expected an object"),
        ] {
            let got = parse_release(body).unwrap_err().message;
            assert!(got.starts_with(start), "{got}");
        }
        let many: Vec<Value> = (0..65).map(|_| action(CLOSE_ACTION, json!({}))).collect();
        assert!(take(envelope(json!(many))).0.unwrap_err().contains("65 actions"));
    }
}
