//! Source block ids → prompt segments, so that two prompts share a prefix in the replay exactly
//! where they share block ids in the source.
//!
//! Each source block becomes one segment named by its id (a segment's token ids are a function of
//! its name and length, [`crate::tokens`]): equal id prefixes give equal token prefixes, hence
//! equal block hashes at any block size that divides the source's. The sources differ in how they
//! count the last, partial block: Mooncake and Bailian give it an id (`ceil(input / block)` ids),
//! kv-cache-tester does not (`floor(input / block)` ids, the rest of the prompt unnamed). A partial
//! block with an id keeps its name, at its own length; tokens no id covers become a segment of
//! their own (`tail`), unique to the request — no other prompt can share them.

use anyhow::ensure;

use crate::trace::Segment;

/// How a source block is named in the trace: its index in the prompt and its id.
pub type BlockName<'a> = dyn Fn(usize, u64) -> String + 'a;

/// The segments of a prompt of `input_tokens` tokens whose source blocks (of `block_tokens`
/// tokens) are `ids`; `tail` names the tokens no id covers.
pub fn segments(
    ids: &[u64],
    block_tokens: u32,
    input_tokens: u32,
    name: &BlockName<'_>,
    tail: &str,
) -> anyhow::Result<Vec<Segment>> {
    let n = ids.len() as u64;
    let block = u64::from(block_tokens);
    let input = u64::from(input_tokens);
    ensure!(
        n * block < input + block,
        "{n} blocks of {block_tokens} tokens are more than a prompt of {input_tokens} tokens holds"
    );
    let mut out = Vec::with_capacity(ids.len() + 1);
    for (i, &id) in ids.iter().enumerate() {
        let end = (i as u64 + 1) * block;
        let tokens = if end <= input { block } else { input - i as u64 * block };
        out.push(Segment::new(name(i, id), tokens as u32));
    }
    if n * block < input {
        out.push(Segment::new(tail, (input - n * block) as u32));
    }
    ensure!(!out.is_empty(), "a prompt of 0 tokens");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(segs: &[Segment]) -> Vec<(String, u32)> {
        segs.iter().map(|s| (s.seg.clone(), s.tokens)).collect()
    }

    #[test]
    fn uncovered_tokens_become_a_tail_and_a_last_id_may_be_partial() {
        let name = |_: usize, id: u64| format!("b/{id}");
        // kv-cache-tester: floor(in / block) ids, the rest unnamed.
        let floor = segments(&[7, 8], 64, 150, &name, "t").unwrap();
        assert_eq!(
            names(&floor),
            [("b/7".into(), 64), ("b/8".into(), 64), ("t".into(), 22)]
        );
        // Mooncake: ceil(in / block) ids, the last one partial.
        let ceil = segments(&[7, 8, 9], 64, 150, &name, "t").unwrap();
        assert_eq!(
            names(&ceil),
            [("b/7".into(), 64), ("b/8".into(), 64), ("b/9".into(), 22)]
        );
        let exact = segments(&[7, 8], 64, 128, &name, "t").unwrap();
        assert_eq!(exact.len(), 2);
        assert!(segments(&[7, 8, 9, 10], 64, 150, &name, "t")
            .unwrap_err()
            .to_string()
            .contains("more than"));
        assert!(segments(&[], 64, 0, &name, "t").is_err());
    }
}
