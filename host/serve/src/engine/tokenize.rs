//! The engine's `/tokenize`, asked in two places: the size in tokens of a new agent's anchor
//! (policies tell anchor blocks from session content by it) and a prompt's token ids (what a
//! KV-aware router hashes into blocks). One client, one timeout; a failure is `None`, and the
//! caller keeps its fallback (a byte estimate, routing by session).

use std::time::Duration;

use serde_json::Value;

use crate::engine::upstream::Upstream;

/// How long a request waits for the engine's `/tokenize` before it goes on without the answer.
pub const TOKENIZE_TIMEOUT: Duration = Duration::from_millis(500);

/// Asks `/tokenize` of the upstream or of one replica.
#[derive(Clone)]
pub struct Tokenizer {
    upstream: Upstream,
}

impl Tokenizer {
    /// A tokenizer asking `upstream` (or, for token ids, a replica) under [`TOKENIZE_TIMEOUT`].
    pub fn new(upstream: Upstream) -> Self {
        Self { upstream }
    }

    /// The `count` of tokens the upstream gives for `body` (a chat render request).
    pub async fn count(&self, body: &Value) -> Option<u32> {
        let answer = self.ask(self.upstream.base(), body).await?;
        answer.get("count")?.as_u64().and_then(|n| u32::try_from(n).ok())
    }

    /// The token ids the server at `base` gives for `body`.
    pub async fn token_ids(&self, base: &str, body: &Value) -> Option<Vec<u32>> {
        let answer = self.ask(base, body).await?;
        answer
            .get("tokens")?
            .as_array()?
            .iter()
            .map(|t| t.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    }

    async fn ask(&self, base: &str, body: &Value) -> Option<Value> {
        let request = self
            .upstream
            .post_to(base, "/tokenize")
            .timeout(TOKENIZE_TIMEOUT)
            .body(serde_json::to_vec(body).expect("values serialize"));
        let reply = request.send().await.ok()?;
        if !reply.status().is_success() {
            return None;
        }
        serde_json::from_slice(&reply.bytes().await.ok()?).ok()
    }
}
