//! Qwen3, as its differences from the Llama decoder (`model::decoder`):
//! - an RMSNorm over each q head and each k head, after the q|k|v projection and before
//!   RoPE: one weight vector of `head_dim` shared by the q heads (`layers.N.q_norm`),
//!   another by the k heads (`layers.N.k_norm`), with the model's `rms_norm_eps`;
//! - an explicit `head_dim` (128 when config.json leaves it out), so q may be wider than
//!   the hidden size (Qwen3-0.6B: hidden 1024, 16 x 128 q rows; `o` is then
//!   `[hidden, n_heads * head_dim]`, which the shapes in `model::names` already say);
//! - no q|k|v biases (a config with `attention_bias: true` is refused, in `hf_config`).
//!
//! A per-pair epilogue cannot reduce over a head, so for these models the q|k|v matmul
//! stores its plain output and `gpu::kernels::head_norm_rope` normalises, rotates and
//! writes q, k and v where the fused epilogue would have ([`encode_head_norms`]). The norm
//! weights are loaded beside the layer's other vectors, their values permuted within the
//! head exactly as the q and k rows are ([`norm_vectors`]), so that each weight still
//! meets its value. Everything else (the name maps' entries, `has_qk_norm`, the GGUF and
//! config.json readers' `qwen3`) is one line where the other architectures are listed.

use serde_json::{Value, json};

use crate::gpu::kernels::head_norm_rope::{self, HeadNormRope};
use crate::gpu::kernels::matmul::QkvArgs;
use crate::gpu::{Gpu, Recorder, Tensor};
use crate::model::config::ModelConfig;
use crate::model::fused_weights::permute_head_values;

/// transformers' `Qwen3Config` head size when config.json gives none.
pub const DEFAULT_HEAD_DIM: usize = 128;

/// The q and k norms' weights as a layer's vectors hold them: q's then k's, each in
/// RoPE's adjacent-pair order when the q and k rows were permuted by `order`.
pub(crate) fn norm_vectors(
    mut q_norm: Vec<f32>,
    mut k_norm: Vec<f32>,
    head_dim: usize,
    order: Option<&[usize]>,
) -> Vec<f32> {
    if let Some(order) = order {
        permute_head_values(&mut q_norm, head_dim, order);
        permute_head_values(&mut k_norm, head_dim, order);
    }
    q_norm.extend(k_norm);
    q_norm
}

/// Records, after the q|k|v matmul stored `m` rows in `stored`, the per-head norms (at
/// `norms` in `vectors`, q's then k's) and RoPE, and the writes of q and of k and v to
/// the pool slots that `qkv` names.
pub(crate) fn encode_head_norms(
    gpu: &Gpu,
    rec: &mut Recorder,
    (stored, m): (&Tensor, usize),
    qkv: &QkvArgs,
    (vectors, norms, eps): (&Tensor, usize, f32),
) {
    let op = HeadNormRope {
        x: stored,
        m,
        q_dim: qkv.q_dim,
        kv_dim: qkv.kv_dim,
        head_dim: qkv.head_dim,
        vectors,
        q_norm: norms,
        k_norm: norms + qkv.head_dim,
        eps,
        rope: qkv.rope,
        rowinfo: qkv.rowinfo,
        q: qkv.q,
        k_pool: qkv.k_pool,
        v_pool: qkv.v_pool,
    };
    head_norm_rope::encode(gpu, rec, &op);
}

/// The fields of an exported `config.json` that only Qwen3 has, as transformers'
/// `Qwen3Config` names them: no biases, no sliding window.
pub(crate) fn hf_config_fields(c: &ModelConfig) -> Vec<(&'static str, Value)> {
    vec![
        ("attention_bias", json!(false)),
        ("use_sliding_window", json!(false)),
        ("sliding_window", Value::Null),
        ("max_window_layers", json!(c.n_layers)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fused_weights::half_split_to_adjacent;

    #[test]
    fn the_norms_move_with_their_values() {
        let q: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let k: Vec<f32> = (10..18).map(|i| i as f32).collect();
        let order = half_split_to_adjacent(8);
        let v = norm_vectors(q.clone(), k.clone(), 8, Some(&order));
        // Row 2i of a permuted head is half-split row i, 2i + 1 is i + 4: so are the weights.
        assert_eq!(v[..8], [0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]);
        assert_eq!(v[8..], [10.0, 14.0, 11.0, 15.0, 12.0, 16.0, 13.0, 17.0]);
        assert_eq!(norm_vectors(q.clone(), k, 8, None)[..8], q[..]);
    }
}
