//! Turn a [`Trace`] into what a replay needs, once per trace (shared by every policy run): token
//! ids, chained block hashes, agent identities and anchors.
//!
//! Agent identity follows what the runtime layer would learn. By default it is the trace's `agent`
//! field (what a framework tells the proxy); with `hide_agents` it is the anchor hash alone — one
//! agent per distinct anchor (system prompt + tool definitions), named by the hash in hex — which
//! is what the layer can infer from prompts without any help from the framework.
//!
//! Tenants: agents and sessions belong to the request's tenant, and a named tenant's block hashes
//! start from a salt of its name, as vLLM's `cache_salt` does: two tenants' identical prompts are
//! different blocks. The `default` tenant is unsalted, so a trace without tenants hashes as before.

use std::collections::HashMap;

use agentrt_runtime::types::Continuation;

use crate::tokens::{block_hashes, hash_str, segment_tokens};
use crate::trace::{Segment, Trace, DEFAULT_TENANT};

/// Tokens of the minimal user message a warm-up carries after the anchor.
pub const WARMUP_USER_TOKENS: u32 = 8;

/// One agent as the host announces it (`agent-registered`).
#[derive(Debug, Clone)]
pub struct Agent {
    /// Host handle: 1, 2, … in first-seen order.
    pub handle: u32,
    /// Index into [`PreparedTrace::tenants`].
    pub tenant: u16,
    pub name: String,
    pub anchor_hash: u64,
    pub anchor_tokens: u32,
    /// The anchor's segments, to rebuild a warm-up prompt.
    pub anchor: Vec<Segment>,
    /// Block hashes of the anchor's full blocks (what "the anchor is resident" means).
    pub anchor_blocks: Vec<u64>,
    /// The warm-up request for this agent: anchor + a minimal user message.
    pub warmup: PreparedPrompt,
}

/// A prompt as the block pool sees it.
#[derive(Debug, Clone)]
pub struct PreparedPrompt {
    pub tokens: u32,
    /// Chained hashes of the full blocks.
    pub hashes: Vec<u64>,
    /// The tokens after the last full block (needed to hash blocks completed by output tokens).
    pub tail: Vec<u32>,
}

/// One trace request, ready to replay.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    /// Index in file order: a stable id across runs.
    pub uid: u32,
    /// Index into [`PreparedTrace::tenants`].
    pub tenant: u16,
    pub session: u32,
    pub agent: u32,
    pub anchor_hash: u64,
    pub after_us: f64,
    pub prompt: PreparedPrompt,
    pub output_tokens: u32,
    /// The generated token ids, when a later request of the session quotes this answer right after
    /// this prompt (chat history, ReAct loops): the answer is generated as that segment's tokens,
    /// so the later prompt hits the blocks the answer filled, as in vLLM, which caches generated
    /// blocks. `None`: the answer is never quoted verbatim and gets tokens of its own.
    pub output_ids: Option<Vec<u32>>,
    /// How the prompt continues this agent's previous prompt in the session (`None` for the
    /// agent's first call there): what the proxy reports as `request-arrival.continues`.
    pub continues: Option<Continuation>,
    /// The answer ended in a tool call (the trace's `tool_call`).
    pub tool_call: bool,
    /// The trace's lifecycle hints for this request (told to the policy only under `--hints`).
    pub hints: crate::trace::Hints,
}

/// One session: its requests in file order.
#[derive(Debug, Clone)]
pub struct PreparedSession {
    pub name: String,
    /// Index into [`PreparedTrace::tenants`].
    pub tenant: u16,
    /// 64-bit hash of the name (the `session-id` policies see).
    pub id: u64,
    pub requests: Vec<u32>,
}

/// A trace ready to replay under any policy.
#[derive(Debug, Clone)]
pub struct PreparedTrace {
    pub block_size: usize,
    pub hide_agents: bool,
    /// Tenant names in first-seen order (`default` for requests that name none).
    pub tenants: Vec<String>,
    pub agents: Vec<Agent>,
    pub sessions: Vec<PreparedSession>,
    pub requests: Vec<PreparedRequest>,
}

/// Tenants, agents and sessions in first-seen order, with their indices, while a trace is prepared.
#[derive(Default)]
struct Tables {
    tenants: Vec<String>,
    agents: Vec<Agent>,
    agent_index: HashMap<(u16, String), u32>,
    sessions: Vec<PreparedSession>,
    session_index: HashMap<(u16, String), u32>,
}

impl Tables {
    /// The tenant's index, added when new.
    fn tenant(&mut self, name: &str) -> u16 {
        match self.tenants.iter().position(|t| t == name) {
            Some(i) => i as u16,
            None => {
                self.tenants.push(name.to_string());
                self.tenants.len() as u16 - 1
            }
        }
    }

