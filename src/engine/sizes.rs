//! The pool and batch sizes an engine runs with, from its config, the adapter and the model.
//!
//! Two values can be used other than asked, and each such value comes back as an
//! [`Adjusted`] for the caller to report: a `--kv-memory` budget buying more blocks than
//! the adapter can bind (one layer's keys must fit one binding) is cut to the blocks it can;
//! `max_num_seqs` is cut to `max_batch_tokens` (each sequence computes at least one token a
//! step). The automatic KV budget is cut the same way without a report: nobody asked for
//! it. The vocabulary never cuts `max_num_seqs`: logits live in chunks of rows that each
//! fit one binding (`gpu::kernels::Logits`), however many rows a step has.

use crate::error::SproutError;
use crate::gpu::Gpu;
use crate::model::config::ModelConfig;
use crate::sched::Adjusted;

use super::paged_kv::PagedKv;
use super::{EngineConfig, KvSize, default_kv_memory};

/// What [`sizes`] chose.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSizes {
    pub num_blocks: usize,
    pub max_num_seqs: usize,
    /// The config's values used other than asked.
    pub adjusted: Vec<Adjusted>,
}

/// The sizes `config` gets on `gpu` for a model of config `c`.
pub fn sizes(
    gpu: &Gpu,
    c: &ModelConfig,
    config: &EngineConfig,
) -> Result<EngineSizes, SproutError> {
    let mut adjusted = Vec::new();
    let num_blocks = num_blocks(gpu, c, config, &mut adjusted)?;
    let asked = config.max_num_seqs;
    let max_num_seqs = asked.min(config.max_batch_tokens).max(1);
    if max_num_seqs != asked {
        adjusted.push(Adjusted {
            param: "max_num_seqs",
            asked: asked as u64,
            used: max_num_seqs as u64,
            why: format!("as a step computes at most max_batch_tokens ({max_num_seqs}) tokens"),
        });
    }
    Ok(EngineSizes {
        num_blocks,
        max_num_seqs,
        adjusted,
    })
}

fn num_blocks(
    gpu: &Gpu,
    c: &ModelConfig,
    config: &EngineConfig,
    adjusted: &mut Vec<Adjusted>,
) -> Result<usize, SproutError> {
    let bs = config.block_size;
    if bs == 0 {
        return Err(SproutError::Shape(
            "the KV block size must be at least 1".into(),
        ));
    }
    let max = PagedKv::max_blocks(gpu, c, bs);
    let per_block = PagedKv::bytes_per_block(c, bs);
    match config.kv {
        // An exact count beyond the adapter's limit is PagedKv::new's error.
        KvSize::Blocks(n) => Ok(n),
        KvSize::Memory(bytes) => {
            let n = PagedKv::blocks_for_memory(c, bs, bytes);
            if n == 0 {
                return Err(SproutError::Shape(format!(
                    "a KV budget of {bytes} bytes holds no block ({per_block} bytes each)"
                )));
            }
            if n > max {
                adjusted.push(Adjusted {
                    param: "kv_memory",
                    asked: bytes,
                    used: max as u64 * per_block,
                    why: format!(
                        "{max} blocks of {bs} tokens, the most whose keys for one layer fit \
                         the adapter's {}-byte binding limit",
                        gpu.caps.max_binding.min(gpu.caps.max_buffer)
                    ),
                });
            }
            Ok(n.min(max))
        }
        KvSize::Auto => Ok(PagedKv::blocks_for_memory(c, bs, default_kv_memory(gpu)).min(max)),
    }
}
