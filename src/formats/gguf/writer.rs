//! A minimal GGUF v3 writer, for tests and fixtures: tiny models made in memory, and
//! deliberately broken files to check the reader's errors.
//!
//! It writes exactly what [`crate::formats::gguf`] reads: metadata in the order given, tensor
//! infos, padding to the alignment, and each tensor's bytes at an aligned offset. It does
//! not check that a tensor's bytes match its dims and type, so that tests can make bad files.

use crate::formats::gguf::{DEFAULT_ALIGNMENT, GgmlType, GgufValue};
use crate::formats::{WeightFormat, quantize};

/// Builds a GGUF file in memory.
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a metadata entry, replacing one with the same key (`general.alignment`, if
    /// given, sets the data alignment).
    pub fn metadata(mut self, key: &str, value: GgufValue) -> Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    /// Adds a tensor, replacing one with the same name: `dims` in ggml order (row length
    /// first), bytes as stored.
    pub fn tensor(mut self, name: &str, dims: &[u64], ty: GgmlType, bytes: Vec<u8>) -> Self {
        let tensor = (name.to_string(), dims.to_vec(), ty, bytes);
        match self.tensors.iter_mut().find(|t| t.0 == name) {
            Some(t) => *t = tensor,
            None => self.tensors.push(tensor),
        }
        self
    }

    /// Drops a metadata entry.
    pub fn without_metadata(mut self, key: &str) -> Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    /// Drops a tensor.
    pub fn without_tensor(mut self, name: &str) -> Self {
        self.tensors.retain(|t| t.0 != name);
        self
    }

    /// A complete tiny model of `architecture` (`llama`, `qwen2` or `qwen3`; anything else
    /// is written as a llama-shaped model under that name): hidden 64, 2 layers, 2 heads of
    /// 32, 1 kv head, feed-forward 96, an 8-token vocabulary, untied `output.weight`. It
    /// stores one tensor in each format sprout reads (q/k/v/o Q8_0, gate/up Q4_0, down
    /// Q4_1, embedding F16, output BF16, norms and biases F32) with small deterministic
    /// values. `qwen2` adds q, k and v biases; `qwen3` has heads of 64 (so q, 128 rows, is
    /// wider than the hidden size, as in Qwen3-0.6B), given as `key_length` and
    /// `value_length`, and a norm over each q and k head.
    pub fn tiny_model(architecture: &str) -> Self {
        let qwen3 = architecture == "qwen3";
        let head_dim = if qwen3 { 64 } else { 32 };
        let (hidden, heads, kv_heads, ffn, layers, vocab) = (64, 2, 1, 96, 2, 8);
        let a = |k: &str| format!("{architecture}.{k}");
        let tokens = [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "a",
            "b",
            "c",
            "d",
            "e",
        ];
        let mut w = GgufWriter::new()
            .metadata(
                "general.architecture",
                GgufValue::String(architecture.into()),
            )
            .metadata(&a("embedding_length"), GgufValue::U32(hidden as u32))
            .metadata(&a("block_count"), GgufValue::U32(layers as u32))
            .metadata(&a("feed_forward_length"), GgufValue::U32(ffn as u32))
            .metadata(&a("attention.head_count"), GgufValue::U32(heads as u32))
            .metadata(
                &a("attention.head_count_kv"),
                GgufValue::U32(kv_heads as u32),
            )
            .metadata(&a("attention.layer_norm_rms_epsilon"), GgufValue::F32(1e-6))
            .metadata(&a("rope.freq_base"), GgufValue::F32(1e6))
            .metadata(&a("context_length"), GgufValue::U32(256))
            .metadata(&a("rope.dimension_count"), GgufValue::U32(head_dim as u32))
            .metadata("tokenizer.ggml.model", GgufValue::String("gpt2".into()))
            .metadata(
                "tokenizer.ggml.tokens",
                GgufValue::Array(tokens.map(|t| GgufValue::String(t.into())).to_vec()),
            )
            .metadata(
                "tokenizer.ggml.token_type",
                GgufValue::Array([3, 3, 3, 1, 1, 1, 1, 1].map(GgufValue::I32).to_vec()),
            )
            .metadata("tokenizer.ggml.merges", GgufValue::Array(vec![]))
            .metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(1))
            .metadata("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
        if qwen3 {
            w = w
                .metadata(&a("attention.key_length"), GgufValue::U32(head_dim as u32))
                .metadata(
                    &a("attention.value_length"),
                    GgufValue::U32(head_dim as u32),
                );
        }
        let mut seed = 0u32;
        let mut t = |w: GgufWriter, name: &str, rows: usize, cols: usize, format: WeightFormat| {
            let values: Vec<f32> = (0..rows * cols)
                .map(|_| {
                    seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect();
            let bytes = quantize(format, &values, cols).expect("whole blocks");
            let dims: Vec<u64> = match rows {
                1 => vec![cols as u64],
                _ => vec![cols as u64, rows as u64],
            };
            w.tensor(name, &dims, GgmlType::from_format(format), bytes)
        };
        use WeightFormat::*;
        let (q, kv) = (heads * head_dim, kv_heads * head_dim);
        w = t(w, "token_embd.weight", vocab, hidden, F16);
        for i in 0..layers {
            let b = |s: &str| format!("blk.{i}.{s}");
            w = t(w, &b("attn_norm.weight"), 1, hidden, F32);
            w = t(w, &b("attn_q.weight"), q, hidden, Q8_0);
            w = t(w, &b("attn_k.weight"), kv, hidden, Q8_0);
            w = t(w, &b("attn_v.weight"), kv, hidden, Q8_0);
            if architecture == "qwen2" {
                w = t(w, &b("attn_q.bias"), 1, q, F32);
                w = t(w, &b("attn_k.bias"), 1, kv, F32);
                w = t(w, &b("attn_v.bias"), 1, kv, F32);
            }
            if qwen3 {
                w = t(w, &b("attn_q_norm.weight"), 1, head_dim, F32);
                w = t(w, &b("attn_k_norm.weight"), 1, head_dim, F32);
            }
            w = t(w, &b("attn_output.weight"), hidden, q, Q8_0);
            w = t(w, &b("ffn_norm.weight"), 1, hidden, F32);
            w = t(w, &b("ffn_gate.weight"), ffn, hidden, Q4_0);
            w = t(w, &b("ffn_up.weight"), ffn, hidden, Q4_0);
            w = t(w, &b("ffn_down.weight"), hidden, ffn, Q4_1);
        }
        w = t(w, "output_norm.weight", 1, hidden, F32);
        t(w, "output.weight", vocab, hidden, Bf16)
    }

    /// [`GgufWriter::tiny_model`]`("llama")` with Llama 3.x rope scaling as llama.cpp's
    /// converter ships it: `rope_freqs.weight`, one f32 divisor per pair of the 32-value
    /// heads, from the llama3 parameters factor 8, low_freq_factor 1, high_freq_factor 4
    /// and an original context of 64 positions (small, so that the tiny heads' 16 pairs
    /// fall in all three bands: kept, divided by the factor, and blended). The metadata
    /// says nothing more, as the converter's files do not.
    pub fn tiny_llama3() -> Self {
        let (head_dim, theta) = (32, 1e6f64);
        let (factor, low, high, original) = (8.0f64, 1.0f64, 4.0f64, 64.0f64);
        let divisors: Vec<f32> = (0..head_dim / 2)
            .map(|i| {
                let freq = theta.powf(-((2 * i) as f64) / head_dim as f64);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                if wavelen < original / high {
                    1.0
                } else if wavelen > original / low {
                    factor as f32
                } else {
                    let smooth = (original / wavelen - low) / (high - low);
                    (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
                }
            })
            .collect();
        let bytes = quantize(WeightFormat::F32, &divisors, divisors.len()).expect("f32");
        Self::tiny_model("llama").tensor(
            "rope_freqs.weight",
            &[divisors.len() as u64],
            GgmlType::from_format(WeightFormat::F32),
            bytes,
        )
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let alignment = self
            .metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT)
            .max(1) as usize;
        let mut out = Vec::new();
        out.extend(b"GGUF");
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend(type_id(value).to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (name, dims, ty, bytes) in &self.tensors {
            write_string(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(ty.0.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + bytes.len()).next_multiple_of(alignment);
        }
        let data_start = out.len().next_multiple_of(alignment);
        out.resize(data_start, 0);
        for ((_, _, _, bytes), offset) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + offset, 0);
            out.extend(bytes);
        }
        out
    }
}

fn type_id(value: &GgufValue) -> u32 {
    match value {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::String(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &GgufValue) {
    match value {
        GgufValue::U8(v) => out.extend(v.to_le_bytes()),
        GgufValue::I8(v) => out.extend(v.to_le_bytes()),
        GgufValue::U16(v) => out.extend(v.to_le_bytes()),
        GgufValue::I16(v) => out.extend(v.to_le_bytes()),
        GgufValue::U32(v) => out.extend(v.to_le_bytes()),
        GgufValue::I32(v) => out.extend(v.to_le_bytes()),
        GgufValue::F32(v) => out.extend(v.to_le_bytes()),
        GgufValue::Bool(v) => out.push(u8::from(*v)),
        GgufValue::String(s) => write_string(out, s),
        GgufValue::Array(items) => {
            // An empty array's element type is arbitrary; u8 is as good as any.
            let elem = items.first().map_or(0, type_id);
            out.extend(elem.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            items.iter().for_each(|v| write_value(out, v));
        }
        GgufValue::U64(v) => out.extend(v.to_le_bytes()),
        GgufValue::I64(v) => out.extend(v.to_le_bytes()),
        GgufValue::F64(v) => out.extend(v.to_le_bytes()),
    }
}
