//! The model's snapshot: the clock, every agent (94 bytes each), then live sessions most recent
//! first, cut at the budget — 20 KB for up to 32 agents, 100 bytes more per agent beyond — so
//! that the state stays bounded whatever the number of sessions. Session times are stored as
//! milliseconds before the snapshot's clock. Derived data (anchor rates, residency, waits) is
//! rebuilt; what the framework said of sessions and the guard's evidence are not kept (they are
//! about sessions in progress, relearned within a turnover).

use agentrt_sdk::state::{Reader, Writer};

use super::agents::{AgentStats, Successor, SUCCESSORS};
use super::sessions::LiveSession;
use super::Model;
use crate::settings::Settings;

/// `CSG1` was the tag of the classic model, removed (CHANGELOG.md): its states are refused.
const MAGIC: [u8; 4] = *b"CSGS";
/// 2: continuity as a share of the previous prompt, and each session's prompt size (format 1,
/// continuity in tokens, is no longer read: start fresh).
const VERSION: u16 = 2;
const BASE_BUDGET: usize = 20 * 1024;
const PER_AGENT_BUDGET: usize = 100;
const AGENTS_IN_BASE: usize = 32;
const SESSION_BYTES: usize = 8 + 4 + 4 + 4 + 2 + 4;
/// `finished` of a session whose call is still running.
const RUNNING: u32 = u32::MAX;

pub fn budget(agents: usize) -> usize {
    BASE_BUDGET + PER_AGENT_BUDGET * agents.saturating_sub(AGENTS_IN_BASE)
}

fn ms_before(now_us: u64, t_us: u64) -> u32 {
    (now_us.saturating_sub(t_us) / 1000).min(u64::from(RUNNING - 1)) as u32
}

/// The snapshot of `m` at host time `now_us`.
pub fn write(m: &Model, now_us: u64) -> Vec<u8> {
    let mut w = Writer::new(MAGIC, VERSION);
    w.u64(now_us);
    let mut agents: Vec<&AgentStats> = m.agents.values().collect();
    agents.sort_by_key(|a| a.handle);
    w.u32(agents.len() as u32);
    for a in &agents {
        w.u32(a.handle)
            .u64(a.anchor_hash)
            .u32(a.anchor_tokens)
            .u64(a.last_seen_us)
            .u32(a.calls);
        w.u64(a.last_first_us).f32(a.first_gap_ms).f32(a.service_ms);
        for s in &a.successors {
            w.u32(s.agent).u16(s.count).f32(s.gap_ms);
        }
        w.u16(a.ends).u16(a.repeats).u16(a.extends).f32(a.shared_mean);
    }
    let mut sessions: Vec<&LiveSession> = m.sessions.values().collect();
    sessions.sort_by_key(|s| std::cmp::Reverse((s.active_us(), s.id)));
    let room = budget(agents.len()).saturating_sub(w.len() + 4) / SESSION_BYTES;
    let kept = sessions.len().min(room);
    w.u32(kept as u32);
    for s in &sessions[..kept] {
        let finished = (s.in_flight == 0).then(|| ms_before(now_us, s.finished_us));
        w.u64(s.id)
            .u32(s.agent)
            .u32(ms_before(now_us, s.arrived_us))
            .u32(finished.unwrap_or(RUNNING))
            .u16(s.in_flight)
            .u32(s.prompt_tokens);
    }
    w.finish()
}

/// The model a snapshot holds, and the host time it was taken at.
pub fn read(state: &[u8], settings: &Settings) -> Result<(Model, u64), String> {
    let (mut r, version) = Reader::new(state, MAGIC).map_err(|e| {
        if state.starts_with(b"CSG1") {
            "snapshot written by CacheSage's classic model, which this build no longer has (start fresh: swap from lru)"
                .to_string()
        } else {
            e
        }
    })?;
    if version != VERSION {
        return Err(format!(
            "snapshot format {version} is not known (this build reads {VERSION}; start fresh: swap from lru)"
        ));
    }
    let mut m = Model::new(settings);
    let now_us = r.u64()?;
    let agents = r.u32()? as usize;
    if agents > settings.max_agents {
        return Err(format!(
            "snapshot holds {agents} agents, more than max-agents = {}",
            settings.max_agents
        ));
    }
    for _ in 0..agents {
        let mut a = AgentStats {
            handle: r.u32()?,
            anchor_hash: r.u64()?,
            anchor_tokens: r.u32()?,
            last_seen_us: r.u64()?,
            calls: r.u32()?,
            last_first_us: r.u64()?,
            first_gap_ms: r.f32()?,
            service_ms: r.f32()?,
            ..Default::default()
        };
        for i in 0..SUCCESSORS {
            a.successors[i] = Successor {
                agent: r.u32()?,
                count: r.u16()?,
                gap_ms: r.f32()?,
            };
        }
        a.ends = r.u16()?;
        a.repeats = r.u16()?;
        a.extends = r.u16()?;
        a.shared_mean = r.f32()?;
        m.agents.insert(a.handle, a);
    }
    let at = |ms: u32| now_us.saturating_sub(u64::from(ms) * 1000);
    for _ in 0..r.u32()? {
        // Fields are read in the order written.
        let s = LiveSession {
            id: r.u64()?,
            agent: r.u32()?,
            arrived_us: at(r.u32()?),
            finished_us: match r.u32()? {
                RUNNING => 0,
                ms => at(ms),
            },
            in_flight: r.u16()?,
            tool_wait: false,
            prompt_tokens: r.u32()?,
        };
        if m.sessions.len() < settings.max_sessions {
            m.sessions.insert(s.id, s);
        }
    }
    r.finish()?;
    Ok((m, now_us))
}
