//! How the vocabulary kernels' workgroup reductions (softmax's row statistics, sampling's
//! cut and draw, the top log-probs' picks) end (shaders/common/argmax.wgsl): the
//! fixed binary tree in workgroup memory to its last level on every adapter, or, where the
//! adapter has subgroups, its last levels as a subgroup butterfly (`subgroupShuffleXor`,
//! masks from the widest down), which saves a barrier and a round trip through workgroup
//! memory per level.
//!
//! Invariant: both give bitwise the same result. At the tree's level `s` invocation
//! `t < s` takes in `t + s`; in the butterfly lane `t` takes in lane `t ^ s`, which is
//! `t + s` for `t < s`, so lane 0 meets exactly the tree's pairs in the same order (the
//! CPU model below checks it for every subgroup width from 4 to 64, for sums, for the
//! argmax rule and for the exact u32 sum, min and max). `subgroupAdd` is never used: its order is the implementation's.

use crate::gpu::context::Capabilities;
use crate::gpu::shaders::{ARGMAX, NAN, REDUCE_BUTTERFLY, REDUCE_TREE};

/// The smallest subgroup the butterfly is used with (smaller ones keep the tree).
pub const MIN_BUTTERFLY: u32 = 4;
/// The widest butterfly: the reductions' workgroups hold 256 invocations.
const MAX_BUTTERFLY: u32 = 64;

/// How a kernel's reductions end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The tree in workgroup memory to its last level (every adapter).
    Tree,
    /// The tree's levels below `width` (a power of two no larger than the adapter's
    /// smallest subgroup) as a subgroup butterfly.
    Butterfly { width: u32 },
}

impl Reduction {
    /// The butterfly as wide as the adapter's smallest subgroup (at most 64), where it has
    /// subgroups of at least [`MIN_BUTTERFLY`]; else the tree.
    pub fn best(caps: &Capabilities) -> Reduction {
        let width = caps.subgroup_min_size.min(MAX_BUTTERFLY);
        if caps.subgroups && width >= MIN_BUTTERFLY && width.is_power_of_two() {
            Reduction::Butterfly { width }
        } else {
            Reduction::Tree
        }
    }

    pub fn needs_subgroups(self) -> bool {
        matches!(self, Reduction::Butterfly { .. })
    }

    /// A short name for pipeline names.
    pub fn key(self) -> String {
        match self {
            Reduction::Tree => "tree".into(),
            Reduction::Butterfly { width } => format!("butterfly{width}"),
        }
    }

