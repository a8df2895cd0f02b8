//! The APIs agents speak, as far as the proxy must tell them apart: OpenAI chat completions,
//! the OpenAI Responses API (`/v1/responses`, the OpenAI Agents SDK's default) and the Anthropic
//! Messages API (`/v1/messages`, Claude-style agent SDKs). vLLM serves all three, and all three
//! accept `cache_salt` and `vllm_xargs`, so the body goes upstream as the client sent it plus
//! those two fields.
//!
//! What differs is read here, once: where the anchor is (system prompt / `instructions` /
//! `system`, and `tools`), where the usage is (and its field names), how a streamed reply carries
//! it, and what a minimal warm-up request of the same API looks like — a warm-up must go through
//! the same API so that the engine renders the same prompt prefix.

use serde_json::{json, Map, Value};

/// One of the APIs the proxy serves with agent identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentApi {
    /// OpenAI chat completions, `/v1/chat/completions`.
    ChatCompletions,
    /// The OpenAI Responses API, `/v1/responses`.
    Responses,
    /// The Anthropic Messages API, `/v1/messages`.
    Messages,
}

/// What a request's usage says, in one vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every prompt token, cached or not (`prompt_tokens`, `input_tokens`; for Messages its
    /// `input_tokens` plus the cache's read and written tokens).
    pub prompt_tokens: Option<u32>,
    /// The prompt tokens the engine found in its prefix cache (`cached_tokens`,
    /// `cache_read_input_tokens`).
    pub cached_tokens: Option<u32>,
    /// Tokens generated (`completion_tokens`, `output_tokens`).
    pub output_tokens: Option<u32>,
}

impl Usage {
    /// `self` with the fields `later` knows (a stream reports usage in pieces).
    pub fn updated(self, later: Usage) -> Usage {
        Usage {
            prompt_tokens: later.prompt_tokens.or(self.prompt_tokens),
            cached_tokens: later.cached_tokens.or(self.cached_tokens),
            output_tokens: later.output_tokens.or(self.output_tokens),
        }
    }
}

fn count(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok())
}

