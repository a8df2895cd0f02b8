//! Claude Code conversations from `callanjfox/kv-cache-tester` (`traces/trace_NNNN.json`,
//! Apache-2.0; its docs/trace_replay_tester.md documents the format): per conversation
//! `tool_tokens`, `system_tokens` (Anthropic's order: tools, system, then messages), and
//! `requests`, each with `in`, `out`, `hash_ids` (64-token blocks, `floor(in / 64)` ids, local to
//! the conversation), `think_time` (s the client waited after the previous response), `api_time`,
//! `t`, `stop` (`tool_use`, `end_turn`, …); a `type: "subagent"` entry holds a subagent's own
//! requests (its `t` is when the parent spawned it).
//!
//! Mapping: one session per conversation thread (the main thread, and each subagent); the blocks
//! inside `tool_tokens` + `system_tokens` are the anchor (`tools/…`, `sys/…`) — the source says
//! where they are; a call comes `think_time` after the previous one finished (the tester's default
//! `think-only` timing; `t[n] − t[n−1] − api_time[n−1]` where `think_time` is absent), never longer
//! than the two calls lie apart (`CcWaits::Bounded`: after an untimed call the recorder's
//! `think_time` counts that call too); `stop:
//! tool_use` is the trace's `tool_call`. Hints: a thread's last call closes its session
//! (`hints.closes`: the conversation, or the subagent's run, is over); after any other call the
//! session waits for a tool when it stopped with `tool_use`, for the user otherwise
//! (`hints.wait.kind`). The records name no tool and no expected duration (their fields: `t`,
//! `in`, `out`, `hash_ids`, `input_types`, `output_types`, `stop`, `api_time`, `think_time`), so
//! the waits carry neither. Conversations start at Poisson times whose mean gap puts
//! `--users` conversations in progress at once on an unloaded engine (their length = Σ think +
//! api time); a subagent starts at its parent's start plus its `t`. Anchors are the
//! conversation's own (`--anchors source`), as the ids are local; `--anchors shared-tools` names
//! tool-definition blocks by position instead, so every conversation shares them — the
//! assumption behind the tester's `--warm-prefix-pct`, not something the trace says.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum;
use serde_json::Value;

use super::blocks::segments;
use super::record::Record;
use super::threads::{Call, Thread};
use crate::rng::Rng;
use crate::trace::WaitKind;

/// The tester's block size (tokens).
pub const BLOCK_TOKENS: u32 = 64;

/// Where the anchor blocks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CcAnchors {
    /// Each conversation's own tool + system blocks (the source's ids are local).
    Source,
    /// Tool-definition blocks shared by every conversation (by position); system blocks local.
    SharedTools,
}

impl CcAnchors {
    /// The rule as the import's summary line names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::SharedTools => "shared-tools",
        }
    }
}

/// How long a call waits after the previous one finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CcWaits {
    /// `think_time`, but never longer than the time between the two calls' starts (`t[n] −
    /// t[n−1]`). The recorder measures `think_time` from the last response it timed: after a call
    /// with no `api_time` (15 % of cc100's calls follow one) it counts that call's whole life and
    /// every earlier untimed one too — 199 s, 218 s, 257 s … where `t` says the calls came 19–50 s
    /// apart. A client cannot have waited after the previous answer longer than the two calls lie
    /// apart, so the bound only removes what the recorder counted twice; where the previous call
    /// is untimed the wait still holds that call's own duration (its `api_time` is unknown).
    Bounded,
    /// `think_time` as recorded (the tester's `think-only` timing without its `--max-delay` cap;
    /// this project's imports before 2026-12-05).
    Recorded,
}

impl CcWaits {
    /// The rule as the import's summary line names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bounded => "bounded by t",
            Self::Recorded => "as recorded",
        }
    }
}

/// What to take from a folder of conversations, and how to time them.
#[derive(Debug, Clone)]
pub struct CcOptions {
    pub anchors: CcAnchors,
    pub waits: CcWaits,
    /// Leave out conversations with a request longer than this (the tester's `--max-context`).
    pub max_context: Option<u32>,
    /// At most this many conversations (file-name order, after `max_context`).
    pub conversations: Option<usize>,
    /// Conversations in progress at once on an unloaded engine (sets the start rate).
    pub users: f64,
    pub seed: u64,
}

/// One conversation as read: its id and the threads it holds (main first), start times relative.
struct Conversation {
    id: String,
    threads: Vec<Thread>,
    /// Σ think + api time of the main thread (ms): how long it lasts unloaded.
    length_ms: f64,
}

