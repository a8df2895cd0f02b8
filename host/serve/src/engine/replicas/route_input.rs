//! What routing needs of a request, taken from its body while the proxy parses it: what the
//! replica's `/tokenize` is asked (or the prompt's token ids when the client sent them), the
//! cache salt, the output length and the session.

use serde_json::{json, Value};

/// What routing needs of a request, taken from its body while the proxy parses it.
#[derive(Debug, Clone, Default)]
pub struct RouteInput {
    /// The body for the replica's `/tokenize`.
    pub(super) tokenize: Option<Value>,
    /// The prompt's token ids when the client sent them (`/v1/completions` with ids).
    pub(super) token_ids: Option<Vec<u32>>,
    pub(super) cache_salt: Option<String>,
    pub(super) max_tokens: Option<u32>,
    /// The request's session (agentrt's tenant-scoped 64-bit id).
    pub(super) session: u64,
}

impl RouteInput {
    /// From a chat completion's body: its messages and tools, rendered as the replica will.
    pub fn chat(body: &Value) -> Self {
        let mut tokenize = json!({
            "model": body.get("model").cloned().unwrap_or(Value::Null),
            "messages": body.get("messages").cloned().unwrap_or_else(|| json!([])),
            "add_generation_prompt": body.get("add_generation_prompt").cloned().unwrap_or(json!(true)),
        });
        if let Some(tools) = body.get("tools") {
            tokenize["tools"] = tools.clone();
        }
        Self {
            tokenize: Some(tokenize),
            ..Self::common(body)
        }
    }

    /// From a completion's body: its prompt (text is tokenized; ids are used as they are).
    pub fn completion(body: &Value) -> Self {
        let prompt = body.get("prompt");
        let ids = prompt.and_then(Value::as_array).and_then(|items| {
            items
                .iter()
                .map(|t| t.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect::<Option<Vec<u32>>>()
        });
        let tokenize = prompt
            .filter(|p| p.is_string())
            .map(|p| json!({"model": body.get("model").cloned().unwrap_or(Value::Null), "prompt": p}));
        Self {
            tokenize,
            token_ids: ids,
            ..Self::common(body)
        }
    }

    fn common(body: &Value) -> Self {
        Self {
            cache_salt: body
                .get(crate::tenant::cache_salt::FIELD)
                .and_then(Value::as_str)
                .map(str::to_string),
            max_tokens: body
                .get("max_completion_tokens")
                .or_else(|| body.get("max_tokens"))
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
            ..Self::default()
        }
    }

    /// From either route's body: a chat completion has `messages`.
    pub fn of_body(body: &Value) -> Self {
        if body.get("messages").is_some() {
            Self::chat(body)
        } else {
            Self::completion(body)
        }
    }

    /// The same input for the request's `session` (its tenant-scoped id), which the fallback's
    /// session-sticky hashing routes by.
    pub fn with_session(mut self, session: u64) -> Self {
        self.session = session;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_input_takes_what_the_router_needs_from_a_chat_body() {
        let body = json!({
            "model": "tiny", "max_tokens": 12, "cache_salt": "s1",
            "messages": [{"role": "system", "content": "planner"}, {"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}]
        });
        let input = RouteInput::chat(&body).with_session(7);
        let tokenize = input.tokenize.unwrap();
        assert_eq!(tokenize["messages"], body["messages"]);
        assert_eq!(tokenize["tools"], body["tools"]);
        assert_eq!(tokenize["add_generation_prompt"], json!(true));
        assert_eq!(input.max_tokens, Some(12));
        assert_eq!(input.cache_salt.as_deref(), Some("s1"));
        assert_eq!(input.session, 7);
    }

    #[test]
    fn a_completion_with_token_ids_needs_no_tokenize() {
        let input = RouteInput::completion(&json!({"model": "m", "prompt": [1, 2, 3], "max_completion_tokens": 5}));
        assert_eq!(input.token_ids, Some(vec![1, 2, 3]));
        assert!(input.tokenize.is_none());
        assert_eq!(input.max_tokens, Some(5));
        let text = RouteInput::completion(&json!({"model": "m", "prompt": "hello"}));
        assert_eq!(text.tokenize.unwrap()["prompt"], json!("hello"));
    }
}
