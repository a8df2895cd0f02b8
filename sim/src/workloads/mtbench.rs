//! MT-Bench (Zheng et al. 2023, "Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena"): 80
//! two-turn questions in 8 categories, each turn graded by an LLM judge.
//!
//! Graph (4 calls): `assistant` (turn 1) → `judge` (turn 1) → user thinks → `assistant` (turn 2,
//! extends turn 1 with the answer and a follow-up) → `judge` (turn 2, the whole conversation).
//! Math, reasoning and coding use the judge prompt with a reference answer (one per question,
//! shared by every session that draws that question).

use crate::rng::Rng;
use crate::tokens::mix64;
use crate::trace::Segment;
use crate::workloads::SessionBuilder;

const QUESTIONS: u64 = 80;
const CATEGORIES: [&str; 8] = [
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
];

fn fixed_len(key: u64, lo: u32, span: u32) -> u32 {
    lo + (mix64(key) % u64::from(span)) as u32
}

pub(super) fn session(b: &mut SessionBuilder, rng: &mut Rng) {
    // Sessions draw from the 80 questions: several users/models answer the same question.
    let q = rng.range(0, QUESTIONS - 1);
    let category = CATEGORIES[(q / 10) as usize];
    let with_reference = matches!(category, "reasoning" | "math" | "coding");
    // The question texts are MT-Bench's own: fixed per question (turn 1 ~40–180 tokens, the
    // follow-up ~20–90; extraction questions carry a passage).
    let extra = if category == "extraction" { 300 } else { 0 };
    let q1 = Segment::new(format!("mtbench/q{q}/turn1"), fixed_len(q, 40, 140) + extra);
    let q2 = Segment::new(format!("mtbench/q{q}/turn2"), fixed_len(q ^ 0x77, 20, 70));
    let assistant = Segment::new("sys/assistant", 160);
    let (judge1, judge2) = if with_reference {
        (
            Segment::new("sys/judge-single-ref", 330),
            Segment::new("sys/judge-multi-ref", 380),
        )
    } else {
        (
            Segment::new("sys/judge-single", 260),
            Segment::new("sys/judge-multi", 300),
        )
    };
    let reference =
        with_reference.then(|| Segment::new(format!("mtbench/q{q}/reference"), fixed_len(q ^ 0x99, 80, 220)));

    let turn1 = vec![assistant.clone(), q1.clone()];
    let a1 = b.call("assistant", turn1.clone(), rng.lognormal_len(320.0, 0.5, 40, 1200));
    let mut j = vec![judge1, q1.clone()];
    j.extend(reference.clone());
    j.push(a1.clone());
    b.call("judge", j, rng.lognormal_len(150.0, 0.4, 40, 400));
    // The user reads the answer before the follow-up: a think time with median 8 s.
    b.wait(rng.lognormal_len(8000.0, 0.8, 1000, 60000) as f64);
    let mut turn2 = turn1;
    turn2.extend([a1.clone(), q2.clone()]);
    let a2 = b.call("assistant", turn2, rng.lognormal_len(280.0, 0.5, 40, 1200));
    let mut j = vec![judge2, q1, a1, q2];
    j.extend(reference);
    j.push(a2);
    b.call("judge", j, rng.lognormal_len(170.0, 0.4, 40, 400));
}
