//! splitmix64 (Steele, Lea and Flood): the one small deterministic generator sprout uses
//! wherever it needs reproducible "random" values: dummy weights, the bench workload's
//! prompts and lengths, and test inputs.
//!
//! A leaf: it imports nothing of sprout. Invariant: the stream of a seed is the same on
//! every platform and every run (integer arithmetic only; values are made from the bits).

/// The generator: its whole state is one `u64`.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number uniform in `0..n` (n > 0; the bias of a 64-bit modulus is negligible here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A value uniform in `[-scale, scale)`, from the draw's top 24 bits.
    pub fn uniform(&mut self, scale: f32) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    /// `n` values of [`SplitMix64::uniform`].
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(scale)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_of_a_seed_is_fixed() {
        // splitmix64's published first outputs for seed 0.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn uniform_values_stay_in_their_range_and_spread_over_it() {
        let v = SplitMix64::new(7).vec(4096, 2.0);
        assert!(v.iter().all(|x| (-2.0..2.0).contains(x)));
        assert!(v.iter().any(|&x| x > 1.9) && v.iter().any(|&x| x < -1.9));
        let mut g = SplitMix64::new(3);
        assert!((0..1000).all(|_| g.below(10) < 10));
    }
}
