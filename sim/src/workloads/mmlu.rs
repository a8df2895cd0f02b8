//! MMLU as multi-agent debate (Du et al. 2023, "Improving Factuality and Reasoning in Language
//! Models through Multiagent Debate"): three debaters answer a question, then each revises after
//! reading the others' answers, and an aggregator gives the final answer.
//!
//! Graph (7 calls per session, sequential as in a group chat):
//! `debater-1 → debater-2 → debater-3` (round 1) → `debater-1 → debater-2 → debater-3` (round 2,
//! each extends its own round-1 exchange with the other two answers) → `aggregator`.
//! Prompts: the debater's anchor, the subject's 5-shot examples (shared by every session of that
//! subject), the question.

use crate::rng::Rng;
use crate::tokens::mix64;
use crate::trace::Segment;
use crate::workloads::SessionBuilder;

/// MMLU's 57 subjects (Hendrycks et al. 2021).
const SUBJECTS: u64 = 57;
const DEBATERS: usize = 3;

/// The 5-shot dev examples of a subject: fixed per subject (450–900 tokens; MMLU's 5-shot prompts
/// are ~500–700 tokens with Llama-3's tokenizer, longer for law and medicine).
fn fewshot(subject: u64) -> Segment {
    Segment::new(
        format!("fewshot/mmlu/{subject}"),
        450 + (mix64(subject ^ 0x33) % 451) as u32,
    )
}

pub(super) fn session(b: &mut SessionBuilder, rng: &mut Rng) {
    let subject = rng.range(0, SUBJECTS - 1);
    let shots = fewshot(subject);
    // Question + four choices: median ~90 tokens, long tail (law passages).
    let question = b.seg("question", rng.lognormal_len(90.0, 0.6, 30, 700));
    let anchors: Vec<Vec<Segment>> = (1..=DEBATERS)
        .map(|d| vec![Segment::new(format!("sys/mmlu-debater-{d}"), 380 + 40 * d as u32)])
        .collect();
    let mut round1 = Vec::new();
    let mut prompts = Vec::new();
    for (d, anchor) in anchors.iter().enumerate() {
        let mut prompt = anchor.clone();
        prompt.extend([shots.clone(), question.clone()]);
        // Chain-of-thought answer: median ~220 tokens.
        let answer = b.call(
            &format!("debater-{}", d + 1),
            prompt.clone(),
            rng.lognormal_len(220.0, 0.4, 60, 700),
        );
        prompts.push(prompt);
        round1.push(answer);
    }
    let instruction = Segment::new("sys-msg/mmlu-debate-round", 60);
    let mut round2 = Vec::new();
    for d in 0..DEBATERS {
        // Own history first (prompt + own answer), then the others' answers.
        let mut prompt = prompts[d].clone();
        prompt.push(round1[d].clone());
        prompt.extend((0..DEBATERS).filter(|&o| o != d).map(|o| round1[o].clone()));
        prompt.push(instruction.clone());
        round2.push(b.call(
            &format!("debater-{}", d + 1),
            prompt,
            rng.lognormal_len(180.0, 0.4, 50, 600),
        ));
    }
    let mut prompt = vec![Segment::new("sys/mmlu-aggregator", 450), question];
    prompt.extend(round2);
    b.call("aggregator", prompt, rng.lognormal_len(80.0, 0.4, 20, 300));
}
