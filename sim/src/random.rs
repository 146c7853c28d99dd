//! The distributions simulated workloads draw from, over the project's one generator
//! (`ninf_scheduling::random::SplitMix`): a seed gives the same workload everywhere.

use ninf_scheduling::random::SplitMix;

#[derive(Debug, Clone)]
pub struct Random(SplitMix);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(SplitMix::new(seed))
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0.uniform()
    }

    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }

    /// Uniform integer in `low..=high`.
    pub fn integer(&mut self, low: u32, high: u32) -> u32 {
        let span = f64::from(high.saturating_sub(low) + 1);
        (low + (self.uniform() * span) as u32).min(high)
    }
}

/// Job sizes that are powers of two, each drawn with a given weight (the papers' size mixes).
#[derive(Debug, Clone)]
pub struct WeightedSizes {
    sizes: Vec<u32>,
    weights: Vec<f64>,
    total: f64,
}

impl WeightedSizes {
    /// 1, 2, 4, ... up to `largest`, size s weighing `weight(s)`.
    pub fn powers_of_two(largest: u32, weight: impl Fn(u32) -> f64) -> WeightedSizes {
        let sizes: Vec<u32> = (0..32)
            .map(|k| 1u32 << k)
            .take_while(|&s| s <= largest.max(1))
            .collect();
        let weights: Vec<f64> = sizes.iter().map(|&s| weight(s)).collect();
        let total = weights.iter().sum();
        WeightedSizes {
            sizes,
            weights,
            total,
        }
    }

    /// The mean size.
    pub fn mean(&self) -> f64 {
        self.sizes
            .iter()
            .zip(&self.weights)
            .map(|(&s, w)| f64::from(s) * w / self.total)
            .sum()
    }

    pub fn draw(&self, random: &mut Random) -> u32 {
        let mut pick = random.uniform() * self.total;
        for (&s, &w) in self.sizes.iter().zip(&self.weights) {
            if pick < w {
                return s;
            }
            pick -= w;
        }
        self.sizes.last().copied().unwrap_or(1)
    }
}
