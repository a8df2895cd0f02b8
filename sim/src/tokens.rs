//! Token ids and block hashes.
//!
//! A trace names its prompt pieces (`seg`) instead of carrying text: a segment's token ids are a
//! deterministic function of its name and its length, so two prompts that repeat the same
//! segments in the same order have the same token prefix — that is how agent anchors (system
//! prompt + tool definitions) and multi-turn history are shared, exactly as in a real engine.
//!
//! Block hashes are chained as in vLLM (`hash(parent_hash, block_tokens)`, only full blocks): a
//! block's hash names its whole prefix, so a lookup walks the chain from the first block and stops
//! at the first miss. The hash function differs from vLLM's (sha256 of a pickle) but the
//! *equality structure* — equal token prefixes ⇔ equal hashes — is the same, which is all the
//! cache's behaviour depends on; the fidelity check feeds the token ids themselves to vLLM.

/// Llama-3's vocabulary size: token ids stay in range so the ids can be replayed through a real
/// tokenizer-free vLLM `Request`.
pub const VOCAB: u64 = 128_256;

/// A strong 64-bit finaliser (the SplitMix64 / Murmur3 `fmix64` family).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over a string, finalised: names → 64-bit ids (segments, sessions, anchors).
pub fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// The token ids of a segment: a function of its name and its length only.
pub fn segment_tokens(name: &str, len: u32, out: &mut Vec<u32>) {
    let base = mix64(hash_str(name) ^ u64::from(len).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    out.extend((0..u64::from(len)).map(|i| (mix64(base.wrapping_add(i)) % VOCAB) as u32));
}

/// The id of a generated token: unique to the request that produced it. Generated text is not
/// reused verbatim by later prompts in the traces (a later prompt quotes an answer as its own
/// named segment), so output blocks occupy the cache but are never hit — as when a chat template
/// re-renders the previous answer.
pub fn output_token(request_uid: u64, index: u32) -> u32 {
    (mix64(request_uid.wrapping_mul(0xd6e8_feb8_6659_fd93) ^ u64::from(index)) % VOCAB) as u32
}

/// The hash of a full block given its parent's hash (`None` for the first block). Never 0, so 0
/// can mean "no parent" in block events.
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut h = mix64(parent.unwrap_or(0x6a09_e667_f3bc_c908) ^ 0x243f_6a88_85a3_08d3);
    for t in tokens {
        h = mix64(h ^ u64::from(*t)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    }
    if h == 0 {
        1
    } else {
        h
    }
}

/// Chained hashes of every *full* block of `tokens`, continuing from `parent`.
pub fn block_hashes(parent: Option<u64>, tokens: &[u32], block_size: usize, out: &mut Vec<u64>) {
    let mut prev = parent;
    for chunk in tokens.chunks_exact(block_size) {
        let h = block_hash(prev, chunk);
        out.push(h);
        prev = Some(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(segs: &[(&str, u32)]) -> Vec<u32> {
        let mut out = Vec::new();
        for (name, len) in segs {
            segment_tokens(name, *len, &mut out);
        }
        out
    }

    #[test]
    fn segments_are_a_function_of_name_and_length() {
        assert_eq!(tokens(&[("sys/a", 40)]), tokens(&[("sys/a", 40)]));
        assert_ne!(tokens(&[("sys/a", 40)]), tokens(&[("sys/b", 40)]));
        // Same name, another length: other content (the length is part of the identity).
        assert_ne!(tokens(&[("sys/a", 40)])[..20], tokens(&[("sys/a", 20)])[..]);
        assert!(tokens(&[("x", 500)]).iter().all(|t| u64::from(*t) < VOCAB));
    }

    #[test]
    fn chained_hashes_name_the_whole_prefix_and_only_full_blocks() {
        let a = tokens(&[("sys/a", 40), ("q/1", 10)]);
        let b = tokens(&[("sys/a", 40), ("q/2", 10)]);
        let (mut ha, mut hb) = (Vec::new(), Vec::new());
        block_hashes(None, &a, 16, &mut ha);
        block_hashes(None, &b, 16, &mut hb);
        // 50 tokens → 3 full blocks; the 2 leftover tokens are not hashed.
        assert_eq!(ha.len(), 3);
        // Blocks 0 and 1 lie inside the shared 40-token segment; block 2 spans the question.
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
        // Same block content after a different parent: a different hash.
        let block = &a[16..32];
        assert_ne!(block_hash(Some(ha[0]), block), block_hash(Some(hb[2]), block));
        assert_eq!(block_hash(Some(ha[0]), block), ha[1]);
        assert!(ha.iter().all(|h| *h != 0));
    }
}
