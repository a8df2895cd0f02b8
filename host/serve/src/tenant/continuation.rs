//! Does this call carry its agent's previous prompt forward? For each (session, agent) the proxy
//! keeps the *shape* of the last prompt — a running hash and size at every chunk boundary — and
//! compares the next prompt of the same agent against it. Chat memory and ReAct loops extend the
//! previous prompt (shared = all of it); a call that starts over from its system prompt and task
//! shares only that much, and whatever the previous call added beyond it is dead in the KV cache.
//!
//! Chunks are what the request is made of: for chat, the tool definitions and then each message
//! (prefix equality of the message list is prefix equality of the templated prompt); for plain
//! completions, 256-byte pieces of the prompt. Sizes are bytes / 4, like the proxy's other token
//! estimates. Only hashes and sizes are kept — never the prompt text.
//!
//! The running hash is XXH3 (64 bits), not a cryptographic one: it is hashed over every byte of
//! every prompt, and a shape is compared only with the same tenant's same agent's last one, held
//! in memory — a collision a client could craft misleads only its own tenant's figure of what
//! its calls carry forward. 20 KB of chat in 40 messages: 19.9 µs with SHA-256, 2.9 µs with XXH3
//! (this machine, one thread).

use std::sync::Mutex;

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use agentrt_runtime::types::Continuation;

use crate::table::{LruTable, TableLimits};

/// Chunk size of a plain completion prompt.
const TEXT_CHUNK: usize = 256;

/// A prompt as (running hash, running size in tokens) after each chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptShape(Vec<(u64, u32)>);

impl PromptShape {
    fn from_chunks<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> Self {
        let mut running = Xxh3::new();
        let mut bytes = 0usize;
        let (lower, _) = chunks.size_hint();
        let mut points = Vec::with_capacity(lower);
        for chunk in chunks {
            running.update(&(chunk.len() as u64).to_le_bytes());
            running.update(chunk);
            bytes += chunk.len();
            points.push((running.digest(), (bytes / 4) as u32));
        }
        // The table keeps it and counts 16 bytes a point: no spare capacity held uncounted.
        points.shrink_to_fit();
        Self(points)
    }

    /// A chat request: its tool definitions, then each message.
    pub fn of_chat(body: &Value) -> Self {
        let tools = body.get("tools").map(Value::to_string);
        let messages: Vec<String> = body
            .get("messages")
            .and_then(Value::as_array)
            .map(|m| m.iter().map(Value::to_string).collect())
            .unwrap_or_default();
        Self::from_chunks(tools.iter().chain(&messages).map(String::as_bytes))
    }

    /// A plain completion prompt, in 256-byte pieces.
    pub fn of_text(prompt: &str) -> Self {
        Self::from_chunks(prompt.as_bytes().chunks(TEXT_CHUNK))
    }

    /// The whole prompt's size in estimated tokens (bytes / 4); 0 for an empty one.
    pub fn tokens(&self) -> u32 {
        self.0.last().map_or(0, |&(_, t)| t)
    }

    /// Tokens up to the last chunk boundary where `self` and `other` still agree.
    fn shared_with(&self, other: &PromptShape) -> u32 {
        self.0
            .iter()
            .zip(&other.0)
            .take_while(|(a, b)| a.0 == b.0)
            .last()
            .map_or(0, |(a, _)| a.1)
    }
}

/// The last prompt shape of every (session, agent) of one tenant, bounded by count and bytes
/// ([`TableLimits::max_shapes`], [`TableLimits::max_shape_bytes`]); the least recently used is
/// forgotten first.
#[derive(Debug)]
pub struct Continuations {
    inner: Mutex<LruTable<(u64, u32), PromptShape>>,
}

impl Default for Continuations {
    fn default() -> Self {
        Self::new(&TableLimits::default())
    }
}

impl Continuations {
    /// An empty table bounded by `limits`' shape count and bytes.
    pub fn new(limits: &TableLimits) -> Self {
        Self {
            inner: Mutex::new(LruTable::new(limits.max_shapes, limits.max_shape_bytes)),
        }
    }

    /// Record `shape` as the latest prompt of `agent` in `session`; how it continues the previous
    /// one, if there was one.
    pub fn observe(&self, session: u64, agent: u32, shape: PromptShape) -> Option<Continuation> {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = (session, agent);
        let continues = s.peek(&key).map(|previous| Continuation {
            shared_tokens: shape.shared_with(previous),
            previous_tokens: previous.tokens(),
        });
        let bytes = shape.0.len() * std::mem::size_of::<(u64, u32)>();
        s.insert(key, shape, bytes);
        continues
    }

    /// (session, agent) pairs whose last prompt shape is kept.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Bytes of the shapes kept.
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).bytes()
    }

    /// Whether no shape is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(messages: &[(&str, &str)]) -> PromptShape {
        let messages: Vec<Value> = messages.iter().map(|(r, c)| json!({"role": r, "content": c})).collect();
        PromptShape::of_chat(&json!({ "messages": messages }))
    }

    #[test]
    fn chat_memory_extends_and_a_new_template_starts_over() {
        let c = Continuations::default();
        let turn1 = chat(&[("system", "You are helpful."), ("user", "What is 2 + 2?")]);
        let before = turn1.tokens();
        assert_eq!(c.observe(1, 7, turn1), None, "first call of the agent in the session");
        let turn2 = chat(&[
            ("system", "You are helpful."),
            ("user", "What is 2 + 2?"),
            ("assistant", "4"),
            ("user", "And 3 + 3?"),
        ]);
        let extends = c.observe(1, 7, turn2.clone()).unwrap();
        assert_eq!(extends.previous_tokens, before);
        assert_eq!(
            extends.shared_tokens, before,
            "the whole previous prompt is carried forward"
        );
        let restart = c.observe(
            1,
            7,
            chat(&[("system", "You are a strict judge."), ("user", "What is 2 + 2?")]),
        );
        assert_eq!(
            restart.unwrap().shared_tokens,
            0,
            "another system prompt shares nothing"
        );
        assert_eq!(restart.unwrap().previous_tokens, turn2.tokens());
    }

    #[test]
    fn a_task_restated_shares_only_the_common_part() {
        let c = Continuations::default();
        c.observe(
            1,
            3,
            chat(&[("system", "Verify."), ("user", "Q"), ("user", "solution 1")]),
        );
        let again = c.observe(
            1,
            3,
            chat(&[("system", "Verify."), ("user", "Q"), ("user", "solution 2")]),
        );
        let common = chat(&[("system", "Verify."), ("user", "Q")]).tokens();
        assert_eq!(again.unwrap().shared_tokens, common);
    }

    #[test]
    fn sessions_agents_and_plain_prompts_are_kept_apart() {
        let c = Continuations::default();
        let text = "x".repeat(1000);
        assert_eq!(c.observe(1, 1, PromptShape::of_text(&text)), None);
        assert_eq!(c.observe(2, 1, PromptShape::of_text(&text)), None, "another session");
        assert_eq!(c.observe(1, 2, PromptShape::of_text(&text)), None, "another agent");
        let longer = format!("{text}{}", "y".repeat(600));
        let got = c.observe(1, 1, PromptShape::of_text(&longer)).unwrap();
        assert_eq!(
            got.shared_tokens,
            (3 * TEXT_CHUNK / 4) as u32,
            "whole 256-byte pieces only"
        );
        assert_eq!(c.len(), 3);
    }
}
