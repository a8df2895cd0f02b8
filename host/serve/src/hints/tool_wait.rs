//! What a response says without any hint: it asks for a tool. Chat completions end with
//! `finish_reason: "tool_calls"` and name the tools in `message.tool_calls` (streamed: in the
//! deltas' `tool_calls[].function.name`); the Responses API returns output items of type
//! `function_call`; the Messages API stops with `stop_reason: "tool_use"` after `tool_use`
//! content blocks. A streamed reply is read event by event as it passes: an event is parsed only
//! when its bytes mention a tool, and nothing but the tools' names is kept.

use serde_json::Value;

use crate::identity::agent_api::AgentApi;
use crate::names::check_name;

/// Most distinct tools one response is read for (parallel tool calls); the rest are not named.
pub const MAX_TOOLS_PER_RESPONSE: usize = 16;

/// The tools a whole (non-streamed) reply asks for; empty when it asks for none.
pub fn tools_in_reply(api: AgentApi, reply: &Value) -> Vec<String> {
    let mut tools = ToolCalls::default();
    match api {
        AgentApi::ChatCompletions => {
            for choice in array(reply.get("choices")) {
                if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                    tools.asked = true;
                }
                for call in array(choice.pointer("/message/tool_calls")) {
                    tools.named(call.pointer("/function/name"));
                }
            }
        }
        AgentApi::Responses => tools.function_calls(array(reply.get("output"))),
        AgentApi::Messages => {
            tools.asked = reply.get("stop_reason").and_then(Value::as_str) == Some("tool_use");
            for block in array(reply.get("content")) {
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    tools.named(block.get("name"));
                }
            }
        }
    }
    tools.finish()
}

fn array(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value.and_then(Value::as_array).into_iter().flatten()
}

/// The tools a streamed reply asks for, read as its events pass.
#[derive(Debug, Default)]
pub struct ToolCalls {
    /// The reply said it stops for tools (`tool_calls`, `tool_use`, a `function_call` item).
    asked: bool,
    names: Vec<String>,
}

impl ToolCalls {
    /// Read whole SSE events (`data:` lines) of a reply in `api`.
    pub fn read_events(&mut self, api: AgentApi, events: &[u8]) {
        // Most events are text deltas: only one that mentions a tool is parsed.
        let marker: &[u8] = match api {
            AgentApi::ChatCompletions => b"tool_calls",
            AgentApi::Responses => b"function_call",
            AgentApi::Messages => b"tool_use",
        };
        if !events.windows(marker.len()).any(|w| w == marker) {
            return;
        }
        let Ok(text) = std::str::from_utf8(events) else {
            return;
        };
        for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
            if let Ok(event) = serde_json::from_str::<Value>(data.trim()) {
                self.read_event(api, &event);
            }
        }
    }

    fn read_event(&mut self, api: AgentApi, event: &Value) {
        match api {
            AgentApi::ChatCompletions => {
                for choice in array(event.get("choices")) {
                    if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                        self.asked = true;
                    }
                    for call in array(choice.pointer("/delta/tool_calls")) {
                        self.named(call.pointer("/function/name"));
                    }
                }
            }
            // Each function call is announced as an output item, added and then done.
            AgentApi::Responses => {
                let item = event.get("item").into_iter();
                let completed = array(event.pointer("/response/output"));
                self.function_calls(item.chain(completed));
            }
            AgentApi::Messages => {
                if event.pointer("/delta/stop_reason").and_then(Value::as_str) == Some("tool_use") {
                    self.asked = true;
                }
                let block = event.get("content_block");
                if block.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    self.named(block.and_then(|b| b.get("name")));
                }
            }
        }
    }

    fn function_calls<'a>(&mut self, items: impl Iterator<Item = &'a Value>) {
        for item in items {
            if item.get("type").and_then(Value::as_str) == Some("function_call") {
                self.asked = true;
                self.named(item.get("name"));
            }
        }
    }

    /// A tool the reply names, kept if it follows the names' rule ([`check_name`]: visible
    /// characters, at most 256 bytes) — a model's output is not the proxy's to trust — so one
    /// reply keeps at most [`MAX_TOOLS_PER_RESPONSE`] × 256 bytes of names. A name that breaks
    /// the rule leaves the tool unnamed (a wait for a tool all the same).
    fn named(&mut self, name: Option<&Value>) {
        let Some(name) = name.and_then(Value::as_str).filter(|n| check_name(n).is_ok()) else {
            return;
        };
        if self.names.len() < MAX_TOOLS_PER_RESPONSE && !self.names.iter().any(|n| n == name) {
            self.names.push(name.to_string());
        }
    }

    /// The tools asked for: empty unless the reply stopped for them. A reply that stops for a
    /// tool without naming one (a stream cut short of the name) waits for an unknown tool: `""`.
    pub fn finish(self) -> Vec<String> {
        match (self.asked, self.names.is_empty()) {
            (false, _) => Vec::new(),
            (true, true) => vec![String::new()],
            (true, false) => self.names,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_replies_of_each_api() {
        let chat = json!({"choices": [{"finish_reason": "tool_calls", "message": {"tool_calls": [
            {"function": {"name": "web_search"}}, {"function": {"name": "calc"}}, {"function": {"name": "web_search"}}]}}]});
        assert_eq!(tools_in_reply(AgentApi::ChatCompletions, &chat), ["web_search", "calc"]);
        let stop = json!({"choices": [{"finish_reason": "stop", "message": {"content": "hi"}}]});
        assert!(tools_in_reply(AgentApi::ChatCompletions, &stop).is_empty());
        let responses = json!({"output": [{"type": "message"}, {"type": "function_call", "name": "lookup"}]});
        assert_eq!(tools_in_reply(AgentApi::Responses, &responses), ["lookup"]);
        let messages =
            json!({"stop_reason": "tool_use", "content": [{"type": "text"}, {"type": "tool_use", "name": "bash"}]});
        assert_eq!(tools_in_reply(AgentApi::Messages, &messages), ["bash"]);
    }

    #[test]
    fn streamed_replies_are_read_from_their_events() {
        let mut chat = ToolCalls::default();
        chat.read_events(
            AgentApi::ChatCompletions,
            b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"web_search\",\"arguments\":\"\"}}]}}]}\n\n\
              data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
        );
        chat.read_events(
            AgentApi::ChatCompletions,
            b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        );
        assert_eq!(chat.finish(), ["web_search"]);
        let mut messages = ToolCalls::default();
        messages.read_events(AgentApi::Messages, b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"tool_use\",\"name\":\"bash\"}}\n\n");
        messages.read_events(
            AgentApi::Messages,
            b"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n",
        );
        assert_eq!(messages.finish(), ["bash"]);
        let mut responses = ToolCalls::default();
        responses.read_events(AgentApi::Responses, b"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"name\":\"lookup\",\"arguments\":\"\"}}\n\n");
        responses.read_events(AgentApi::Responses, b"data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"function_call\",\"name\":\"lookup\"}]}}\n\n");
        assert_eq!(responses.finish(), ["lookup"]);
        let mut text = ToolCalls::default();
        text.read_events(
            AgentApi::ChatCompletions,
            b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n",
        );
        assert!(text.finish().is_empty());
    }
}
