//! Usage on every streamed call. A chat completion or completion streams its token counts only
//! when the client asks (`stream_options.include_usage`, read by the engine's own rule:
//! [`asks_for_usage`]), and most agent frameworks do not — so
//! the proxy asks for them itself, reads them as the stream passes, and drops the usage chunk
//! before the client sees it when the client had not asked: the client's stream is what it would
//! have been, and `request-finish` carries prompt, cached and output tokens either way.
//!
//! The usage chunk is found by event, not by network chunk: [`SseFramer`] hands on only whole
//! server-sent events (up to the last blank line seen), so an event split across two reads is
//! neither missed nor cut in half; what is left when the stream ends (a last event without its
//! blank line) is read and filtered like every other event.

use axum::body::Bytes;
use serde_json::{json, Value};

/// Ask the engine for a streamed chat completion's or completion's usage: set
/// `stream_options.include_usage` when `body` streams and the client did not ask for it by the
/// engine's own rule ([`asks_for_usage`]). Returns whether the proxy asked (its usage chunk is
/// then the proxy's, and dropped). `continuous_usage_stats` (usage in every chunk) is turned off
/// with it: without `include_usage` the client asked for none, and must get none.
pub fn ask_for_usage(body: &mut Value) -> bool {
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        return false;
    }
    let object = body.as_object_mut().expect("a request body is a JSON object");
    if matches!(object.get("stream_options"), None | Some(Value::Null)) {
        object.insert("stream_options".into(), json!({}));
    }
    let options = object.get_mut("stream_options").expect("just set");
    // A malformed `stream_options` goes on as sent: the engine's 400 says what is wrong.
    let Some(options) = options.as_object_mut() else {
        return false;
    };
    match asks_for_usage(options) {
        Some(false) => {}
        Some(true) | None => return false,
    }
    options.insert("include_usage".into(), json!(true));
    options.insert("continuous_usage_stats".into(), json!(false));
    true
}

/// Whether a client's `stream_options` asks for usage, by the rule vLLM (0.32) and SGLang share:
/// `include_usage` read as their request models read a boolean — `true`/`false`, `1`/`0`, and
/// the strings `true`, `t`, `yes`, `y`, `on`, `1` (and their opposites) in any case — and false
/// when absent or `null` (both engines' default, `stream_options: {}` included). `None`: a value
/// the engine refuses (a 400 of its own).
pub fn asks_for_usage(options: &serde_json::Map<String, Value>) -> Option<bool> {
    match options.get("include_usage") {
        None | Some(Value::Null) => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(1.0) => Some(true),
            Some(0.0) => Some(false),
            _ => None,
        },
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "t" | "yes" | "y" | "on" | "1" => Some(true),
            "false" | "f" | "no" | "n" | "off" | "0" => Some(false),
            _ => None,
        },
        Some(_) => None,
    }
}

/// Splits a byte stream of server-sent events into whole events: each [`SseFramer::push`]
/// returns the bytes up to and including the last event boundary (a blank line, `\n\n` or
/// `\r\n\r\n`) seen so far, and keeps the rest for the next read.
#[derive(Default)]
pub struct SseFramer {
    pending: Vec<u8>,
}

impl SseFramer {
    /// The whole events `chunk` completes, if any. A chunk that ends on a boundary with nothing
    /// pending — what an engine sends — passes through without a copy.
    pub fn push(&mut self, chunk: Bytes) -> Option<Bytes> {
        if self.pending.is_empty() && ends_an_event(&chunk) {
            return Some(chunk);
        }
        self.pending.extend_from_slice(&chunk);
        let end = last_boundary(&self.pending)?;
        let rest = self.pending.split_off(end);
        Some(Bytes::from(std::mem::replace(&mut self.pending, rest)))
    }

    /// What is left when the stream ends (an event without its closing blank line), if anything.
    pub fn finish(self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| Bytes::from(self.pending))
    }
}

fn ends_an_event(bytes: &[u8]) -> bool {
    bytes.ends_with(b"\n\n") || bytes.ends_with(b"\r\n\r\n")
}

/// The index just past the last blank line in `bytes`. A `\r\n\r\n` is looked for only past
/// the last `\n\n` (it cannot end before one it does not contain), so a stream of `\n\n`
/// events costs a scan of its last event, not of every pending byte.
fn last_boundary(bytes: &[u8]) -> Option<usize> {
    let lf = bytes.windows(2).rposition(|w| w == b"\n\n").map(|i| i + 2);
    let from = lf.map_or(0, |end| end - 2);
    let crlf = bytes[from..]
        .windows(4)
        .rposition(|w| w == b"\r\n\r\n")
        .map(|i| from + i + 4);
    lf.max(crlf)
}

/// `events` (whole events, as [`SseFramer`] gives them) without the usage chunk — an event
/// whose data has `"choices": []` and a `usage` — or `None` when nothing is left to send.
pub fn without_usage_chunk(events: Bytes) -> Option<Bytes> {
    if !events.windows(7).any(|w| w == b"\"usage\"") {
        return Some(events);
    }
    let text = String::from_utf8_lossy(&events);
    let kept: String = split_events(&text).filter(|event| !is_usage_chunk(event)).collect();
    (!kept.is_empty()).then(|| Bytes::from(kept))
}

