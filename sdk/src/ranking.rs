//! The one ranking rule every decision uses, shared by the host and the SDK's test harness.

/// Order item indices from "keep most" to "evict first": highest score first; equal scores by
/// `last_access`, most recent first (so a policy that returns all-equal scores *is* LRU);
/// non-finite scores (NaN, ±inf from a broken policy) rank below every finite score.
pub fn keep_order(scores: &[f32], last_access: impl Fn(usize) -> u64) -> Vec<usize> {
    let key = |s: f32| if s.is_finite() { s } else { f32::NEG_INFINITY };
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| {
        key(scores[b])
            .total_cmp(&key(scores[a]))
            .then_with(|| last_access(b).cmp(&last_access(a)))
    });
    order
}

#[cfg(test)]
mod tests {
    use super::keep_order;

    #[test]
    fn scores_then_recency_then_broken_scores_last() {
        let last = [10u64, 30, 20, 40, 50];
        let scores = [1.0, 1.0, 2.0, f32::NAN, 1.0];
        assert_eq!(keep_order(&scores, |i| last[i]), vec![2, 4, 1, 0, 3]);
    }
}
