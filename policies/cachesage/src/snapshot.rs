//! CacheSage's snapshot: agents, the transition windows, live sessions and the clocks — enough for
//! a new instance (or version) to continue exactly where this one was. Derived data (the survival
//! graph) is rebuilt, not stored.

use agentrt_sdk::state::{Reader, Writer};

use crate::agents::Agent;
use crate::sessions::Session;
use crate::{CacheSage, Params};

const MAGIC: [u8; 4] = *b"CSG1";
const VERSION: u16 = 1;

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
        w.u32(a.anchor_blocks).u32(a.anchor_blocks_max).u32(a.warmed_at);
    }
    w.u16(p.transitions.states() as u16);
    for src in 0..p.transitions.states() {
        let ring = p.transitions.ordered_ring(src);
        w.u8(ring.len() as u8);
        for dst in ring {
            w.u8(dst);
        }
    }
    w.u32(p.sessions.len() as u32);
    for s in p.sessions.iter() {
        w.u64(s.id).u8(s.agent).u32(s.stamp);
    }
    w.finish()
}

pub fn read(state: &[u8], params: Params) -> Result<CacheSage, String> {
    let (mut r, version) = Reader::new(state, MAGIC)?;
    if version != VERSION {
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
            anchor_blocks: r.u32()?,
            anchor_blocks_max: r.u32()?,
            warmed_at: r.u32()?,
        };
        if slot >= capacity {
            return Err(format!(
                "snapshot has an agent in slot {slot} but max-agents is {capacity}"
            ));
        }
        p.agents.restore_slot(slot, agent);
    }
    // Rows map by agent slot; the START row is the last one, whatever the sizes.
    let rows = r.u16()? as usize;
    for row in 0..rows {
        let len = r.u8()? as usize;
        let mut ring = Vec::with_capacity(len);
        for _ in 0..len {
            let dst = r.u8()? as usize;
            // END was the last column of the writer's matrix.
            ring.push(if dst == rows - 1 {
                p.transitions.end() as u8
            } else {
                dst as u8
            });
        }
        let src = if row == rows - 1 { p.transitions.start() } else { row };
        if src < p.transitions.states() {
            p.transitions.set_row(src, &ring);
        }
    }
    let sessions = r.u32()? as usize;
    let mut restored = Vec::with_capacity(sessions.min(4096));
    for _ in 0..sessions {
        restored.push(Session {
            id: r.u64()?,
            agent: r.u8()?,
            stamp: r.u32()?,
        });
    }
    p.sessions.restore(restored);
    r.finish()?;
    Ok(p)
}