    /// The agent's handle (from 1), added with its anchor's blocks and warm-up prompt when new.
    fn agent(
        &mut self,
        tenant: u16,
        name: String,
        anchor: &[Segment],
        anchor_hash: u64,
        block_size: usize,
        salt: Option<u64>,
    ) -> u32 {
        let agents = &mut self.agents;
        *self.agent_index.entry((tenant, name.clone())).or_insert_with(|| {
            let anchor_tokens: u32 = anchor.iter().map(|s| s.tokens).sum();
            let mut warm = anchor.to_vec();
            warm.push(Segment::new("warmup/user", WARMUP_USER_TOKENS));
            let anchor_prompt = prepare_prompt(anchor, block_size, salt);
            agents.push(Agent {
                handle: agents.len() as u32 + 1,
                tenant,
                name,
                anchor_hash,
                anchor_tokens,
                anchor: anchor.to_vec(),
                anchor_blocks: anchor_prompt.hashes,
                warmup: prepare_prompt(&warm, block_size, salt),
            });
            agents.len() as u32
        })
    }

    /// The session's index, added when new.
    fn session(&mut self, tenant: u16, name: &str, salt: Option<u64>) -> u32 {
        let sessions = &mut self.sessions;
        *self.session_index.entry((tenant, name.to_string())).or_insert_with(|| {
            sessions.push(PreparedSession {
                name: name.to_string(),
                tenant,
                // One session name in two tenants is two sessions.
                id: match salt {
                    None => hash_str(name),
                    Some(salt) => hash_str(name) ^ salt,
                },
                requests: Vec::new(),
            });
            sessions.len() as u32 - 1
        })
    }
}

/// Each request of `session` that follows an earlier one of the same agent continues it: how
/// much of the earlier prompt it shares (what `request-arrival.continues` tells the policy).
fn link_continuations(trace: &Trace, session: &PreparedSession, requests: &mut [PreparedRequest]) {
    for (k, &uid) in session.requests.iter().enumerate() {
        let agent = requests[uid as usize].agent;
        let previous = session.requests[..k]
            .iter()
            .rev()
            .find(|&&j| requests[j as usize].agent == agent);
        if let Some(&j) = previous {
            let before = &trace.requests[j as usize].prompt;
            let now = &trace.requests[uid as usize].prompt;
            let shared = before
                .iter()
                .zip(now)
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a.tokens)
                .sum();
            requests[uid as usize].continues = Some(Continuation {
                shared_tokens: shared,
                previous_tokens: before.iter().map(|s| s.tokens).sum(),
            });
        }
    }
}

/// A request whose answer a later prompt of its session quotes generates exactly those tokens,
/// so that the later prompt hits the answer's blocks as it would in the engine.
fn take_quoted_answers(trace: &Trace, session: &PreparedSession, requests: &mut [PreparedRequest]) {
    for (k, &uid) in session.requests.iter().enumerate() {
        let r = &trace.requests[uid as usize];
        let quoted = session.requests[k + 1..].iter().find_map(|&later| {
            let p = &trace.requests[later as usize].prompt;
            (p.len() > r.prompt.len() && p[..r.prompt.len()] == r.prompt[..])
                .then(|| &p[r.prompt.len()])
                .filter(|answer| answer.tokens == r.output_tokens)
        });
        if let Some(answer) = quoted {
            let mut ids = Vec::with_capacity(answer.tokens as usize);
            segment_tokens(&answer.seg, answer.tokens, &mut ids);
            requests[uid as usize].output_ids = Some(ids);
        }
    }
}

/// Hash of an anchor: its segment names and lengths (which fix its token ids). 0 = no anchor.
pub fn anchor_hash(anchor: &[Segment]) -> u64 {
    if anchor.is_empty() {
        return 0;
    }
    let mut h = 0x1f83_d9ab_fb41_bd6bu64;
    for s in anchor {
        h = crate::tokens::mix64(h ^ hash_str(&s.seg)).wrapping_add(u64::from(s.tokens));
    }
    h.max(1)
}

/// Token ids of a prompt.
pub fn prompt_tokens(prompt: &[Segment]) -> Vec<u32> {
    let mut tokens = Vec::with_capacity(prompt.iter().map(|s| s.tokens as usize).sum());
    for s in prompt {
        segment_tokens(&s.seg, s.tokens, &mut tokens);
    }
    tokens
}

/// The hash a tenant's block chains start from: none for `default`, a salt of the name otherwise
/// (vLLM mixes a request's `cache_salt` into its first block's hash).
pub fn tenant_salt(tenant: &str) -> Option<u64> {
    (tenant != DEFAULT_TENANT).then(|| hash_str(&format!("cache_salt/{tenant}")))
}

pub fn prepare_prompt(prompt: &[Segment], block_size: usize, salt: Option<u64>) -> PreparedPrompt {
    let tokens = prompt_tokens(prompt);
    let mut hashes = Vec::with_capacity(tokens.len() / block_size);
    block_hashes(salt, &tokens, block_size, &mut hashes);
    let tail = tokens[hashes.len() * block_size..].to_vec();
    PreparedPrompt {
        tokens: tokens.len() as u32,
        hashes,
        tail,
    }
}

