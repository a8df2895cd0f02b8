//! CacheSage's snapshot: agents, the transition windows, live sessions and the clocks — enough for
//! a new instance (or version) to continue exactly where this one was. Derived data (the survival
//! graph) is rebuilt, not stored.
//!
//! Format 2 keys transitions and sessions by session state ([`crate::classic::nodes`]); format 1 (by agent
//! alone, before states had depths) is still read: its rows and sessions land in each agent's
//! deepest bucket, the state that stands for "somewhere in a session". Format 3 adds what each node
//! learned about continuation ([`crate::classic::continuity`]; formats 1 and 2 start that afresh) and puts
//! the sessions last, most recent first, so that a snapshot stops inside [`STATE_BUDGET`] whatever
//! the caps.

use agentrt_sdk::state::{Reader, Writer};

use crate::classic::agents::Agent;
use crate::classic::continuity::NodeContinuity;
use crate::classic::nodes;
use crate::classic::sessions::{Session, NO_NODE};
use crate::classic::{CacheSage, Params};

const MAGIC: [u8; 4] = *b"CSG1";
const VERSION: u16 = 3;
/// The most a snapshot may take: CacheSage's state budget.
pub const STATE_BUDGET: usize = 20 * 1024;
/// A session in a snapshot: id, node, depth, requests in flight, stamp.
const SESSION_BYTES: usize = 8 + 1 + 1 + 1 + 4;

pub fn write(p: &CacheSage) -> Vec<u8> {
    let mut w = Writer::new(MAGIC, VERSION);
    w.u32(p.step).u32(p.acts);
    let agents: Vec<_> = p.agents.iter().collect();
    w.u16(agents.len() as u16);
    for (slot, a) in agents {
        w.u8(slot as u8)
            .u32(a.handle)
            .u64(a.anchor_hash)
            .u32(a.anchor_tokens)
            .u32(a.last_seen);
        w.u32(a.residency.blocks).u32(a.residency.max).u32(a.warmed_at);
    }
    w.u16(p.transitions.states() as u16);
    for src in 0..p.transitions.states() {
        let ring = p.transitions.ordered_ring(src);
        w.u8(ring.len() as u8);
        for dst in ring {
            w.u8(dst);
        }
    }
    let learned: Vec<_> = p.continuity.learned().collect();
    w.u16(learned.len() as u16);
    for (node, c) in learned {
        w.u8(node as u8).u16(c.calls).u16(c.extended).u32(c.partial_shared);
    }
    // Sessions last, most recent first, as many as the budget leaves room for: at the default
    // caps everything else takes at most ~9 KB and the sessions table 15 KB, so in the worst case
    // the least recently active sessions are not carried over (a restored policy treats them as
    // ended; they come back with their next request).
    let room = STATE_BUDGET.saturating_sub(w.len() + 4) / SESSION_BYTES;
    let mut sessions: Vec<_> = p.sessions.iter().collect();
    sessions.sort_by_key(|s| std::cmp::Reverse(s.stamp));
    sessions.truncate(room);
    w.u32(sessions.len() as u32);
    for s in sessions {
        w.u64(s.id).u8(s.node).u8(s.calls).u8(s.in_flight).u32(s.stamp);
    }
    w.finish()
}

pub fn read(state: &[u8], params: Params) -> Result<CacheSage, String> {
    let (mut r, version) = Reader::new(state, MAGIC)?;
    if version > VERSION || version == 0 {
        return Err(format!(
            "snapshot format {version} is newer than this CacheSage ({VERSION})"
        ));
    }
    let mut p = CacheSage::with_params(params);
    p.step = r.u32()?;
    p.acts = r.u32()?;
    let agents = r.u16()? as usize;
    let capacity = p.agents.capacity();
    for _ in 0..agents {
        let slot = r.u8()? as usize;
        let agent = Agent {
            handle: r.u32()?,
            anchor_hash: r.u64()?,
            anchor_tokens: r.u32()?,
            last_seen: r.u32()?,
            residency: crate::anchor::Residency {
                blocks: r.u32()?,
                max: r.u32()?,
            },
            warmed_at: r.u32()?,
        };
        if slot >= capacity {
            return Err(format!(
                "snapshot has an agent in slot {slot} but max-agents is {capacity}"
            ));
        }
        p.agents.restore_slot(slot, agent);
    }
    // Rows map by state; the START row (and END column) is the last one, whatever the sizes.
    let rows = r.u16()? as usize;
    let terminal = p.transitions.start();
    let state = |index: usize| -> usize {
        match index {
            i if i + 1 == rows => terminal,
            i if version == 1 => nodes::node(i, nodes::DEPTHS as u32 - 1),
            i => i,
        }
    };
    for row in 0..rows {
        let len = r.u8()? as usize;
        let mut ring = Vec::with_capacity(len);
        for _ in 0..len {
            let dst = state(r.u8()? as usize);
            ring.push(dst.min(usize::from(u8::MAX)) as u8);
        }
        let src = state(row);
        if src < p.transitions.states() {
            p.transitions.set_row(src, &ring);
        }
    }
    if version >= 3 {
        for _ in 0..r.u16()? {
            let node = r.u8()? as usize;
            let c = NodeContinuity {
                calls: r.u16()?,
                extended: r.u16()?,
                partial_shared: r.u32()?,
            };
            if c.extended > c.calls {
                return Err(format!(
                    "snapshot: node {node} extended {} of {} calls",
                    c.extended, c.calls
                ));
            }
            p.continuity.restore(node, c);
        }
    }
    let sessions = r.u32()? as usize;
    let mut restored = Vec::with_capacity(sessions.min(4096));
    for _ in 0..sessions {
        let id = r.u64()?;
        let node = r.u8()?;
        // Format 1 had no depth and no in-flight count: the deepest bucket, nothing in flight.
        let (node, calls, in_flight) = match version {
            1 if node == NO_NODE => (NO_NODE, nodes::DEPTHS as u8, 0),
            1 => (
                nodes::node(node as usize, nodes::DEPTHS as u32 - 1) as u8,
                nodes::DEPTHS as u8,
                0,
            ),
            _ => (node, r.u8()?, r.u8()?),
        };
        let node = if (node as usize) < terminal { node } else { NO_NODE };
        restored.push(Session {
            id,
            node,
            calls,
            in_flight,
            stamp: r.u32()?,
        });
    }
    p.sessions.restore(restored);
    r.finish()?;
    Ok(p)
}