/// The conversation files under `src` (a file, or a folder's `*.json` in name order).
pub fn files(src: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if src.is_file() {
        return Ok(vec![src.to_path_buf()]);
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(src)
        .with_context(|| format!("reading folder {}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    anyhow::ensure!(!out.is_empty(), "{}: no .json conversation files", src.display());
    Ok(out)
}

/// A subagent met in a thread: when it was spawned (s from the thread's start), its id, its entry.
type Spawn = (f64, String, Value);

/// One thread as read: its calls, the subagents it spawned, and its unloaded length (ms).
type ThreadRead = (Vec<Call>, Vec<Spawn>, f64);

struct Reader<'a> {
    file: &'a str,
    conv: &'a str,
    anchors: CcAnchors,
    waits: CcWaits,
}

impl Reader<'_> {
    /// The calls of one thread (`requests` of a conversation or a subagent), and the subagents
    /// met on the way as (spawn time in s from the thread's start, the subagent's entry).
    fn thread(
        &self,
        requests: &[Value],
        path: &str,
        tool_tokens: u32,
        system_tokens: u32,
        thread: &str,
        max_in: &mut u32,
    ) -> anyhow::Result<ThreadRead> {
        let mut calls = Vec::new();
        let mut subagents = Vec::new();
        let mut length_ms = 0.0;
        let mut previous: Option<(f64, f64)> = None; // (t, api_time) of the previous call
        for (i, value) in requests.iter().enumerate() {
            let r = Record::new(value, format!("{}: {path}[{i}]", self.file))?;
            if r.str_opt("type")? == Some("subagent") {
                let id = r.str_opt("agent_id")?.unwrap_or("subagent").to_string();
                subagents.push((r.time("t")?, id, value.clone()));
                continue;
            }
            let input = r.u32("in")?;
            if input == 0 {
                return Err(r.err("in", "a prompt of 0 tokens"));
            }
            *max_in = (*max_in).max(input);
            let ids = r.ids("hash_ids")?;
            let t = r.time("t")?;
            let api = r.time_opt("api_time")?.unwrap_or(0.0);
            let think = match (r.time_opt("think_time")?, previous) {
                (Some(x), Some((pt, _))) if self.waits == CcWaits::Bounded => x.min((t - pt).max(0.0)),
                (Some(x), _) => x,
                (None, Some((pt, papi))) => (t - pt - papi).max(0.0),
                (None, None) => 0.0,
            };
            previous = Some((t, api));
            length_ms += (think + api) * 1000.0;
            let anchor_tokens = tool_tokens + system_tokens;
            let (conv, shared) = (self.conv, self.anchors == CcAnchors::SharedTools);
            let name = |j: usize, id: u64| {
                let end = (j as u32 + 1) * BLOCK_TOKENS;
                if end <= tool_tokens {
                    if shared {
                        format!("tools/claude-code/{j}")
                    } else {
                        format!("tools/{conv}/{id}")
                    }
                } else if end <= anchor_tokens {
                    format!("sys/{conv}/{id}")
                } else {
                    format!("cc/{conv}/{id}")
                }
            };
            let prompt = segments(
                &ids,
                BLOCK_TOKENS,
                input,
                &name,
                &format!("cc/{conv}/{thread}/{i}/tail"),
            )
            .map_err(|e| anyhow::anyhow!("{}: {path}[{i}]: {e}", self.file))?;
            calls.push(Call {
                agent: format!("{conv}/{thread}"),
                gap_ms: think * 1000.0,
                prompt,
                output_tokens: r.u32("out")?,
                tool_call: r.str_opt("stop")? == Some("tool_use"),
                wait: Some(match r.str_opt("stop")? {
                    Some("tool_use") => WaitKind::Tool,
                    _ => WaitKind::User,
                }),
            });
        }
        Ok((calls, subagents, length_ms))
    }

    fn conversation(&self, doc: &Value, max_in: &mut u32) -> anyhow::Result<Conversation> {
        let top = Record::new(doc, self.file.to_string())?;
        if let Some(block) = top.get("block_size") {
            anyhow::ensure!(
                block.as_u64() == Some(u64::from(BLOCK_TOKENS)),
                "{}: block_size {block}: only {BLOCK_TOKENS}-token blocks are supported",
                self.file
            );
        }
        let requests = top
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| top.err("requests", "expected an array of requests"))?;
        let (calls, subagents, length_ms) = self.thread(
            requests,
            "requests",
            top.u32("tool_tokens")?,
            top.u32("system_tokens")?,
            "main",
            max_in,
        )?;
        let mut threads = vec![Thread {
            session: self.conv.to_string(),
            start_ms: 0.0,
            calls,
            closes: true,
        }];
        // Subagents (and theirs), each starting where its parent spawned it.
        let mut pending: Vec<(f64, String, Value, String)> = subagents
            .into_iter()
            .map(|(t, id, v)| (t * 1000.0, id, v, "requests".to_string()))
            .collect();
        while let Some((start_ms, id, value, parent_path)) = pending.pop() {
            let path = format!("{parent_path}/subagent {id}");
            let sub = Record::new(&value, format!("{}: {path}", self.file))?;
            let requests = sub
                .get("requests")
                .and_then(Value::as_array)
                .ok_or_else(|| sub.err("requests", "expected an array of requests"))?;
            let (calls, nested, _) = self.thread(
                requests,
                &format!("{path}.requests"),
                sub.u32("tool_tokens")?,
                sub.u32("system_tokens")?,
                &id,
                max_in,
            )?;
            pending.extend(
                nested
                    .into_iter()
                    .map(|(t, nid, v)| (start_ms + t * 1000.0, nid, v, path.clone())),
            );
            if !calls.is_empty() {
                threads.push(Thread {
                    session: format!("{}/{id}", self.conv),
                    start_ms,
                    calls,
                    closes: true,
                });
            }
        }
        Ok(Conversation {
            id: self.conv.to_string(),
            threads,
            length_ms,
        })
    }
}

