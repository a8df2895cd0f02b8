//! What the engine's answers say a hold would save and cost: the prefill time per uncached
//! token (the slope of prefill time against the prompt tokens the engine had to compute),
//! the decode step (time between two output tokens), answers' mean length, and how long sessions
//! pause between calls. All over the most recent answers, so the figures follow the engine and
//! the load as they change.

use std::collections::VecDeque;

/// Answers (and pauses) the meter keeps.
const WINDOW: usize = 256;
/// Prefills shorter than this many uncached tokens say little about the cost of a token (one
/// step's fixed cost dominates them) and are left out.
const MIN_UNCACHED: u32 = 1024;

/// The engine's costs, measured from its answers.
#[derive(Debug, Clone, Default)]
pub struct CostMeter {
    /// (uncached prompt tokens, prefill time in µs) of recent answers.
    prefills: VecDeque<(f64, f64)>,
    /// Decode time per output token (µs) of recent answers with more than one output token.
    steps: VecDeque<f64>,
    outputs: VecDeque<f64>,
    /// Recent pauses: from a session's answer to its next call (µs).
    waits: VecDeque<f64>,
    answers: u64,
}

fn push(window: &mut VecDeque<f64>, v: f64) {
    if window.len() == WINDOW {
        window.pop_front();
    }
    window.push_back(v);
}

fn median(values: &VecDeque<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

impl CostMeter {
    /// An answer: `prompt` tokens of which `cached` came from the prefix cache, prefilled in
    /// `prefill_us` (from being scheduled to the first token), `output` tokens generated, the rest
    /// after the first over `decode_us`.
    pub fn answer(&mut self, prompt: u32, cached: u32, output: u32, prefill_us: u64, decode_us: u64) {
        self.answers += 1;
        let uncached = prompt.saturating_sub(cached);
        if uncached >= MIN_UNCACHED {
            if self.prefills.len() == WINDOW {
                self.prefills.pop_front();
            }
            self.prefills.push_back((f64::from(uncached), prefill_us as f64));
        }
        if output > 1 {
            push(&mut self.steps, decode_us as f64 / f64::from(output - 1));
        }
        push(&mut self.outputs, f64::from(output));
    }

    /// A session paused `wait_us` between an answer and its next call.
    pub fn pause(&mut self, wait_us: u64) {
        push(&mut self.waits, wait_us as f64);
    }

    pub fn answers(&self) -> u64 {
        self.answers
    }

    /// Prefill time per uncached prompt token (µs): the 10th percentile, over recent answers
    /// with at least 1,024 uncached tokens, of their prefill time per uncached token. A prefill
    /// shares its steps with others' (chunked prefill), the more so under load, and a step has a
    /// fixed cost: both only add time, so the answers that prefilled fastest per token say what a
    /// token costs — and a long prefill, mostly its own tokens, says it best. `None` until an
    /// answer of that size was seen.
    pub fn prefill_us_per_token(&self) -> Option<f64> {
        let mut per_token: Vec<f64> = self.prefills.iter().map(|(u, t)| t / u).collect();
        if per_token.is_empty() {
            return None;
        }
        per_token.sort_by(f64::total_cmp);
        Some(per_token[per_token.len() / 10])
    }

    /// The median time between two output tokens (µs).
    pub fn decode_step_us(&self) -> Option<f64> {
        median(&self.steps)
    }

    /// The mean answer length (tokens): room a running call's context grows by.
    pub fn mean_output(&self) -> f64 {
        if self.outputs.is_empty() {
            0.0
        } else {
            self.outputs.iter().sum::<f64>() / self.outputs.len() as f64
        }
    }

    /// The median pause between a session's answer and its next call (µs).
    pub fn median_wait_us(&self) -> Option<f64> {
        median(&self.waits)
    }

    /// Whether holding sessions back can pay on this engine: prefilling the whole cache
    /// (`capacity_tokens` at the measured cost per token) takes longer than a session's typical
    /// pause. `false` until `min_answers` answers and a pause were measured. (The derivation is in
    /// the crate's guide.)
    pub fn holding_pays(&self, capacity_tokens: u64, min_answers: u64) -> bool {
        if self.answers < min_answers {
            return false;
        }
        match (self.prefill_us_per_token(), self.median_wait_us()) {
            (Some(p), Some(w)) => p * capacity_tokens as f64 > w,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_costs_what_the_fastest_long_prefills_say() {
        let mut m = CostMeter::default();
        // 10 µs a token and 8 ms a step; most prefills also share their steps with others (up to
        // 10× longer) — a fifth of them does not.
        for i in 1..=200u64 {
            let uncached = 1_024 + (i % 20) * 500;
            let shared = if i % 5 == 0 { 1.0 } else { 1.0 + (i % 9) as f64 };
            let prefill = ((8_000 + 10 * uncached) as f64 * shared) as u64;
            m.answer(uncached as u32, 0, 10, prefill, 9 * 6_000);
        }
        let p = m.prefill_us_per_token().unwrap();
        // The fastest long ones: 10 µs plus a step's share, 8 ms / 10 k tokens ≈ 1 µs.
        assert!((10.0..12.5).contains(&p), "{p}");
        assert_eq!(m.decode_step_us(), Some(6_000.0));
        assert_eq!(m.mean_output(), 10.0);
        // Short prefills (a hit, a short question) are left out: one step's cost is most of them.
        for _ in 0..1_000 {
            m.answer(1000, 990, 1, 90_000, 0);
        }
        assert_eq!(m.prefill_us_per_token(), Some(p));
    }

    #[test]
    fn holding_pays_when_prefilling_the_cache_outlasts_a_typical_pause() {
        let engine = |us_per_token: u64| {
            let mut m = CostMeter::default();
            for i in 1..=40u64 {
                m.answer((i * 700) as u32, 0, 100, 5_000 + us_per_token * i * 700, 99 * 6_000);
                m.pause(2_000_000);
            }
            m
        };
        // An H100 serving Llama-3.1-8B: ~35 µs a token × 453 k tokens ≈ 16 s ≫ 2 s pauses.
        assert!(engine(35).holding_pays(453_000, 32));
        // The tiny CPU model: ~1 µs a token × 9,600 tokens ≈ 10 ms ≪ 2 s.
        assert!(!engine(1).holding_pays(9_600, 32));
        // Not before enough answers are measured.
        assert!(!engine(35).holding_pays(453_000, 1_000));
        assert!(!CostMeter::default().holding_pays(453_000, 0));
    }
}