impl PreparedTrace {
    pub fn new(trace: &Trace, block_size: usize, hide_agents: bool) -> Self {
        let mut tables = Tables::default();
        let mut requests = Vec::with_capacity(trace.requests.len());
        // Segment sequences repeat a lot (every call of an agent starts with its anchor): hashing
        // each distinct prompt once would need the whole prompt as a key, so hash per request —
        // it is linear in tokens and runs once per trace.
        for (uid, r) in trace.requests.iter().enumerate() {
            let tenant = tables.tenant(r.tenant());
            let salt = tenant_salt(r.tenant());
            let anchor = &r.prompt[..r.anchor_len()];
            let a_hash = anchor_hash(anchor);
            let name = if hide_agents {
                format!("{a_hash:016x}")
            } else {
                r.agent.clone()
            };
            let agent = tables.agent(tenant, name, anchor, a_hash, block_size, salt);
            let session = tables.session(tenant, &r.session, salt);
            tables.sessions[session as usize].requests.push(uid as u32);
            requests.push(PreparedRequest {
                uid: uid as u32,
                tenant,
                session,
                agent,
                anchor_hash: a_hash,
                after_us: r.after_ms * 1000.0,
                prompt: prepare_prompt(&r.prompt, block_size, salt),
                output_tokens: r.output_tokens,
                output_ids: None,
                continues: None,
                tool_call: r.tool_call,
                hints: r.hints.clone(),
            });
        }
        for session in &tables.sessions {
            link_continuations(trace, session, &mut requests);
            take_quoted_answers(trace, session, &mut requests);
        }
        Self {
            block_size,
            hide_agents,
            tenants: tables.tenants,
            agents: tables.agents,
            sessions: tables.sessions,
            requests,
        }
    }

    pub fn agent(&self, handle: u32) -> Option<&Agent> {
        handle.checked_sub(1).and_then(|i| self.agents.get(i as usize))
    }

    pub fn prompt_tokens(&self) -> u64 {
        self.requests.iter().map(|r| u64::from(r.prompt.tokens)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceRequest;

    fn req(session: &str, agent: &str, segs: &[(&str, u32)]) -> TraceRequest {
        TraceRequest {
            tenant: None,
            session: session.into(),
            agent: agent.into(),
            after_ms: 0.0,
            prompt: segs.iter().map(|(s, n)| Segment::new(*s, *n)).collect(),
            output_tokens: 4,
            tool_call: false,
            hints: Default::default(),
        }
    }

    #[test]
    fn agents_come_from_names_or_from_anchors_alone() {
        let trace = Trace {
            requests: vec![
                req("s1", "solver", &[("sys/solver", 40), ("s1/q", 10)]),
                req(
                    "s1",
                    "verifier",
                    &[("sys/verifier", 40), ("tools/calc", 20), ("s1/q", 10)],
                ),
                // Same anchor as the solver under another name: one agent when names are hidden.
                req("s2", "solver-bis", &[("sys/solver", 40), ("s2/q", 10)]),
            ],
        };
        let named = PreparedTrace::new(&trace, 16, false);
        assert_eq!(named.agents.len(), 3);
        assert_eq!(named.agents[1].anchor_tokens, 60);
        assert_eq!(named.sessions.len(), 2);
        let hidden = PreparedTrace::new(&trace, 16, true);
        assert_eq!(hidden.agents.len(), 2);
        assert_eq!(hidden.requests[2].agent, hidden.requests[0].agent);
        assert_eq!(hidden.agents[0].name, format!("{:016x}", hidden.agents[0].anchor_hash));
        // The anchor's full blocks prefix every request of the agent.
        let a = &named.agents[0];
        assert_eq!(a.anchor_blocks.len(), 2);
        assert_eq!(named.requests[0].prompt.hashes[..2], a.anchor_blocks[..]);
        assert_eq!(a.warmup.hashes[..2], a.anchor_blocks[..]);
        assert_eq!(named.requests[0].prompt.tail.len(), 50 - 48);
    }

    #[test]
    fn an_answer_quoted_by_a_later_prompt_is_generated_as_those_tokens() {
        let mut first = req("s", "a", &[("sys/a", 40), ("s/q", 10)]);
        first.output_tokens = 7;
        let judge = req("s", "judge", &[("sys/j", 20), ("s/q", 10), ("s/a-1", 7)]);
        let follow = req("s", "a", &[("sys/a", 40), ("s/q", 10), ("s/a-1", 7), ("s/q2", 5)]);
        let trace = Trace {
            requests: vec![first, judge, follow],
        };
        let p = PreparedTrace::new(&trace, 16, false);
        let mut expected = Vec::new();
        segment_tokens("s/a-1", 7, &mut expected);
        assert_eq!(p.requests[0].output_ids.as_deref(), Some(&expected[..]));
        assert!(p.requests[1].output_ids.is_none());
        // A quote of another length is another text: not the answer.
        let mut other = trace.clone();
        other.requests[2].prompt[2].tokens = 8;
        assert!(PreparedTrace::new(&other, 16, false).requests[0].output_ids.is_none());
    }
}