/// The threads of the conversations under `src`, and the conversations' ids taken.
pub fn import(src: &Path, options: &CcOptions) -> anyhow::Result<(Vec<Thread>, Vec<String>)> {
    anyhow::ensure!(
        options.users.is_finite() && options.users > 0.0,
        "--users must be a positive number"
    );
    let mut conversations = Vec::new();
    for path in files(src)? {
        if options.conversations.is_some_and(|n| conversations.len() >= n) {
            break;
        }
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {file}"))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{file}: not valid JSON: {e}"))?;
        let stem = path
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().to_string());
        let conv = doc.get("id").and_then(Value::as_str).unwrap_or(&stem).to_string();
        let reader = Reader {
            file: &file,
            conv: &conv,
            anchors: options.anchors,
            waits: options.waits,
        };
        let mut max_in = 0;
        let c = reader.conversation(&doc, &mut max_in)?;
        if options.max_context.is_some_and(|m| max_in > m) || c.threads[0].calls.is_empty() {
            continue;
        }
        conversations.push(c);
    }
    anyhow::ensure!(
        !conversations.is_empty(),
        "{}: no conversation left after --max-context",
        src.display()
    );
    // Poisson starts: mean gap = mean unloaded length / users, so ~users are in progress at once.
    let mean_ms = conversations.iter().map(|c| c.length_ms).sum::<f64>() / conversations.len() as f64;
    let gap_ms = mean_ms / options.users;
    let mut rng = Rng::new(options.seed);
    let mut at = 0.0;
    let mut threads = Vec::new();
    let mut ids = Vec::new();
    for (k, c) in conversations.into_iter().enumerate() {
        if k > 0 {
            at += rng.exp(gap_ms);
        }
        ids.push(c.id);
        for mut t in c.threads {
            t.start_ms += at;
            threads.push(t);
        }
    }
    Ok((threads, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-written conversation in the documented format (not one of the published traces):
    /// tools 130 tokens + system 70 → the first three 64-token blocks are the anchor.
    const CONVERSATION: &str = r#"{
      "id": "conv-a", "block_size": 64, "tool_tokens": 130, "system_tokens": 70,
      "requests": [
        {"t": 0.0, "type": "n", "in": 300, "out": 40, "hash_ids": [1, 2, 3, 4], "stop": "tool_use", "api_time": 2.0, "think_time": 0.0},
        {"t": 5.0, "type": "subagent", "agent_id": "agent_001", "tool_tokens": 64, "system_tokens": 64,
         "requests": [{"t": 0.0, "type": "n", "in": 200, "out": 10, "hash_ids": [50, 51, 52], "stop": "end_turn", "think_time": 0.0}]},
        {"t": 9.0, "type": "n", "in": 420, "out": 30, "hash_ids": [1, 2, 3, 4, 5, 6], "stop": "end_turn", "api_time": 3.0, "think_time": 7.0}
      ]
    }"#;

    fn options() -> CcOptions {
        CcOptions {
            anchors: CcAnchors::Source,
            waits: CcWaits::Bounded,
            max_context: None,
            conversations: None,
            users: 1.0,
            seed: 1,
        }
    }

    #[test]
    fn a_conversation_maps_to_sessions_with_its_anchor_and_timing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace_0001.json"), CONVERSATION).unwrap();
        let (threads, ids) = import(dir.path(), &options()).unwrap();
        assert_eq!(ids, ["conv-a"]);
        assert_eq!(threads.len(), 2, "the main thread and its subagent");
        let main = &threads[0];
        let p = &main.calls[0].prompt;
        let names: Vec<&str> = p.iter().map(|s| s.seg.as_str()).collect();
        // 130 tool tokens: two full tool blocks; block 3 ends inside the system prompt (192 ≤ 200).
        assert_eq!(
            names,
            [
                "tools/conv-a/1",
                "tools/conv-a/2",
                "sys/conv-a/3",
                "cc/conv-a/4",
                "cc/conv-a/main/0/tail"
            ]
        );
        assert_eq!(p[4].tokens, 300 - 256);
        assert!(main.calls[0].tool_call && !main.calls[1].tool_call);
        assert_eq!(main.calls[1].gap_ms, 7000.0);
        // The second call extends the first's blocks: the same segments.
        assert_eq!(main.calls[1].prompt[..4], main.calls[0].prompt[..4]);
        let sub = &threads[1];
        assert_eq!((sub.session.as_str(), sub.start_ms), ("conv-a/agent_001", 5000.0));
        assert_eq!(sub.calls[0].agent, "conv-a/agent_001");
        assert_eq!(sub.calls[0].prompt[0].seg, "tools/conv-a/50");
        assert_eq!(sub.calls[0].prompt[1].seg, "sys/conv-a/51");
    }

    #[test]
    fn shared_tools_and_the_context_filter() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace_0001.json"), CONVERSATION).unwrap();
        std::fs::write(
            dir.path().join("trace_0002.json"),
            CONVERSATION.replace("conv-a", "conv-b"),
        )
        .unwrap();
        let shared = CcOptions {
            anchors: CcAnchors::SharedTools,
            ..options()
        };
        let (threads, _) = import(dir.path(), &shared).unwrap();
        let a = &threads[0].calls[0].prompt;
        let b = &threads.iter().find(|t| t.session == "conv-b").unwrap().calls[0].prompt;
        assert_eq!(a[..2], b[..2], "tool blocks are shared");
        assert_ne!(a[2], b[2], "system blocks are each conversation's");
        let small = CcOptions {
            max_context: Some(400),
            ..options()
        };
        let e = import(dir.path(), &small).unwrap_err().to_string();
        assert!(e.contains("no conversation left"), "{e}");
        let one = CcOptions {
            conversations: Some(1),
            ..options()
        };
        assert_eq!(import(dir.path(), &one).unwrap().1, ["conv-a"]);
    }

    /// The recorder's pattern (trace_0348's first calls, shortened): the call at 18 s has no
    /// `api_time`, so the next call's `think_time` (22 s) is counted from the response at 7.99 s,
    /// not from the call before it, which the next call follows by 12 s.
    const UNTIMED_CALL: &str = r#"{
      "id": "conv-u", "block_size": 64, "tool_tokens": 64, "system_tokens": 64,
      "requests": [
        {"t": 0.0, "type": "s", "in": 300, "out": 40, "hash_ids": [1, 2, 3, 4], "stop": "tool_use", "api_time": 7.99, "think_time": 0.0},
        {"t": 18.0, "type": "s", "in": 320, "out": 20, "hash_ids": [1, 2, 3, 4, 5], "stop": "", "think_time": 10.0},
        {"t": 30.0, "type": "s", "in": 420, "out": 30, "hash_ids": [1, 2, 3, 4, 5, 6], "stop": "tool_use", "api_time": 14.32, "think_time": 22.0},
        {"t": 58.0, "type": "s", "in": 500, "out": 30, "hash_ids": [1, 2, 3, 4, 5, 6, 7], "stop": "", "think_time": 14.0}
      ]
    }"#;

    #[test]
    fn a_wait_after_an_untimed_call_is_bounded_by_the_calls_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace_0001.json"), UNTIMED_CALL).unwrap();
        let gaps = |waits| {
            let (threads, _) = import(dir.path(), &CcOptions { waits, ..options() }).unwrap();
            threads[0].calls.iter().map(|c| c.gap_ms).collect::<Vec<_>>()
        };
        // 22 s after the response at 7.99 s is 12 s after the untimed call at 18 s; the others
        // are consistent with `t` and stay as recorded.
        assert_eq!(gaps(CcWaits::Bounded), [0.0, 10_000.0, 12_000.0, 14_000.0]);
        assert_eq!(gaps(CcWaits::Recorded), [0.0, 10_000.0, 22_000.0, 14_000.0]);
    }

    #[test]
    fn a_bad_request_names_the_file_the_request_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.json"),
            CONVERSATION.replace("\"in\": 420", "\"in\": \"many\""),
        )
        .unwrap();
        let e = import(dir.path(), &options()).unwrap_err().to_string();
        assert!(
            e.contains("t.json") && e.contains("requests[2]") && e.contains("`in`"),
            "{e}"
        );
    }
}
