//! The engine's own count of a prompt, before it answers: the proxy sizes an arriving call at its
//! request's bytes ÷ 4, and this scale corrects that by what the engine's usage said of earlier
//! prompts.
//!
//! Working-set admission counts every resident session's context against the KV cache, and a
//! session whose call is in flight counts at that call's prompt. Bytes ÷ 4 is a fair guess for
//! English prose under a real tokenizer, not for code, JSON or another tokenizer: the tiny test
//! model's reads the load generator's prompts at ~0.7 tokens a byte, so the ledger saw a third of
//! every in-flight context, called the cache 95 % full when the engine's queue held two calls for
//! every running one, and held too little. Each answer pairs a guess with the engine's count;
//! their ratio over recent answers scales the next guesses. One scale per tenant: the tokenizer
//! is the engine's, but how many tokens a byte makes depends on the text (prose, code, another
//! script), which is the tenant's — and one tenant's prompts must not move another's sizes.

use std::collections::VecDeque;

/// Answers the ratio is taken over: enough to smooth one odd prompt, few enough to follow a
/// change of model.
const WINDOW: usize = 256;

/// (guessed, counted) prompt tokens of recent answers, and their sums.
#[derive(Debug, Default)]
pub struct PromptScale {
    pairs: VecDeque<(u32, u32)>,
    guessed: u64,
    counted: u64,
}

impl PromptScale {
    /// An answer to a call guessed at `guessed` tokens whose usage counted `counted`.
    pub fn answered(&mut self, guessed: u32, counted: u32) {
        if guessed == 0 || counted == 0 {
            return;
        }
        if self.pairs.len() == WINDOW {
            let (g, c) = self.pairs.pop_front().unwrap_or_default();
            self.guessed -= u64::from(g);
            self.counted -= u64::from(c);
        }
        self.pairs.push_back((guessed, counted));
        self.guessed += u64::from(guessed);
        self.counted += u64::from(counted);
    }

    /// `guessed` tokens as the engine would count them (unchanged until an answer was counted).
    pub fn scale(&self, guessed: u32) -> u32 {
        if self.guessed == 0 {
            return guessed;
        }
        let scaled = u64::from(guessed) * self.counted / self.guessed;
        u32::try_from(scaled).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_are_scaled_by_what_the_engine_counted() {
        let mut scale = PromptScale::default();
        assert_eq!(scale.scale(1_000), 1_000, "nothing counted yet: the guess stands");
        // A tokenizer that counts 2.8 tokens where bytes ÷ 4 guessed one.
        for guess in [500, 1_000, 2_000] {
            scale.answered(guess, guess * 14 / 5);
        }
        assert_eq!(scale.scale(1_000), 2_800);
        // Answers without a count (an error, no usage) change nothing.
        scale.answered(1_000, 0);
        assert_eq!(scale.scale(1_000), 2_800);
    }

    #[test]
    fn the_scale_follows_the_recent_answers() {
        let mut scale = PromptScale::default();
        for _ in 0..WINDOW {
            scale.answered(1_000, 3_000);
        }
        for _ in 0..WINDOW {
            scale.answered(1_000, 1_000);
        }
        assert_eq!(
            scale.scale(1_000),
            1_000,
            "the old model's answers have left the window"
        );
    }
}
