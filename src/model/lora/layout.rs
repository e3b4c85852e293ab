//! One decoder layer's adapter laid out for the fused kernels (the layout `model::lora`
//! documents), from its projections' A and B in Hugging Face's order.
//!
//! B's rows go where the base weight's rows went at load (`model::decoder_weights`): q, k
//! and v stacked, the rows of each q and k head in RoPE's adjacent-pair order
//! ([`half_split_to_adjacent`]), gate and up interleaved (row `2j` gate `j`, `2j + 1` up
//! `j`). That fused order is the same whatever file the base came from: a Hugging Face
//! directory stores q and k half-split and is permuted at load; a llama.cpp GGUF of a Llama
//! stores them already permuted by exactly that order (its converter's `permute`), and
//! its Qwen2, Qwen3 and Gemma 3 store them half-split as Hugging Face does, permuted at
//! load. PEFT's adapters are always in Hugging Face's order, so their B rows are permuted
//! here, once, for every base. Qwen3's and Gemma 3's q/k norms (permuted alongside at
//! load) and SmolLM3's layers without RoPE change nothing: the rows are where the base's
//! are in every layer.
//!
//! A's columns are never permuted: each site's input is in Hugging Face's order already.
//! q|k|v and gate|up read the normed residual stream (never permuted); o reads the
//! attention output, whose values per head are in v's row order (v is not permuted); down
//! reads the MLP activation `act(gate_j) * up_j` at index `j`, which the interleaved
//! epilogue writes in gate's and up's own order.

use crate::model::config::ModelConfig;
use crate::model::fused_weights::half_split_to_adjacent;
use crate::model::lora::projection::Projection;
use crate::model::lora::{LayerLora, SiteLora};

/// One projection's adapter as PEFT stores it, with its scale.
#[derive(Clone, Debug)]
pub struct ProjectionLora {
    pub r: usize,
    /// `alpha / r` or `alpha / sqrt(r)`.
    pub scale: f64,
    /// `[r, in]` row-major.
    pub a: Vec<f32>,
    /// `[out, r]` row-major, unscaled, rows in Hugging Face's order.
    pub b: Vec<f32>,
}

/// The layer's sites from its projections' adapters (`lora(p)`: `None` for a projection
/// the adapter does not target).
pub fn layer<'a>(
    model: &ModelConfig,
    lora: impl Fn(Projection) -> Option<&'a ProjectionLora>,
) -> LayerLora {
    use Projection::*;
    let (q_dim, kv_dim, hd) = (model.q_dim(), model.kv_dim(), model.head_dim);
    let adjacent = half_split_to_adjacent(hd);
    // q and k rows: fused row `h * hd + i` is Hugging Face's row `h * hd + adjacent[i]`.
    let paired = |row: usize| row - row % hd + adjacent[row % hd];
    LayerLora {
        qkv: site(model, [Q, K, V], &lora, |row| {
            if row < q_dim {
                (Q, paired(row))
            } else if row < q_dim + kv_dim {
                (K, paired(row - q_dim))
            } else {
                (V, row - q_dim - kv_dim)
            }
        }),
        o: site(model, [O], &lora, |row| (O, row)),
        gate_up: site(model, [Gate, Up], &lora, |row| match row % 2 {
            0 => (Gate, row / 2),
            _ => (Up, row / 2),
        }),
        down: site(model, [Down], &lora, |row| (Down, row)),
    }
}

