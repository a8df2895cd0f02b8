//! Mooncake's FAST '25 traces (`kvcache-ai/Mooncake`, `FAST25-release/traces/*.jsonl`,
//! Apache-2.0): one request per line — `timestamp` (ms of arrival), `input_length`,
//! `output_length`, `hash_ids` (512-token blocks, chained: an id names its block and everything
//! before it; the last id covers the partial block).
//!
//! The source has no sessions. `--sessions request` (the default) makes every request its own
//! session, arriving at its timestamp. `--sessions chained` infers conversations: a request
//! continues the earlier request whose full blocks (at least two) its prompt starts with, the
//! longest such, latest among equals, each earlier request continued at most once; it then comes
//! the recorded arrival gap after its predecessor finished (the replay's `after_ms`).

use std::collections::HashMap;
use std::path::Path;

use clap::ValueEnum;

use super::anchors::AnchorRule;
use super::hashed::{self, HashedRequest, Naming};
use super::record::{read_jsonl, Record};
use super::threads::Thread;

/// Mooncake's block size (tokens).
pub const BLOCK_TOKENS: u32 = 512;

/// How requests become sessions where the source has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SessionRule {
    /// Each request its own session.
    Request,
    /// Turns chained into conversations by their block prefixes.
    Chained,
}

/// Fewest full blocks a predecessor must have for a request to continue it: one block is what
/// unrelated requests with one system prompt share.
const MIN_CHAIN_BLOCKS: usize = 2;

type Request = HashedRequest;

fn read(path: &Path) -> anyhow::Result<Vec<Request>> {
    let file = path.display().to_string();
    let mut out = Vec::new();
    for (line, value) in read_jsonl(path)? {
        let r = Record::new(&value, format!("{file} line {line}"))?;
        let input = r.u32("input_length")?;
        let ids = r.ids("hash_ids")?;
        if input == 0 {
            return Err(r.err("input_length", "a prompt of 0 tokens"));
        }
        out.push(Request {
            line,
            at_ms: r.time("timestamp")?,
            input,
            output: r.u32("output_length")?,
            ids,
        });
    }
    // Replayed in arrival order (the file is, but a merged file need not be).
    out.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms).then(a.line.cmp(&b.line)));
    Ok(out)
}

/// For each request (arrival order), the request it continues, if any.
fn chain(requests: &[Request]) -> Vec<Option<usize>> {
    let mut by_full_prefix: HashMap<&[u64], Vec<usize>> = HashMap::new();
    let mut continued = vec![false; requests.len()];
    let mut previous = vec![None; requests.len()];
    for (i, r) in requests.iter().enumerate() {
        for k in (MIN_CHAIN_BLOCKS..=r.ids.len()).rev() {
            let Some(candidates) = by_full_prefix.get(&r.ids[..k]) else {
                continue;
            };
            if let Some(&q) = candidates.iter().rev().find(|&&q| !continued[q]) {
                continued[q] = true;
                previous[i] = Some(q);
                break;
            }
        }
        let full = ((r.input / BLOCK_TOKENS) as usize).min(r.ids.len());
        if full >= MIN_CHAIN_BLOCKS {
            by_full_prefix.entry(&r.ids[..full]).or_default().push(i);
        }
    }
    previous
}

/// The threads of a Mooncake trace.
pub fn import(path: &Path, sessions: SessionRule, anchors: AnchorRule) -> anyhow::Result<Vec<Thread>> {
    let requests = read(path)?;
    let previous = match sessions {
        SessionRule::Request => vec![None; requests.len()],
        SessionRule::Chained => chain(&requests),
    };
    // Each request joins its predecessor's session, or starts one.
    let mut session_of = vec![0usize; requests.len()];
    let mut sessions: Vec<Vec<usize>> = Vec::new();
    for i in 0..requests.len() {
        let s = match previous[i] {
            Some(q) => session_of[q],
            None => {
                sessions.push(Vec::new());
                sessions.len() - 1
            }
        };
        session_of[i] = s;
        sessions[s].push(i);
    }
    let stem = path
        .file_stem()
        .map_or("mooncake".into(), |s| s.to_string_lossy().to_string());
    let naming = Naming {
        path,
        prefix: "mc",
        block_tokens: BLOCK_TOKENS,
        agent: &|_, anchor| match anchor {
            None => "mc/user".to_string(),
            Some(id) => format!("mc/agent-{id}"),
        },
        tail: &|i| format!("mc/line-{}/tail", requests[i].line),
        session: &|first| format!("{stem}/{}", requests[first].line),
        // A session is over at its last request's answer (`hints.closes`): a chained
        // conversation's last turn in the trace, or the one request a session of its own holds
        // (what a framework that sends each request as its own session knows).
        closes: true,
    };
    hashed::threads(&requests, &sessions, anchors, &naming)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written records in the format (not from the published files).
    const SAMPLE: &str = r#"{"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2]}
{"timestamp": 10, "input_length": 700, "output_length": 5, "hash_ids": [0, 5]}
{"timestamp": 3000, "input_length": 1700, "output_length": 30, "hash_ids": [0, 1, 3, 4]}
{"timestamp": 3500, "input_length": 1600, "output_length": 30, "hash_ids": [0, 1, 6, 7]}
"#;

    fn sample() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conversation_trace.jsonl");
        std::fs::write(&path, SAMPLE).unwrap();
        (dir, path)
    }

    #[test]
    fn one_session_per_request_keeps_arrival_times_and_block_sharing() {
        let (_dir, path) = sample();
        let threads = import(&path, SessionRule::Request, AnchorRule::FirstBlock).unwrap();
        assert_eq!(threads.len(), 4);
        assert_eq!(threads[2].start_ms, 3000.0);
        let p = &threads[0].calls[0].prompt;
        assert_eq!((p[0].seg.as_str(), p[0].tokens), ("sys/mc/0", 512));
        assert_eq!((p[2].seg.as_str(), p[2].tokens), ("mc/2", 1100 - 1024));
        assert_eq!(threads[0].calls[0].agent, "mc/agent-0");
        // Requests 1 and 3 share two blocks: the same segments.
        assert_eq!(threads[0].calls[0].prompt[..2], threads[2].calls[0].prompt[..2]);
        // A session of one request is over at its answer: a framework knows it.
        assert!(threads.iter().all(|t| t.closes));
    }

    #[test]
    fn chaining_follows_the_longest_full_block_prefix_once() {
        let (_dir, path) = sample();
        let threads = import(&path, SessionRule::Chained, AnchorRule::FirstBlock).unwrap();
        // Line 3 continues line 1 (its full blocks 0, 1); line 4 would too, but line 1 is taken.
        assert_eq!(threads.len(), 3);
        let first = &threads[0];
        assert_eq!(first.calls.len(), 2);
        assert_eq!(first.calls[1].gap_ms, 3000.0);
        assert!(threads.iter().all(|t| t.calls.len() <= 2));
    }

    #[test]
    fn a_bad_record_names_its_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n{\"timestamp\": -5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n").unwrap();
        let e = import(&path, SessionRule::Request, AnchorRule::None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("timestamp"), "{e}");
        std::fs::write(
            &path,
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0, 1]}\n",
        )
        .unwrap();
        let e = import(&path, SessionRule::Request, AnchorRule::None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains("more than"), "{e}");
    }
}
