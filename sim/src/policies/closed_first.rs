//! The simplest use of a framework's closings: vLLM's LRU, except that the blocks of sessions the
//! framework closed go first. It hears exactly what a policy component hears of lifecycle hints
//! (`session-end` with reason `closed`, and a closed session's next request reopening it) and
//! nothing else, so it is an online baseline — what the hint alone is worth — against which a
//! learned policy's use of the same hints is judged.

use std::collections::{HashMap, HashSet, VecDeque};

use agentrt_runtime::types::{EndReason, Event};

use crate::block_pool::{BlockId, BlockPool, PoolObserver};
use crate::offload::ranked::HostRanker;

use super::SimPolicy;

/// LRU with closed sessions' own blocks first, oldest first.
///
/// Only a session's own blocks count: content another session reused is session 0 (the pool's
/// convention, as for policy items) and stays in LRU order. A block is freed when its request
/// finishes, which is before the framework's closing arrives, so blocks freed by a session still
/// open wait in `freed_by_open`, and move to the evict-first queue when the session closes.
#[derive(Debug, Default)]
pub struct ClosedFirstLru {
    closed: HashSet<u64>,
    /// Blocks (with their epoch when freed) of sessions not closed, by session.
    freed_by_open: HashMap<u64, Vec<(BlockId, u32)>>,
    /// Closed sessions' freed blocks, in the order they became evictable.
    evict_first: VecDeque<(BlockId, u32)>,
}

impl ClosedFirstLru {
    /// Whether a queued entry still names a cached free block of a session that is still closed:
    /// one reused, evicted or re-freed since (another epoch), or of a reopened session, is not.
    fn still_closed(&self, pool: &BlockPool, id: BlockId, epoch: u32) -> bool {
        let b = pool.block(id);
        b.in_free && b.hash != 0 && b.epoch == epoch && self.closed.contains(&b.session)
    }

    fn close(&mut self, session: u64) {
        self.closed.insert(session);
        if let Some(blocks) = self.freed_by_open.remove(&session) {
            self.evict_first.extend(blocks);
        }
    }

    fn reopen(&mut self, session: u64) {
        // A wrong hint: the session called again. Its queued blocks fail `still_closed` from now.
        self.closed.remove(&session);
    }
}

impl PoolObserver for ClosedFirstLru {
    fn freed(&mut self, pool: &BlockPool, id: BlockId) {
        let b = pool.block(id);
        if b.session == 0 {
            return;
        }
        if self.closed.contains(&b.session) {
            self.evict_first.push_back((id, b.epoch));
        } else {
            self.freed_by_open.entry(b.session).or_default().push((id, b.epoch));
        }
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        while let Some(&(id, epoch)) = self.evict_first.front() {
            if self.still_closed(pool, id, epoch) {
                return Some(id);
            }
            self.evict_first.pop_front();
        }
        None // vLLM's choice: the head of the free queue
    }

    fn consumed(&mut self, block: BlockId) {
        if self.evict_first.front().map(|&(id, _)| id) == Some(block) {
            self.evict_first.pop_front();
        }
    }
}

impl HostRanker for ClosedFirstLru {}

impl SimPolicy for ClosedFirstLru {
    fn name(&self) -> &str {
        "closed-first"
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::SessionEnd(end) if end.reason == EndReason::Closed => self.close(end.session),
            Event::RequestArrival(arrival) if !arrival.warmup && self.closed.contains(&arrival.session) => {
                self.reopen(arrival.session)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use agentrt_runtime::types::{RequestArrival, SessionEnd};

    use super::*;

    const OPEN: u64 = 7;
    const CLOSING: u64 = 9;

    /// A pool whose four cached blocks were freed in the order: OPEN's, CLOSING's, OPEN's,
    /// CLOSING's — LRU would evict OPEN's first.
    fn pool(policy: &mut ClosedFirstLru) -> (BlockPool, Vec<BlockId>) {
        let mut pool = BlockPool::new(5);
        let ids = pool.allocate(4, policy);
        for (i, &id) in ids.iter().enumerate() {
            let session = if i % 2 == 0 { OPEN } else { CLOSING };
            pool.cache_block(id, 100 + i as u64, 0, 0, 1, session, policy);
        }
        pool.free(ids.iter().copied(), policy);
        (pool, ids)
    }

    fn end(session: u64, reason: EndReason) -> Event {
        Event::SessionEnd(SessionEnd {
            session,
            reason,
            at_us: 0,
        })
    }

    #[test]
    fn a_closed_sessions_blocks_go_first_oldest_first_then_lru() {
        let mut policy = ClosedFirstLru::default();
        let (mut pool, ids) = pool(&mut policy);
        assert_eq!(policy.victim(&pool), None, "nothing closed yet: vLLM's own order");
        policy.event(end(CLOSING, EndReason::Closed));
        let taken: Vec<BlockId> = (0..2).flat_map(|_| pool.allocate(1, &mut policy)).collect();
        assert_eq!(taken, [ids[1], ids[3]], "the closed session's two blocks, oldest first");
        assert_eq!(policy.victim(&pool), None, "then LRU");
    }

    #[test]
    fn an_idle_end_is_not_a_closing_and_a_reopened_session_keeps_its_blocks() {
        let mut policy = ClosedFirstLru::default();
        let (pool, _) = pool(&mut policy);
        policy.event(end(CLOSING, EndReason::Idle));
        assert_eq!(
            policy.victim(&pool),
            None,
            "an inferred idle end says nothing for certain"
        );
        policy.event(end(CLOSING, EndReason::Closed));
        assert!(policy.victim(&pool).is_some());
        policy.event(Event::RequestArrival(RequestArrival {
            request_id: 1,
            agent: 1,
            session: CLOSING,
            anchor_hash: 0,
            prompt_tokens: 16,
            continues: None,
            warmup: false,
            at_us: 0,
        }));
        assert_eq!(
            policy.victim(&pool),
            None,
            "the session called again: its blocks are LRU's again"
        );
    }
}