/// A site of `projections` (in stacking order); `source(row)` is the projection and its
/// Hugging Face row that the fused weight's row `row` holds.
fn site<'a, const N: usize>(
    model: &ModelConfig,
    projections: [Projection; N],
    lora: &impl Fn(Projection) -> Option<&'a ProjectionLora>,
    source: impl Fn(usize) -> (Projection, usize),
) -> Option<SiteLora> {
    // Each targeted projection's adapter and the first column of its rank in the stack.
    let mut members: Vec<(Projection, &ProjectionLora, usize)> = Vec::with_capacity(N);
    let mut rank = 0;
    for p in projections {
        if let Some(l) = lora(p) {
            members.push((p, l, rank));
            rank += l.r;
        }
    }
    if members.is_empty() {
        return None;
    }
    let rows: usize = projections.iter().map(|p| p.shape(model).0).sum();
    let a: Vec<f32> = members
        .iter()
        .flat_map(|(_, l, _)| l.a.iter().copied())
        .collect();
    let mut b = vec![0.0f32; rows * rank];
    for row in 0..rows {
        let (p, hf_row) = source(row);
        if let Some((_, l, first)) = members.iter().find(|(m, _, _)| *m == p) {
            let scale = l.scale as f32;
            let from = &l.b[hf_row * l.r..(hf_row + 1) * l.r];
            let to = &mut b[row * rank + first..row * rank + first + l.r];
            for (t, f) in to.iter_mut().zip(from) {
                *t = f * scale;
            }
        }
    }
    Some(SiteLora { rank, a, b })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::TensorData;
    use crate::model::dummy::builtin_config;
    use crate::model::fused_weights::{interleave_rows, permute_head_values, stack_rows};
    use crate::rng::SplitMix64;

    fn random(model: &ModelConfig, p: Projection, r: usize, seed: u64) -> ProjectionLora {
        let (out, inp) = p.shape(model);
        let mut g = SplitMix64::new(seed);
        ProjectionLora {
            r,
            scale: 16.0 / (r as f64).sqrt(),
            a: g.vec(r * inp, 1.0),
            b: g.vec(out * r, 1.0),
        }
    }

    /// `m` (`[rows, cols]`) times `x`, in f64.
    fn matvec(m: &[f32], cols: usize, x: &[f64]) -> Vec<f64> {
        m.chunks(cols)
            .map(|row| row.iter().zip(x).map(|(&w, v)| w as f64 * v).sum())
            .collect()
    }

    /// The dense delta `scale * B (A x)` of one projection, in Hugging Face's row order.
    fn hf_delta(l: &ProjectionLora, x: &[f64]) -> Vec<f32> {
        let t = matvec(&l.a, x.len(), x);
        matvec(&l.b, l.r, &t)
            .iter()
            .map(|v| (v * l.scale) as f32)
            .collect()
    }

    /// `Bp (A_stacked x)` of a site, one value per fused row.
    fn fused_delta(s: &SiteLora, x: &[f64]) -> Vec<f32> {
        let t = matvec(&s.a, x.len(), x);
        matvec(&s.b, s.rank, &t).iter().map(|&v| v as f32).collect()
    }

    fn column(values: Vec<f32>) -> TensorData {
        TensorData::from_f32(values.len(), 1, &values)
    }

    fn assert_close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (row, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "row {row}: {g} vs {w}"
            );
        }
    }

    /// The qkv site against the base's own load path: each projection's Hugging Face
    /// delta, its q and k rows permuted as `decoder_weights` permutes the base's (by
    /// `permute_head_values`, the bias path), stacked as the base's rows are.
    fn check_qkv(model: &str, targets: &[Projection], ranks: [usize; 3]) {
        use Projection::*;
        let model = builtin_config(model).unwrap();
        let loras: Vec<(Projection, ProjectionLora)> = [Q, K, V]
            .into_iter()
            .zip(ranks)
            .enumerate()
            .filter(|(_, (p, _))| targets.contains(p))
            .map(|(i, (p, r))| (p, random(&model, p, r, 10 + i as u64)))
            .collect();
        let get = |p: Projection| loras.iter().find(|(q, _)| *q == p).map(|(_, l)| l);
        let x: Vec<f64> = SplitMix64::new(3)
            .vec(model.hidden_size, 1.0)
            .into_iter()
            .map(f64::from)
            .collect();
        let order = half_split_to_adjacent(model.head_dim);
        let delta = |p: Projection| {
            let mut d = match get(p) {
                Some(l) => hf_delta(l, &x),
                None => vec![0.0; p.shape(&model).0],
            };
            if p != V {
                permute_head_values(&mut d, model.head_dim, &order);
            }
            column(d)
        };
        let want = stack_rows(&[&delta(Q), &delta(K), &delta(V)]).unwrap();
        let layer = layer(&model, get);
        let site = layer.qkv.as_ref().unwrap();
        let rank: usize = loras.iter().map(|(_, l)| l.r).sum();
        assert_eq!(site.rank, rank);
        assert_eq!(site.a.len(), rank * model.hidden_size);
        assert_eq!(site.b.len(), (model.q_dim() + 2 * model.kv_dim()) * rank);
        assert_close(&fused_delta(site, &x), &want.to_f32().unwrap());
        assert!(layer.o.is_none() && layer.gate_up.is_none() && layer.down.is_none());
    }

    #[test]
    fn qkv_rows_follow_the_base_permutation_with_q_k_and_v_targeted() {
        use Projection::*;
        check_qkv("tiny-llama", &[Q, K, V], [8, 8, 8]);
        check_qkv("tiny-llama", &[Q, K, V], [4, 8, 2]);
        // Qwen3's shape: q wider than the hidden size, heads of 32.
        check_qkv("tiny-qwen3", &[Q, K, V], [8, 4, 8]);
    }

    #[test]
    fn qkv_rows_follow_the_base_permutation_with_q_and_v_targeted() {
        use Projection::*;
        check_qkv("tiny-llama", &[Q, V], [8, 8, 8]);
        check_qkv("tiny-qwen3", &[Q, V], [2, 8, 6]);
        check_qkv("tiny-llama", &[K], [8, 3, 8]);
    }

    #[test]
    fn gate_up_rows_interleave_as_the_base_does_and_o_down_keep_their_order() {
        use Projection::*;
        let model = builtin_config("tiny-llama").unwrap();
        let (gate, up) = (random(&model, Gate, 8, 1), random(&model, Up, 4, 2));
        let (o, down) = (random(&model, O, 2, 3), random(&model, Down, 8, 4));
        let layer = layer(&model, |p| match p {
            Gate => Some(&gate),
            Up => Some(&up),
            O => Some(&o),
            Down => Some(&down),
            _ => None,
        });
        assert!(layer.qkv.is_none());
        let mut g = SplitMix64::new(9);
        let x: Vec<f64> = g
            .vec(model.hidden_size, 1.0)
            .into_iter()
            .map(f64::from)
            .collect();
        let want = interleave_rows(&column(hf_delta(&gate, &x)), &column(hf_delta(&up, &x)));
        let site = layer.gate_up.as_ref().unwrap();
        assert_eq!(site.rank, 12);
        assert_close(&fused_delta(site, &x), &want.unwrap().to_f32().unwrap());
        let x: Vec<f64> = g
            .vec(model.q_dim(), 1.0)
            .into_iter()
            .map(f64::from)
            .collect();
        assert_close(
            &fused_delta(layer.o.as_ref().unwrap(), &x),
            &hf_delta(&o, &x),
        );
        let inter = model.intermediate_size;
        let x: Vec<f64> = g.vec(inter, 1.0).into_iter().map(f64::from).collect();
        assert_close(
            &fused_delta(layer.down.as_ref().unwrap(), &x),
            &hf_delta(&down, &x),
        );
    }

    #[test]
    fn b_holds_zeros_outside_its_projections_rank_columns() {
        use Projection::*;
        let model = builtin_config("tiny-llama").unwrap();
        let (q, v) = (random(&model, Q, 2, 1), random(&model, V, 3, 2));
        let layer = layer(&model, |p| match p {
            Q => Some(&q),
            V => Some(&v),
            _ => None,
        });
        let site = layer.qkv.unwrap();
        assert_eq!(site.rank, 5);
        // A stacks q's rows then v's.
        assert_eq!(site.a, [q.a.clone(), v.a.clone()].concat());
        for (row, b) in site.b.chunks(5).enumerate() {
            let (q_dim, kv_dim) = (model.q_dim(), model.kv_dim());
            match row {
                _ if row < q_dim => assert!(b[2..].iter().all(|&x| x == 0.0)),
                _ if row < q_dim + kv_dim => assert!(b.iter().all(|&x| x == 0.0)),
                _ => assert!(b[..2].iter().all(|&x| x == 0.0)),
            }
        }
        // The first fused q row is Hugging Face's row 0, the second row head_dim / 2.
        let scale = q.scale as f32;
        let half = model.head_dim / 2;
        assert_eq!(site.b[..2], [q.b[0] * scale, q.b[1] * scale]);
        assert_eq!(
            site.b[5..7],
            [q.b[2 * half] * scale, q.b[2 * half + 1] * scale]
        );
    }
}