    /// `kernel` with the shared reductions and this tail appended; with the butterfly, each
    /// entry point's `/*SUBGROUP_LANE_PARAM*/` and `/*SUBGROUP_LANE_SET*/` markers become
    /// the subgroup lane builtin and the line that hands it to the tail.
    pub fn compose(self, kernel: &str) -> String {
        match self {
            Reduction::Tree => format!("{kernel}\n{ARGMAX}\n{REDUCE_TREE}\n{NAN}"),
            Reduction::Butterfly { width } => {
                let kernel = kernel
                    .replace(
                        "/*SUBGROUP_LANE_PARAM*/",
                        "@builtin(subgroup_invocation_id) subgroup_lane: u32,",
                    )
                    .replace("/*SUBGROUP_LANE_SET*/", "sg_lane = subgroup_lane;");
                format!(
                    "{kernel}\n{ARGMAX}\nconst TREE_END: u32 = {width}u;\n{REDUCE_BUTTERFLY}\n{NAN}"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    const WG: usize = 256;

    /// The tree to its last level, as argmax.wgsl runs it: slot 0's value.
    fn tree<T: Copy>(v: &[T], combine: impl Fn(T, T) -> T) -> T {
        let mut v = v.to_vec();
        let mut s = v.len() / 2;
        while s > 0 {
            for t in 0..s {
                v[t] = combine(v[t], v[t + s]);
            }
            s /= 2;
        }
        v[0]
    }

    /// The tree's levels down to `width` in workgroup memory, then the butterfly on a
    /// subgroup of `lanes` lanes (at least `width`), lane l starting from slot
    /// l % width; lane 0's value.
    fn butterfly<T: Copy>(v: &[T], width: usize, lanes: usize, combine: impl Fn(T, T) -> T) -> T {
        let mut v = v.to_vec();
        let mut s = v.len() / 2;
        while s >= width {
            for t in 0..s {
                v[t] = combine(v[t], v[t + s]);
            }
            s /= 2;
        }
        let mut lane: Vec<T> = (0..lanes).map(|l| v[l % width]).collect();
        let mut s = width / 2;
        while s > 0 {
            let before = lane.clone();
            for (l, x) in lane.iter_mut().enumerate() {
                *x = combine(before[l], before[l ^ s]);
            }
            s /= 2;
        }
        lane[0]
    }

    #[test]
    fn the_butterfly_meets_the_trees_pairs_at_every_width() {
        let mut rng = SplitMix64::new(3);
        for round in 0..20 {
            // Magnitudes spread over many orders, so that any other pairing rounds
            // differently.
            let sums: Vec<f32> = rng
                .vec(WG, 1.0)
                .iter()
                .enumerate()
                .map(|(i, x)| x * 10f32.powi((i % 9) as i32 - 4))
                .collect();
            // Few distinct values, so that ties (the lower index wins) are common.
            let best: Vec<(f32, u32)> = (0..WG as u32)
                .map(|i| (((i * 7919 + round) % 13) as f32, (i * 37 + round) % 300))
                .collect();
            let beats = |(v, i): (f32, u32), (bv, bi): (f32, u32)| v > bv || (v == bv && i < bi);
            let argmax = |own: (f32, u32), other: (f32, u32)| match beats(other, own) {
                true => other,
                false => own,
            };
            let add = |a: f32, b: f32| a + b;
            let (tree_sum, tree_best) = (tree(&sums, add), tree(&best, argmax));
            // The u32 reductions (counts, min and max order keys) are exact in any order.
            let keys: Vec<u32> = (0..WG).map(|_| rng.below(1 << 24) as u32).collect();
            let u32_ops: [fn(u32, u32) -> u32; 3] = [|a, b| a + b, u32::min, u32::max];
            for width in [4, 8, 16, 32, 64] {
                for lanes in [width, 2 * width, 64.max(width)] {
                    let sum = butterfly(&sums, width, lanes, add);
                    assert_eq!(sum.to_bits(), tree_sum.to_bits(), "sum, width {width}");
                    let b = butterfly(&best, width, lanes, argmax);
                    assert_eq!(b, tree_best, "argmax, width {width}, {lanes} lanes");
                    for op in u32_ops {
                        assert_eq!(butterfly(&keys, width, lanes, op), tree(&keys, op));
                    }
                }
            }
            // And a pairing the butterfly does not use gives other bits somewhere (the
            // check can fail): summing in order.
            if round == 0 {
                let in_order: f32 = sums.iter().sum();
                assert_ne!(in_order.to_bits(), tree_sum.to_bits());
            }
        }
    }

    #[test]
    fn the_butterfly_is_as_wide_as_the_smallest_subgroup() {
        let mut caps = crate::gpu::tuning::tests_caps();
        assert_eq!(Reduction::best(&caps), Reduction::Tree);
        caps.subgroups = true;
        for (min, want) in [
            (0, Reduction::Tree),
            (2, Reduction::Tree),
            (4, Reduction::Butterfly { width: 4 }),
            (32, Reduction::Butterfly { width: 32 }),
            (128, Reduction::Butterfly { width: 64 }),
        ] {
            caps.subgroup_min_size = min;
            assert_eq!(Reduction::best(&caps), want, "{min}");
        }
        let wgsl = Reduction::Butterfly { width: 8 }.compose("fn f(/*SUBGROUP_LANE_PARAM*/) {}");
        assert!(wgsl.contains("@builtin(subgroup_invocation_id) subgroup_lane: u32,"));
        assert!(wgsl.contains("const TREE_END: u32 = 8u;"));
        assert!(!Reduction::Tree.compose("").contains("subgroupShuffleXor"));
    }
}
