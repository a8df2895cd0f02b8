//! vLLM V1's `KVCacheManager` for one full-attention group, on top of [`BlockPool`]: the calls the
//! scheduler makes (`get_computed_blocks`, `allocate_slots`, `free`) with vLLM's arithmetic
//! (`kv_cache_manager.py`, `single_type_kv_cache_manager.py`, vLLM 0.32):
//!
//! - a lookup may hit at most `num_tokens - 1` tokens (the last token is recomputed for logits),
//!   in whole blocks;
//! - `allocate_slots` fails (returns `false`) when the blocks it needs — new ones plus hit blocks
//!   that sit in the free queue — exceed the free blocks; for a waiting request the whole sequence
//!   must fit (`scheduler_reserve_full_isl`, on by default);
//! - blocks are cached as soon as they are allocated for tokens that exist (prompt tokens and
//!   generated tokens), up to `min(computed + new, num_tokens)`;
//! - `free` releases a request's blocks tail-first.

use crate::block_pool::{BlockId, BlockPool, PoolObserver};
use crate::tokens::block_hash;

/// One request's KV state (vLLM's `req_to_blocks`, `num_cached_block`, `block_hashes`).
#[derive(Debug, Clone, Default)]
pub struct SeqKv {
    pub blocks: Vec<BlockId>,
    pub num_cached_blocks: usize,
    pub num_computed_tokens: u32,
    /// Prompt + generated tokens so far.
    pub num_tokens: u32,
    /// Chained hashes of every full block of the token sequence.
    pub hashes: Vec<u64>,
    /// Tokens after the last full block.
    pub tail: Vec<u32>,
    pub agent: u32,
    pub session: u64,
}

impl SeqKv {
    pub fn new(num_tokens: u32, hashes: Vec<u64>, tail: Vec<u32>, agent: u32, session: u64) -> Self {
        Self {
            num_tokens,
            hashes,
            tail,
            agent,
            session,
            ..Self::default()
        }
    }

    /// `Request.append_output_token_ids`: one generated token; a block that fills gets its hash.
    pub fn append_token(&mut self, token: u32, block_size: usize) {
        self.num_tokens += 1;
        self.tail.push(token);
        if self.tail.len() == block_size {
            let h = block_hash(self.hashes.last().copied(), &self.tail);
            self.hashes.push(h);
            self.tail.clear();
        }
    }
}

