//! Alibaba's Qwen-Bailian usage traces (`alibaba-edu/qwen-bailian-usagetraces-anon`, Apache-2.0;
//! Wang et al., "KVCache Cache in the Wild", USENIX ATC '25): one request per line — `chat_id`,
//! `parent_chat_id` (-1 for a conversation's first request), `timestamp` (s of arrival), `input_length`,
//! `output_length`, `type` (text, search, image, file), `turn`, `hash_ids` (salted SipHash ids of
//! 16-token blocks). The format as the repository's README and NVIDIA AIPerf's Bailian tutorial
//! document it; the files themselves are Git LFS objects that could not be fetched here.
//!
//! Sessions are the source's: a request belongs to the conversation of its root (following
//! `parent_chat_id`; a parent missing from the file makes the request a root). A session's requests
//! are replayed in arrival order, each the recorded arrival gap after the previous one finished.
//! Anchors are inferred (`--anchors`, default `shared-prefix`); the agent is the request `type`
//! and its anchor.

use std::collections::HashMap;
use std::path::Path;

use super::anchors::AnchorRule;
use super::hashed::{self, HashedRequest, Naming};
use super::record::{read_jsonl, Record};
use super::threads::Thread;

/// Bailian's block size (tokens).
pub const BLOCK_TOKENS: u32 = 16;

struct Request {
    chat: i64,
    parent: i64,
    kind: String,
    blocks: HashedRequest,
}

impl std::borrow::Borrow<HashedRequest> for Request {
    fn borrow(&self) -> &HashedRequest {
        &self.blocks
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<Request>> {
    let file = path.display().to_string();
    let mut out = Vec::new();
    let mut chats = HashMap::new();
    for (line, value) in read_jsonl(path)? {
        let r = Record::new(&value, format!("{file} line {line}"))?;
        let input = r.u32("input_length")?;
        if input == 0 {
            return Err(r.err("input_length", "a prompt of 0 tokens"));
        }
        let chat = r.i64("chat_id")?;
        if let Some(first) = chats.insert(chat, line) {
            return Err(r.err("chat_id", format!("{chat} already used on line {first}")));
        }
        out.push(Request {
            chat,
            parent: match r.get("parent_chat_id") {
                None => -1,
                Some(_) => r.i64("parent_chat_id")?,
            },
            kind: r.str_opt("type")?.unwrap_or("text").to_string(),
            blocks: HashedRequest {
                line,
                at_ms: r.time("timestamp")? * 1000.0,
                input,
                output: r.u32("output_length")?,
                ids: r.ids("hash_ids")?,
            },
        });
    }
    out.sort_by(|a, b| {
        a.blocks
            .at_ms
            .total_cmp(&b.blocks.at_ms)
            .then(a.blocks.line.cmp(&b.blocks.line))
    });
    Ok(out)
}

/// The threads of a Bailian trace.
pub fn import(path: &Path, anchors: AnchorRule) -> anyhow::Result<Vec<Thread>> {
    let requests = read(path)?;
    let index: HashMap<i64, usize> = requests.iter().enumerate().map(|(i, r)| (r.chat, i)).collect();
    // The root of each request, following parents present in the file (a cycle stops the walk).
    let root = |mut i: usize| {
        for _ in 0..requests.len() {
            match index.get(&requests[i].parent) {
                Some(&p) if requests[i].parent >= 0 && p != i => i = p,
                _ => break,
            }
        }
        i
    };
    let mut session_of_root: HashMap<usize, usize> = HashMap::new();
    let mut sessions: Vec<Vec<usize>> = Vec::new();
    for i in 0..requests.len() {
        let s = *session_of_root.entry(root(i)).or_insert_with(|| {
            sessions.push(Vec::new());
            sessions.len() - 1
        });
        sessions[s].push(i);
    }
    let naming = Naming {
        path,
        prefix: "bl",
        block_tokens: BLOCK_TOKENS,
        agent: &|i, anchor| match anchor {
            None => format!("bl/{}", requests[i].kind),
            Some(id) => format!("bl/{}/agent-{id}", requests[i].kind),
        },
        tail: &|i| format!("bl/chat-{}/tail", requests[i].chat),
        session: &|first| format!("bl/chat-{}", requests[first].chat),
        // Not emitted: a chat's last request in the trace's window need not be its end.
        closes: false,
    };
    hashed::threads(&requests, &sessions, anchors, &naming)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written records in the documented format (the published files were not available).
    const SAMPLE: &str = r#"{"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 40, "output_length": 12, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 170, "parent_chat_id": -1, "timestamp": 61.5, "input_length": 35, "output_length": 8, "type": "search", "turn": 1, "hash_ids": [1, 2, 9]}
{"chat_id": 160, "parent_chat_id": 159, "timestamp": 62.5, "input_length": 80, "output_length": 20, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4, 5]}
{"chat_id": 161, "parent_chat_id": 160, "timestamp": 70.0, "input_length": 100, "output_length": 20, "type": "text", "turn": 3, "hash_ids": [1, 2, 3, 4, 5, 6, 7]}
"#;

    #[test]
    fn turns_follow_their_parents_and_shared_blocks_are_the_anchor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qwen_traceA_blksz_16.jsonl");
        std::fs::write(&path, SAMPLE).unwrap();
        let threads = import(&path, AnchorRule::SharedPrefix).unwrap();
        assert_eq!(threads.len(), 2);
        let chat = &threads[0];
        assert_eq!(chat.session, "bl/chat-159");
        assert_eq!(chat.calls.len(), 3);
        assert!((chat.calls[1].gap_ms - 1386.0).abs() < 1e-6);
        assert!((chat.calls[2].gap_ms - 7500.0).abs() < 1e-6);
        // Blocks 1 and 2 are in both conversations: the anchor; block 3 is one conversation's.
        let p = &chat.calls[0].prompt;
        assert_eq!(p[0].seg, "sys/bl/1");
        assert_eq!(p[2].seg, "bl/3");
        assert_eq!((p[2].tokens, p.len()), (8, 3), "the last id covers the partial block");
        assert_eq!(chat.calls[0].agent, "bl/text/agent-2");
        assert_eq!(threads[1].calls[0].agent, "bl/search/agent-2");
    }

    #[test]
    fn a_chat_id_used_twice_is_an_error_naming_both_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let line = r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]}"#;
        std::fs::write(&path, format!("{line}\n{line}\n")).unwrap();
        let e = import(&path, AnchorRule::None).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("line 1") && e.contains("chat_id"),
            "{e}"
        );
    }
}
