//! Several tenants on one simulated engine, each ranking only its own blocks.
//!
//! [`TenantArbiter`] is the pool's observer when a replay has cache shares (`sim run --share`):
//! every tenant runs its own instance of the policy, which sees only its tenant's agents, sessions
//! and blocks. When a cached block must be evicted, the arbiter picks the tenant by the shares
//! rule ([`agentrt_runtime::shares::victim_tenant`]) and takes the victim from the evict-first end
//! of that tenant's own ranking. A block belongs to the tenant whose request stored it; named
//! tenants' blocks are salted ([`crate::prepare::tenant_salt`]), so no block is ever shared.
//!
//! Shares bound what a tenant takes as well as what it loses: a new request waits (and the
//! requests behind it go ahead) while admitting it would cut into another tenant's guarantee —
//! otherwise a flood's running requests, which nothing can evict, would fill the guaranteed room.

use agentrt_runtime::shares::{victim_tenant, Share, Usage};
use agentrt_runtime::types::{BlockOp, Event, SideEffect};

use crate::block_pool::{Block, BlockId, BlockPool, FastMap, PoolObserver};
use crate::policies::{PolicyStats, SimPolicy};
use crate::prepare::PreparedTrace;

/// Which tenant owns what: agents by handle, sessions by id, trace requests by uid.
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    /// Tenant of agent handle `h` at index `h` (index 0: no agent).
    agent: Vec<u16>,
    session: FastMap<u16>,
    request: Vec<u16>,
}

impl Ownership {
    pub fn of(trace: &PreparedTrace) -> Self {
        let mut agent = vec![0; trace.agents.len() + 1];
        for a in &trace.agents {
            agent[a.handle as usize] = a.tenant;
        }
        Self {
            agent,
            session: trace.sessions.iter().map(|s| (s.id, s.tenant)).collect(),
            request: trace.requests.iter().map(|r| r.tenant).collect(),
        }
    }

    /// The tenant of the block: the tenant of the agent whose request stored it.
    pub fn block(&self, block: &Block) -> u16 {
        self.agent(block.agent)
    }

    pub fn agent(&self, handle: u32) -> u16 {
        self.agent.get(handle as usize).copied().unwrap_or(0)
    }

    /// The tenant an event concerns, or `None` for one every tenant's policy hears (the engine's load and capacity).
    fn event(&self, event: &Event) -> Option<u16> {
        match event {
            Event::AgentRegistered(a) => Some(self.agent(a.agent)),
            Event::RequestArrival(r) => Some(self.agent(r.agent)),
            Event::RequestFinish(f) => Some(self.agent(f.agent)),
            Event::ToolCall(t) => Some(self.agent(t.agent)),
            Event::ToolReturn(t) => Some(self.agent(t.agent)),
            Event::SessionEnd(e) => Some(self.session.get(&e.session).copied().unwrap_or(0)),
            Event::SessionWait(w) => Some(self.session.get(&w.session).copied().unwrap_or(0)),
            Event::Handoff(h) => Some(self.session.get(&h.session).copied().unwrap_or(0)),
            Event::Block(b) => Some(self.agent(b.agent)),
            Event::EngineLoad(_) | Event::EngineCapacity(_) => None,
        }
    }
}

/// One tenant's policy and what it holds.
struct Tenant {
    share: Share,
    policy: Box<dyn SimPolicy>,
    usage: Usage,
}

/// The pool's observer for a replay with cache shares.
pub struct TenantArbiter {
    name: String,
    tenants: Vec<Tenant>,
    owners: Ownership,
    /// The tenant the last victim came from (its policy is told the block was consumed).
    asked: Option<u16>,
}

impl TenantArbiter {
    /// `policies[t]` ranks tenant `t`'s blocks (tenant indices as in the trace), under `shares[t]`.
    pub fn new(name: &str, owners: Ownership, policies: Vec<Box<dyn SimPolicy>>, shares: Vec<Share>) -> Self {
        assert_eq!(policies.len(), shares.len(), "one share per tenant");
        Self {
            name: name.to_string(),
            tenants: policies
                .into_iter()
                .zip(shares)
                .map(|(policy, share)| Tenant {
                    share,
                    policy,
                    usage: Usage::default(),
                })
                .collect(),
            owners,
            asked: None,
        }
    }

    /// What tenant `t` holds now.
    pub fn usage(&self, t: u16) -> Usage {
        self.tenants[t as usize].usage
    }

    fn tenant(&mut self, t: u16) -> &mut Tenant {
        &mut self.tenants[t as usize]
    }
}

impl PoolObserver for TenantArbiter {
    fn block_event(&mut self, op: BlockOp, block: &Block) {
        let t = self.owners.block(block);
        let tenant = self.tenant(t);
        match op {
            BlockOp::Stored => tenant.usage.cached += 1,
            BlockOp::Removed => {
                tenant.usage.cached -= 1;
                // Only free blocks are evicted.
                tenant.usage.evictable -= 1;
            }
            // A hit on a free block takes it out of the free queue (its count is now 1).
            BlockOp::Touched if block.ref_cnt == 1 => tenant.usage.evictable -= 1,
            BlockOp::Touched | BlockOp::AllCleared => {}
        }
        tenant.policy.block_event(op, block);
    }