fn cdiv(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

/// The KV cache manager.
pub struct KvCacheManager {
    pub pool: BlockPool,
    pub block_size: usize,
}

impl KvCacheManager {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            pool: BlockPool::new(num_blocks),
            block_size,
        }
    }

    /// `get_computed_blocks`: the cached prefix of a request that is not yet running.
    pub fn computed_blocks(&self, seq: &SeqKv) -> Vec<BlockId> {
        let max_tokens = seq.num_tokens.saturating_sub(1) as usize;
        self.pool.longest_hit(&seq.hashes, max_tokens / self.block_size)
    }

    /// `get_num_blocks_to_allocate`: blocks to take off the free queue to give `seq` slots for
    /// `num_tokens` tokens, counting hit blocks that must leave the free queue.
    /// Blocks a waiting request takes off the free queue to be admitted with `hit`: the new
    /// blocks of its whole prompt, and the hit blocks that sat in the free queue.
    pub fn admission_blocks(&self, seq: &SeqKv, hit: &[BlockId]) -> usize {
        self.blocks_needed(seq, seq.num_tokens as usize, hit)
    }

    fn blocks_needed(&self, seq: &SeqKv, num_tokens: usize, new_computed: &[BlockId]) -> usize {
        let required = cdiv(num_tokens, self.block_size);
        let have = seq.blocks.len() + new_computed.len();
        required.saturating_sub(have) + self.pool.count_free(new_computed)
    }

    /// `allocate_slots`. Returns `false` (and changes nothing) when the blocks are not there.
    pub fn allocate_slots(
        &mut self,
        seq: &mut SeqKv,
        num_new_tokens: u32,
        new_computed: &[BlockId],
        full_sequence_must_fit: bool,
        obs: &mut dyn PoolObserver,
    ) -> bool {
        self.allocate(seq, num_new_tokens, new_computed, full_sequence_must_fit, true, obs)
    }

    /// `allocate_slots` for a request whose next `external_tokens` tokens are loaded from the
    /// host tier (`num_external_computed_tokens`, `delay_cache_blocks=True`): slots up to the end
    /// of the load, the whole sequence must fit, and nothing is cached until the load completes
    /// ([`KvCacheManager::cache_loaded`]).
    pub fn allocate_for_load(
        &mut self,
        seq: &mut SeqKv,
        external_tokens: u32,
        new_computed: &[BlockId],
        obs: &mut dyn PoolObserver,
    ) -> bool {
        self.allocate(seq, external_tokens, new_computed, true, false, obs)
    }

    /// The scheduler's `cache_blocks(request, num_computed_tokens)` once a load completed.
    pub fn cache_loaded(&mut self, seq: &mut SeqKv, num_computed_tokens: u32, obs: &mut dyn PoolObserver) {
        self.cache_blocks(seq, num_computed_tokens as usize / self.block_size, obs);
    }

    fn allocate(
        &mut self,
        seq: &mut SeqKv,
        num_new_tokens: u32,
        new_computed: &[BlockId],
        full_sequence_must_fit: bool,
        cache: bool,
        obs: &mut dyn PoolObserver,
    ) -> bool {
        let total_computed = seq.num_computed_tokens as usize + new_computed.len() * self.block_size;
        let free = self.pool.num_free();
        if full_sequence_must_fit && self.blocks_needed(seq, seq.num_tokens as usize, new_computed) > free {
            return false;
        }
        let need_slots = total_computed + num_new_tokens as usize;
        if self.blocks_needed(seq, need_slots, new_computed) > free {
            return false;
        }
        if !new_computed.is_empty() {
            debug_assert!(
                seq.blocks.is_empty(),
                "hits are only adopted by a request with no blocks"
            );
            self.pool.touch(new_computed, seq.agent, seq.session, obs);
            seq.blocks.extend_from_slice(new_computed);
            seq.num_cached_blocks = seq.blocks.len();
        }
        let required = cdiv(need_slots, self.block_size);
        if required > seq.blocks.len() {
            let fresh = self.pool.allocate(required - seq.blocks.len(), obs);
            seq.blocks.extend(fresh);
        }
        if cache {
            let to_cache = need_slots.min(seq.num_tokens as usize);
            self.cache_blocks(seq, to_cache / self.block_size, obs);
        }
        true
    }

    /// `cache_blocks`: record hashes for the request's blocks up to `num_full_blocks`.
    fn cache_blocks(&mut self, seq: &mut SeqKv, num_full_blocks: usize, obs: &mut dyn PoolObserver) {
        for i in seq.num_cached_blocks..num_full_blocks {
            let parent = if i == 0 { 0 } else { seq.hashes[i - 1] };
            let position = (i * self.block_size) as u32;
            self.pool.cache_block(
                seq.blocks[i],
                seq.hashes[i],
                parent,
                position,
                seq.agent,
                seq.session,
                obs,
            );
        }
        seq.num_cached_blocks = seq.num_cached_blocks.max(num_full_blocks);
    }

    /// `free`: release the request's blocks, tail first.
    pub fn free(&mut self, seq: &mut SeqKv, obs: &mut dyn PoolObserver) {
        let blocks = std::mem::take(&mut seq.blocks);
        self.pool.free(blocks.into_iter().rev(), obs);
        seq.num_cached_blocks = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_pool::VllmLru;
    use crate::tokens::block_hashes;

    fn seq(tokens: &[u32], bs: usize) -> SeqKv {
        let mut hashes = Vec::new();
        block_hashes(None, tokens, bs, &mut hashes);
        let tail = tokens[hashes.len() * bs..].to_vec();
        SeqKv::new(tokens.len() as u32, hashes, tail, 1, 1)
    }

    #[test]
    fn a_fully_cached_prompt_still_recomputes_its_last_block() {
        let mut kv = KvCacheManager::new(16, 4);
        let tokens: Vec<u32> = (0..8).collect();
        let mut a = seq(&tokens, 4);
        assert!(kv.allocate_slots(&mut a, 8, &[], true, &mut VllmLru));
        assert_eq!(kv.pool.num_cached(), 2);
        kv.free(&mut a, &mut VllmLru);
        // 8 tokens = 2 full blocks, but at most 7 tokens may hit: only 1 block.
        let b = seq(&tokens, 4);
        assert_eq!(kv.computed_blocks(&b).len(), 1);
        // With one more token, both blocks hit.
        let longer: Vec<u32> = (0..9).collect();
        assert_eq!(kv.computed_blocks(&seq(&longer, 4)).len(), 2);
    }

    #[test]
    fn output_tokens_complete_and_cache_blocks() {
        let mut kv = KvCacheManager::new(16, 4);
        let mut a = seq(&[1, 2, 3, 4, 5, 6], 4);
        assert!(kv.allocate_slots(&mut a, 6, &[], true, &mut VllmLru));
        a.num_computed_tokens = 6;
        assert_eq!(kv.pool.num_cached(), 1);
        a.append_token(7, 4);
        a.append_token(8, 4);
        assert_eq!(a.hashes.len(), 2);
        // A decode step computing position 6: slots for 7 tokens, cached up to
        // min(computed + new, num_tokens) = 7 tokens, so block 1 (positions 4..8) is not yet full.
        assert!(kv.allocate_slots(&mut a, 1, &[], false, &mut VllmLru));
        assert_eq!(kv.pool.num_cached(), 1);
        a.num_computed_tokens = 7;
        assert!(kv.allocate_slots(&mut a, 1, &[], false, &mut VllmLru));
        assert_eq!(kv.pool.num_cached(), 2);
    }

    #[test]
    fn admission_needs_room_for_the_whole_sequence_and_for_free_hit_blocks() {
        let mut kv = KvCacheManager::new(5, 4); // 4 usable blocks
        let mut a = seq(&(0..12).collect::<Vec<_>>(), 4);
        assert!(kv.allocate_slots(&mut a, 12, &[], true, &mut VllmLru));
        kv.free(&mut a, &mut VllmLru);
        // A 20-token prompt sharing 2 cached blocks: needs 5 blocks in all, 2 of them hits that sit
        // in the free queue → 3 new + 2 evictable = 5 > 4 free.
        let mut tokens: Vec<u32> = (0..8).collect();
        tokens.extend(100..112);
        let mut b = seq(&tokens, 4);
        let hit = kv.computed_blocks(&b);
        assert_eq!(hit.len(), 2);
        assert!(!kv.allocate_slots(&mut b, 12, &hit, true, &mut VllmLru));
        assert!(b.blocks.is_empty(), "a failed allocation changes nothing");
        // Chunked: without the whole-sequence gate the first 4-token chunk fits.
        assert!(kv.allocate_slots(&mut b, 4, &hit, false, &mut VllmLru));
        assert_eq!(b.blocks.len(), 3);
    }
}
