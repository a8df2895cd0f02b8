//! The part every block-hash trace shares (Mooncake, Bailian): once an importer has read its
//! requests and grouped them into sessions, each request becomes a call whose prompt is its block
//! ids ([`segments`]) — anchor blocks named apart (`sys/…`) so they read as an agent's anchor —
//! and each session becomes a thread, calls spaced by the recorded arrival gaps.
//!
//! What differs between sources stays with the importer: how sessions are found, and how agents,
//! sessions and unnamed tails are named.

use std::borrow::Borrow;
use std::path::Path;

use super::anchors::AnchorRule;
use super::blocks::segments;
use super::threads::{Call, Thread};

/// One request of a block-hash trace, as the importer read it.
pub struct HashedRequest {
    /// Its line in the source file (errors name it).
    pub line: usize,
    /// Arrival, ms from the trace's start.
    pub at_ms: f64,
    pub input: u32,
    pub output: u32,
    /// Block-hash ids; the last may cover a partial block.
    pub ids: Vec<u64>,
}

/// How one source names what it replays.
pub struct Naming<'a> {
    /// The file read (errors name it).
    pub path: &'a Path,
    /// Prefix of every block segment's name (`mc`, `bl`): sources never share blocks.
    pub prefix: &'a str,
    pub block_tokens: u32,
    /// A request's agent, from its index and its anchor's last block id (none without an anchor).
    pub agent: &'a dyn Fn(usize, Option<u64>) -> String,
    /// The segment of a request's tokens no id covers.
    pub tail: &'a dyn Fn(usize) -> String,
    /// A session, from its first request's index.
    pub session: &'a dyn Fn(usize) -> String,
    /// Each session is a whole conversation: its last request closes it (`hints.closes`).
    pub closes: bool,
}

/// The threads of `requests` (arrival order; an importer's own request type that holds a
/// [`HashedRequest`]), `sessions` listing each session's request indices in order; `anchors`
/// decides how many leading blocks of each prompt are its anchor.
pub fn threads<R: Borrow<HashedRequest>>(
    requests: &[R],
    sessions: &[Vec<usize>],
    anchors: AnchorRule,
    naming: &Naming<'_>,
) -> anyhow::Result<Vec<Thread>> {
    let mut session_of = vec![0usize; requests.len()];
    for (s, members) in sessions.iter().enumerate() {
        for &i in members {
            session_of[i] = s;
        }
    }
    let prompts: Vec<(usize, &[u64])> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| (session_of[i], &r.borrow().ids[..]))
        .collect();
    let anchor_blocks = anchors.anchor_blocks(&prompts);
    let prefix = naming.prefix;
    let mut out = Vec::with_capacity(sessions.len());
    for members in sessions.iter().filter(|m| !m.is_empty()) {
        let mut calls = Vec::with_capacity(members.len());
        for (k, &i) in members.iter().enumerate() {
            let r: &HashedRequest = requests[i].borrow();
            let anchor = anchor_blocks[i];
            let name = |j: usize, id: u64| {
                if j < anchor {
                    format!("sys/{prefix}/{id}")
                } else {
                    format!("{prefix}/{id}")
                }
            };
            let prompt = segments(&r.ids, naming.block_tokens, r.input, &name, &(naming.tail)(i))
                .map_err(|e| anyhow::anyhow!("{} line {}: {e}", naming.path.display(), r.line))?;
            calls.push(Call {
                agent: (naming.agent)(i, anchor.checked_sub(1).map(|last| r.ids[last])),
                gap_ms: match k {
                    0 => 0.0,
                    _ => r.at_ms - requests[members[k - 1]].borrow().at_ms,
                },
                prompt,
                output_tokens: r.output,
                tool_call: false,
                wait: None,
            });
        }
        out.push(Thread {
            session: (naming.session)(members[0]),
            start_ms: requests[members[0]].borrow().at_ms,
            calls,
            closes: naming.closes,
        });
    }
    Ok(out)
}