    fn freed(&mut self, pool: &BlockPool, block: BlockId) {
        let t = self.owners.block(pool.block(block));
        let tenant = self.tenant(t);
        tenant.usage.evictable += 1;
        tenant.policy.freed(pool, block);
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        let standing: Vec<(Share, Usage)> = self.tenants.iter().map(|t| (t.share, t.usage)).collect();
        let t = victim_tenant(&standing)? as u16;
        self.asked = Some(t);
        let victim = self.tenant(t).policy.victim(pool);
        // The tenant's policy saw only its own blocks; a policy that names none (vLLM's own LRU)
        // gets the tenant's oldest.
        victim.or_else(|| {
            let owners = &self.owners;
            pool.cached_free_blocks().find(|&id| owners.block(pool.block(id)) == t)
        })
    }

    fn consumed(&mut self, block: BlockId) {
        if let Some(t) = self.asked.take() {
            self.tenant(t).policy.consumed(block);
        }
    }

    fn may_take(&self, pool: &BlockPool, agent: u32, blocks: usize) -> bool {
        let standing: Vec<(Share, Usage)> = self.tenants.iter().map(|t| (t.share, t.usage)).collect();
        let room = room_for(
            &standing,
            usize::from(self.owners.agent(agent)),
            pool.num_empty_free() as u64,
        );
        room >= blocks as u64
    }
}

/// Blocks tenant `t` may take now without cutting into another tenant's guarantee: the empty free
/// blocks and whatever it could evict — all of its own evictable blocks, and of others' only what
/// they hold above their guarantee — less what others still lack of their guarantee (room kept
/// for them to grow into, as cgroup's `memory.min` keeps it).
fn room_for(tenants: &[(Share, Usage)], t: usize, empty_free: u64) -> u64 {
    let mut room = empty_free;
    let mut kept_for_others = 0;
    for (i, (share, usage)) in tenants.iter().enumerate() {
        if i == t {
            room += usage.evictable;
        } else {
            room += usage.evictable.min(usage.cached.saturating_sub(share.min_blocks));
            kept_for_others += share.min_blocks.saturating_sub(usage.cached);
        }
    }
    room.saturating_sub(kept_for_others)
}

/// Under cache shares the host tier keeps vLLM's order: its blocks are not divided by tenant.
impl crate::offload::ranked::HostRanker for TenantArbiter {}

impl SimPolicy for TenantArbiter {
    fn name(&self) -> &str {
        &self.name
    }

    fn event(&mut self, event: Event) {
        match self.owners.event(&event) {
            Some(t) => self.tenant(t).policy.event(event),
            None => {
                for tenant in &mut self.tenants {
                    tenant.policy.event(event.clone());
                }
            }
        }
    }

    fn admitted(&mut self, pool: &BlockPool, uid: u32, hashes: &[u64], hit_blocks: usize) {
        let t = self.owners.request.get(uid as usize).copied().unwrap_or(0);
        self.tenant(t).policy.admitted(pool, uid, hashes, hit_blocks);
    }

    fn begin_step(&mut self, now_us: u64) {
        for tenant in &mut self.tenants {
            tenant.policy.begin_step(now_us);
        }
    }

    fn act(&mut self) -> Vec<SideEffect> {
        self.tenants.iter_mut().flat_map(|t| t.policy.act()).collect()
    }

    fn sample_state(&mut self) {
        for tenant in &mut self.tenants {
            tenant.policy.sample_state();
        }
    }

    /// The tenants' figures added up (state: the largest tenant's).
    fn stats(&self) -> PolicyStats {
        let mut sum = PolicyStats::default();
        for t in &self.tenants {
            sum.add(&t.policy.stats());
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(min_blocks: u64, cached: u64, evictable: u64) -> (Share, Usage) {
        (
            Share {
                min_blocks,
                max_blocks: u64::MAX,
            },
            Usage { cached, evictable },
        )
    }

    #[test]
    fn a_tenant_may_not_take_the_room_kept_for_another_tenants_guarantee() {
        // Tenant 0 is guaranteed 100 and holds 40 (30 evictable); tenant 1 has no guarantee.
        let tenants = [tenant(100, 40, 30), tenant(0, 50, 20)];
        // Tenant 1: 200 empty + its own 20 − the 60 tenant 0 still lacks; none of tenant 0's.
        assert_eq!(room_for(&tenants, 1, 200), 160);
        // Tenant 0: the empty blocks, its own 30, and all of tenant 1's evictable 20.
        assert_eq!(room_for(&tenants, 0, 200), 250);
        // Once tenant 0 holds 130, the 30 above its guarantee are fair game, and nothing is kept.
        let tenants = [tenant(100, 130, 50), tenant(0, 50, 20)];
        assert_eq!(room_for(&tenants, 1, 0), 50);
    }
}
