//! A small seeded PRNG (SplitMix64) and the few distributions the workload generators need.
//!
//! Why not the `rand` crate: generated traces must be bit-identical across platforms and crate
//! upgrades (a trace is named by its seed in docs/results.md), and the generators need only a
//! handful of draws. Keeping the generator here pins the stream forever.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, passes BigCrush when used as a stream.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed ^ 0x5851_f42d_4c95_7f2d,
        }
    }

    /// A child stream, so that adding draws to one session does not shift every later session.
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng::new(self.next_u64() ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::tokens::mix64(self.state)
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in [lo, hi] (inclusive).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Exponential with the given mean (inter-arrival times of a Poisson process).
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.f64()).ln()
    }

    /// A token length drawn from a log-normal with the given median and spread (σ of ln), clamped
    /// to [lo, hi]. Text lengths are right-skewed; a log-normal is the usual fit.
    pub fn lognormal_len(&mut self, median: f64, sigma: f64, lo: u32, hi: u32) -> u32 {
        let v = median * (sigma * self.normal()).exp();
        (v.round() as i64).clamp(lo as i64, hi as i64) as u32
    }

    /// Pick an index with probability proportional to `weights`.
    pub fn weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.f64() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }

    /// A Zipf-like pick among `n` items (rank r has weight 1 / r^s): popular anchors are reused
    /// far more than rare ones, as in real task mixes.
    pub fn zipf(&mut self, n: usize, s: f64) -> usize {
        let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(s)).collect();
        self.weighted(&weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let x = r.f64();
            assert!((0.0..1.0).contains(&x));
            assert!((3..=9).contains(&r.range(3, 9)));
            assert!((10..=20).contains(&r.lognormal_len(15.0, 1.0, 10, 20)));
        }
    }
}
