//! `recency_scores` gives the shared cases of sdk/conformance/recency_scores.txt — the same
//! batches the Python, JavaScript, C and Go SDKs' native tests score, so the helper means one
//! thing in every language a policy is written in.

use agentrt_sdk::recency_scores;
use agentrt_sdk::testing::gpu_block;

#[test]
fn recency_scores_give_the_cases_every_sdk_gives() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/recency_scores.txt");
    let text = std::fs::read_to_string(path).expect("the shared cases");
    let mut cases = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((left, right)) = line.split_once("->") else {
            continue;
        };
        let items: Vec<_> = left
            .split_whitespace()
            .enumerate()
            .map(|(i, w)| gpu_block(i as u64, w.parse().expect("a tick")))
            .collect();
        let want: Vec<f32> = right.split_whitespace().map(|w| w.parse().expect("a score")).collect();
        assert_eq!(recency_scores(&items), want, "{line}");
        cases += 1;
    }
    assert!(cases >= 8, "{cases} cases");
}