impl AgentApi {
    /// The upstream path (the same as the proxy's route).
    pub fn path(self) -> &'static str {
        match self {
            AgentApi::ChatCompletions => "/v1/chat/completions",
            AgentApi::Responses => "/v1/responses",
            AgentApi::Messages => "/v1/messages",
        }
    }

    /// The shape of the proxy's own errors on this API's route.
    pub fn error_shape(self) -> crate::front::error::ErrorShape {
        match self {
            AgentApi::Messages => crate::front::error::ErrorShape::Anthropic,
            AgentApi::ChatCompletions | AgentApi::Responses => crate::front::error::ErrorShape::OpenAi,
        }
    }

    /// The field that holds the conversation.
    pub fn conversation_field(self) -> &'static str {
        match self {
            AgentApi::Responses => "input",
            AgentApi::ChatCompletions | AgentApi::Messages => "messages",
        }
    }

    /// The id of the stored response a Responses reply is (what a later call's
    /// `previous_response_id` names); `None` for the other APIs.
    pub fn response_id(self, reply: &Value) -> Option<&str> {
        if self != AgentApi::Responses || reply.get("object").and_then(Value::as_str) != Some("response") {
            return None;
        }
        reply.get("id").and_then(Value::as_str)
    }

    /// The response id a streamed Responses reply announces in its `response.created` event.
    pub fn response_id_in_chunk(self, chunk: &[u8]) -> Option<String> {
        if self != AgentApi::Responses {
            return None;
        }
        let text = std::str::from_utf8(chunk).ok()?;
        if !text.contains("response.created") {
            return None;
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|event| event.get("type").and_then(Value::as_str) == Some("response.created"))
            .and_then(|event| event.pointer("/response/id")?.as_str().map(str::to_string))
    }

    /// Whether vLLM takes a `priority` field in this API (its Anthropic endpoint has none).
    pub fn has_priority(self) -> bool {
        self != AgentApi::Messages
    }

    /// The request as chat completion `messages` and `tools`: what agent identity, the anchor and
    /// prompt shapes are read from, whatever the API. The system prompt (`instructions`,
    /// `system`) comes first as a `system` message; a Responses `input` string is one user
    /// message, and its items that are not messages (function calls and their outputs) keep their
    /// content in order.
    pub fn chat_view(self, body: &Value) -> Result<Value, String> {
        let (system, conversation, field) = match self {
            AgentApi::ChatCompletions => return Ok(body.clone()),
            AgentApi::Responses => (body.get("instructions"), responses_input(body)?, "input"),
            AgentApi::Messages => (
                body.get("system"),
                body.get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .ok_or("`messages` must be an array of messages")?,
                "messages",
            ),
        };
        let mut messages = Vec::with_capacity(conversation.len() + 1);
        if let Some(system) = system.filter(|s| !s.is_null()) {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.extend(conversation);
        if messages.is_empty() {
            return Err(format!("`{field}` is empty: there is nothing to send"));
        }
        let mut view = Map::new();
        view.insert("messages".into(), Value::Array(messages));
        for key in ["tools", "model", "user"] {
            if let Some(v) = body.get(key) {
                view.insert(key.into(), v.clone());
            }
        }
        Ok(Value::Object(view))
    }

    /// The fields of `body` that make up its anchor, as the API spells them: what a warm-up of
    /// the same API repeats. `None` for chat completions, whose anchor is its leading messages.
    pub fn anchor_fields(self, body: &Value) -> Option<Value> {
        let keep = |keys: &[&str]| {
            let mut fields = Map::new();
            for key in keys {
                if let Some(v) = body.get(*key).filter(|v| !v.is_null()) {
                    fields.insert((*key).into(), v.clone());
                }
            }
            fields
        };
        match self {
            AgentApi::ChatCompletions => None,
            AgentApi::Responses => {
                let mut fields = keep(&["instructions", "tools"]);
                // Leading system/developer items of the input are part of the anchor too.
                let leading: Vec<Value> = body
                    .get("input")
                    .and_then(Value::as_array)
                    .map(|items| {
                        items
                            .iter()
                            .take_while(|i| {
                                matches!(i.get("role").and_then(Value::as_str), Some("system" | "developer"))
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                fields.insert("input".into(), Value::Array(leading));
                Some(Value::Object(fields))
            }
            AgentApi::Messages => Some(Value::Object(keep(&["system", "tools"]))),
        }
    }

    /// A warm-up request body of this API for an anchor: the anchor's fields, a one-character
    /// user message, one output token, no tool call.
    pub fn warmup_body(
        self,
        model: &str,
        chat_messages: &[Value],
        tools: Option<&Value>,
        fields: Option<&Value>,
    ) -> Value {
        match self {
            AgentApi::ChatCompletions => {
                let mut messages = chat_messages.to_vec();
                messages.push(json!({"role": "user", "content": "."}));
                let mut body = json!({"model": model, "messages": messages, "max_tokens": 1, "stream": false});
                if let Some(tools) = tools {
                    body["tools"] = tools.clone();
                    // The tools are part of the anchor (the chat template renders them), but a
                    // warm-up must not ask for a tool call: without `tool_choice` an OpenAI server
                    // defaults to "auto", which vLLM refuses (400) unless started with a
                    // tool-call parser.
                    body["tool_choice"] = json!("none");
                }
                body
            }
            AgentApi::Responses => {
                let mut body = fields.cloned().unwrap_or_else(|| json!({}));
                let mut input = body.get("input").and_then(Value::as_array).cloned().unwrap_or_default();
                input.push(json!({"role": "user", "content": "."}));
                body["input"] = Value::Array(input);
                body["model"] = json!(model);
                body["max_output_tokens"] = json!(1);
                body["stream"] = json!(false);
                body["store"] = json!(false);
                if body.get("tools").is_some() {
                    body["tool_choice"] = json!("none");
                }
                body
            }
            AgentApi::Messages => {
                let mut body = fields.cloned().unwrap_or_else(|| json!({}));
                body["model"] = json!(model);
                body["messages"] = json!([{"role": "user", "content": "."}]);
                body["max_tokens"] = json!(1);
                body["stream"] = json!(false);
                if body.get("tools").is_some() {
                    body["tool_choice"] = json!({"type": "none"});
                }
                body
            }
        }
    }

    /// The usage of a whole (non-streamed) reply.
    pub fn usage(self, reply: &Value) -> Option<Usage> {
        self.read_usage(reply.get("usage")?)
    }

    fn read_usage(self, usage: &Value) -> Option<Usage> {
        if !usage.is_object() {
            return None;
        }
        Some(match self {
            AgentApi::ChatCompletions => Usage {
                prompt_tokens: count(usage.get("prompt_tokens")),
                cached_tokens: count(usage.pointer("/prompt_tokens_details/cached_tokens")),
                output_tokens: count(usage.get("completion_tokens")),
            },
            AgentApi::Responses => Usage {
                prompt_tokens: count(usage.get("input_tokens")),
                cached_tokens: count(usage.pointer("/input_tokens_details/cached_tokens")),
                output_tokens: count(usage.get("output_tokens")),
            },
            // Anthropic's `input_tokens` are the prompt tokens *not* read from or written to the
            // cache: the prompt is all three together.
            AgentApi::Messages => {
                let read = count(usage.get("cache_read_input_tokens"));
                let written = count(usage.get("cache_creation_input_tokens"));
                Usage {
                    prompt_tokens: count(usage.get("input_tokens"))
                        .map(|n| n + read.unwrap_or(0) + written.unwrap_or(0)),
                    cached_tokens: read,
                    output_tokens: count(usage.get("output_tokens")),
                }
            }
        })
    }

    /// The usage an SSE chunk's `data:` lines carry, if any: chat completions' final chunk
    /// (`usage`, when the client asked for it), the Responses API's `response.completed` event
    /// (`response.usage`), the Messages API's `message_start` (`message.usage`: the input) and
    /// `message_delta` (`usage`: the output).
    pub fn usage_in_chunk(self, chunk: &[u8]) -> Option<Usage> {
        let text = std::str::from_utf8(chunk).ok()?;
        if !text.contains("\"usage\"") {
            return None;
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .filter_map(|event| {
                let usage = event
                    .get("usage")
                    .or_else(|| event.pointer("/response/usage"))
                    .or_else(|| event.pointer("/message/usage"))?;
                self.read_usage(usage)
            })
            .reduce(Usage::updated)
    }
}

/// A Responses request's `input` as chat messages.
fn responses_input(body: &Value) -> Result<Vec<Value>, String> {
    match body.get("input") {
        Some(Value::String(text)) => Ok(vec![json!({"role": "user", "content": text})]),
        Some(Value::Array(items)) => Ok(items
            .iter()
            .map(|item| match item.get("role") {
                Some(_) => item.clone(),
                // A function call or its output: part of the conversation, in order.
                None => json!({"role": "tool", "content": item.to_string()}),
            })
            .collect()),
        Some(_) => Err("`input` must be a string or an array of input items".into()),
        None => Err("`input` is missing".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_puts_its_system_prompt_first_in_the_chat_view() {
        let responses = json!({"model": "m", "instructions": "You are the planner.", "input": "Plan it.",
            "tools": [{"type": "function", "name": "search"}]});
        let view = AgentApi::Responses.chat_view(&responses).unwrap();
        assert_eq!(
            view["messages"][0],
            json!({"role": "system", "content": "You are the planner."})
        );
        assert_eq!(view["messages"][1], json!({"role": "user", "content": "Plan it."}));
        assert_eq!(view["tools"], responses["tools"]);

        let messages = json!({"model": "m", "system": [{"type": "text", "text": "You are the coder."}],
            "messages": [{"role": "user", "content": "Code it."}], "max_tokens": 9});
        let view = AgentApi::Messages.chat_view(&messages).unwrap();
        assert_eq!(view["messages"][0]["role"], "system");
        assert_eq!(view["messages"][1]["content"], "Code it.");
        assert!(view.get("max_tokens").is_none(), "only what identity reads");

        assert!(AgentApi::Responses
            .chat_view(&json!({"input": 3}))
            .unwrap_err()
            .contains("input"));
        assert!(AgentApi::Messages
            .chat_view(&json!({}))
            .unwrap_err()
            .contains("messages"));
        assert!(AgentApi::Messages
            .chat_view(&json!({"messages": []}))
            .unwrap_err()
            .contains("empty"));
    }

    #[test]
    fn usage_is_read_in_each_apis_words_whole_or_streamed() {
        let responses =
            json!({"usage": {"input_tokens": 50, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 32}}});
        assert_eq!(
            AgentApi::Responses.usage(&responses),
            Some(Usage {
                prompt_tokens: Some(50),
                cached_tokens: Some(32),
                output_tokens: Some(2)
            })
        );
        let messages = json!({"usage": {"input_tokens": 24, "output_tokens": 1, "cache_read_input_tokens": 16}});
        let usage = AgentApi::Messages.usage(&messages).unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.cached_tokens),
            (Some(40), Some(16)),
            "Anthropic's input_tokens leave the cached ones out"
        );

        let completed = b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n";
        assert_eq!(
            AgentApi::Responses.usage_in_chunk(completed).unwrap().prompt_tokens,
            Some(7)
        );
        let start = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":0}}}\n\n";
        let delta = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n\n";
        let streamed = AgentApi::Messages
            .usage_in_chunk(start)
            .unwrap()
            .updated(AgentApi::Messages.usage_in_chunk(delta).unwrap());
        assert_eq!((streamed.prompt_tokens, streamed.output_tokens), (Some(9), Some(4)));
        assert!(AgentApi::ChatCompletions
            .usage_in_chunk(b"data: {\"usage\":null}\n\n")
            .is_none());
        assert!(AgentApi::ChatCompletions
            .usage_in_chunk(b"data: {\"choices\":[]}\n\n")
            .is_none());
        let last = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7}}\n\ndata: [DONE]\n\n";
        assert_eq!(
            AgentApi::ChatCompletions.usage_in_chunk(last).unwrap().prompt_tokens,
            Some(7)
        );
    }

    #[test]
    fn a_warmup_repeats_the_anchor_in_the_agents_own_api() {
        let body = json!({"model": "m", "instructions": "Plan.", "tools": [{"type": "function", "name": "s"}],
            "input": [{"role": "developer", "content": "Rules."}, {"role": "user", "content": "secret task"}]});
        let fields = AgentApi::Responses.anchor_fields(&body);
        let warm = AgentApi::Responses.warmup_body("m", &[], None, fields.as_ref());
        assert_eq!(warm["instructions"], "Plan.");
        assert_eq!(warm["input"][0]["content"], "Rules.");
        assert_eq!(warm["input"][1], json!({"role": "user", "content": "."}));
        assert_eq!(warm["max_output_tokens"], 1);
        assert!(!warm.to_string().contains("secret task"));

        let body = json!({"model": "m", "system": "Code.", "messages": [{"role": "user", "content": "secret"}]});
        let warm = AgentApi::Messages.warmup_body("m", &[], None, AgentApi::Messages.anchor_fields(&body).as_ref());
        assert_eq!(warm["system"], "Code.");
        assert_eq!(warm["messages"], json!([{"role": "user", "content": "."}]));
        assert!(warm.get("tool_choice").is_none());
    }
}
