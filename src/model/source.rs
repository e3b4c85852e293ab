//! Where the decoder gets its weights: a `WeightSource` (a GGUF file, a Hugging Face
//! directory) that yields one tensor at a time under sprout's canonical names, so that
//! loading never holds more than one tensor's bytes on the CPU.
//!
//! Canonical names (`{i}` is the layer index):
//!
//! | name                      | shape (rows x cols)                 | notes                     |
//! |---------------------------|-------------------------------------|---------------------------|
//! | `embed`                   | vocab x hidden                      |                           |
//! | `layers.{i}.attn_norm`    | hidden                              |                           |
//! | `layers.{i}.q`            | n_heads*head_dim x hidden           |                           |
//! | `layers.{i}.k`, `.v`      | n_kv_heads*head_dim x hidden        |                           |
//! | `layers.{i}.q_bias` etc.  | q or kv dim                         | Qwen2 only                |
//! | `layers.{i}.q_norm`, `.k_norm` | head_dim                       | Qwen3 only                |
//! | `layers.{i}.o`            | hidden x n_heads*head_dim           |                           |
//! | `layers.{i}.mlp_norm`     | hidden                              |                           |
//! | `layers.{i}.gate`, `.up`  | intermediate x hidden               |                           |
//! | `layers.{i}.down`         | hidden x intermediate               |                           |
//! | `final_norm`              | hidden                              |                           |
//! | `lm_head`                 | vocab x hidden                      | absent when tied          |

use crate::error::SproutError;
use crate::formats::{TensorData, WeightFormat};
use crate::model::config::ModelConfig;

pub trait WeightSource {
    fn config(&self) -> &ModelConfig;
    /// Reads the tensor with canonical `name`; an absent tensor is an error naming it.
    fn read(&mut self, name: &str) -> Result<TensorData, SproutError>;
    /// Whether the source has the tensor with canonical `name`.
    fn has(&self, name: &str) -> bool;
    /// A tensor the source holds that is none of `used` (canonical names), by its stored
    /// name: something a model of this config has no place for.
    fn unused_tensor(&self, used: &[String]) -> Option<String>;
    /// The format the tensor with canonical `name` is stored in, without reading it; an
    /// absent tensor is an error naming it.
    fn format(&self, name: &str) -> Result<WeightFormat, SproutError>;
}