/// Each event of `text` with the blank line that ends it.
fn split_events(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = [rest.find("\n\n").map(|i| i + 2), rest.find("\r\n\r\n").map(|i| i + 4)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(rest.len());
        let (event, after) = rest.split_at(end);
        rest = after;
        Some(event)
    })
}

fn is_usage_chunk(event: &str) -> bool {
    event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .any(|data| {
            data.get("usage").is_some_and(Value::is_object)
                && data.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_asked_for_only_when_a_streaming_client_did_not() {
        let mut quiet = json!({"stream": true});
        assert!(ask_for_usage(&mut quiet));
        assert_eq!(
            quiet["stream_options"],
            json!({"include_usage": true, "continuous_usage_stats": false})
        );
        let mut asked =
            json!({"stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
        assert!(!ask_for_usage(&mut asked));
        assert_eq!(
            asked["stream_options"]["continuous_usage_stats"], true,
            "the client's own choice"
        );
        let mut declined = json!({"stream": true, "stream_options": {"include_usage": false}});
        assert!(ask_for_usage(&mut declined));
        let mut whole = json!({"stream": false});
        assert!(!ask_for_usage(&mut whole));
        assert!(whole.get("stream_options").is_none());
        let mut malformed = json!({"stream": true, "stream_options": "yes"});
        assert!(!ask_for_usage(&mut malformed));
        assert_eq!(malformed["stream_options"], "yes");
        let mut null = json!({"stream": true, "stream_options": null});
        assert!(ask_for_usage(&mut null), "null is no stream_options");
        assert_eq!(null["stream_options"]["include_usage"], true);
    }

    /// The engines' rule, checked against vLLM 0.32's `StreamOptions` (pydantic's lax booleans):
    /// what it reads as true is the client asking, what it reads as false or leaves at its
    /// default (false) is not, and what it refuses goes on untouched.
    #[test]
    fn usage_is_asked_for_by_the_engines_rule() {
        let asks = |options: Value| asks_for_usage(options.as_object().unwrap());
        for yes in [
            json!(true),
            json!("true"),
            json!("TRUE"),
            json!("1"),
            json!("yes"),
            json!("on"),
            json!(1),
            json!(1.0),
        ] {
            assert_eq!(asks(json!({"include_usage": yes})), Some(true), "{yes}");
        }
        for no in [
            json!(false),
            json!("false"),
            json!("0"),
            json!("no"),
            json!("off"),
            json!(0),
            json!(null),
        ] {
            assert_eq!(asks(json!({"include_usage": no})), Some(false), "{no}");
        }
        assert_eq!(asks(json!({})), Some(false), "stream_options: {{}} asks for none");
        assert_eq!(
            asks(json!({"continuous_usage_stats": true})),
            Some(false),
            "without include_usage, none"
        );
        for refused in [json!(2), json!("maybe"), json!(""), json!([]), json!({})] {
            assert_eq!(asks(json!({"include_usage": refused})), None, "{refused}");
        }
        let mut coerced = json!({"stream": true, "stream_options": {"include_usage": "true"}});
        assert!(!ask_for_usage(&mut coerced), "the client asked: its chunk is its own");
        assert_eq!(
            coerced["stream_options"]["include_usage"], "true",
            "sent as the client wrote it"
        );
        let mut continuous = json!({"stream": true, "stream_options": {"continuous_usage_stats": true}});
        assert!(ask_for_usage(&mut continuous));
        assert_eq!(continuous["stream_options"]["continuous_usage_stats"], false);
        let mut refused = json!({"stream": true, "stream_options": {"include_usage": 2}});
        assert!(!ask_for_usage(&mut refused));
        assert_eq!(
            refused["stream_options"]["include_usage"], 2,
            "the engine's 400 says what is wrong"
        );
    }

    #[test]
    fn events_split_across_reads_come_out_whole() {
        let mut framer = SseFramer::default();
        assert_eq!(framer.push(Bytes::from_static(b"data: {\"a\"")), None);
        assert_eq!(
            framer.push(Bytes::from_static(b":1}\n\ndata: {\"b\"")).as_deref(),
            Some(&b"data: {\"a\":1}\n\n"[..])
        );
        assert_eq!(
            framer.push(Bytes::from_static(b":2}\r\n\r\n")).as_deref(),
            Some(&b"data: {\"b\":2}\r\n\r\n"[..])
        );
        assert_eq!(framer.push(Bytes::from_static(b"data: [DONE]")), None);
        assert_eq!(framer.finish().as_deref(), Some(&b"data: [DONE]"[..]));
    }

    #[test]
    fn only_the_usage_chunk_is_dropped() {
        let last = Bytes::from(
            "data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n\
             data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7}}\n\n\
             data: [DONE]\n\n",
        );
        assert_eq!(
            without_usage_chunk(last).as_deref(),
            Some(&b"data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\ndata: [DONE]\n\n"[..])
        );
        let alone = Bytes::from_static(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7}}\n\n");
        assert_eq!(without_usage_chunk(alone), None);
        let text = Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"content\":\"usage\"}}]}\n\n");
        assert_eq!(without_usage_chunk(text.clone()), Some(text));
    }
}
