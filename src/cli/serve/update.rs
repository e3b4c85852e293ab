//! `POST /update_weights {weight_dir, weights_version?, quantize?}`: a trainer's new
//! weights, put in force between two steps while requests keep running.
//!
//! `quantize` (`q8_0`, `q4_0`, `q4_1` or `none`; default: the server's `--quantize`)
//! quantizes the checkpoint's float matrices as they are read, as `--quantize` does at
//! start: a trainer's f32 checkpoint then rolls out in the same block format as before.
//!
//! The checkpoint (a Hugging Face directory, or a GGUF file) is read and uploaded on a
//! blocking thread, into new buffers beside the weights in force, which keep serving
//! meanwhile. Only once every tensor has been checked (the same model in every size, no
//! tensor missing or extra, every value finite, and the same vocabulary when the
//! checkpoint has a tokenizer) does the engine thread swap them in, between two steps.
//! A checkpoint that does not fit is a 400 naming the problem, and nothing changes.
//!
//! Versions: each token records the weights version it was drawn under, so a sample that
//! spans an update says where it changed; blocks filled under other weights are never a
//! prefix-cache hit. One update at a time: a second, while one loads, is a 409. A LoRA
//! adapter in force stays, relabelled one version up (its tokens record the adapter's
//! version, which so names one base), and the reply's `lora_version` says which.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use sprout::formats::WeightFormat;
use sprout::model::decoder_weights::DecoderWeights;
use sprout::model::gguf_model::GgufModel;
use sprout::model::quantize_on_load::QuantizeOnLoad;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;
use sprout::tokenizer::{Tokenizer, VocabularyDifference};
use tokio::sync::oneshot;

use crate::cli::cli_args::parse_quantize;
use crate::cli::serve::adapters::ServedLora;
use crate::cli::serve::error::ApiError;
use crate::cli::serve::error::internal;
use crate::cli::serve::heap;
use crate::cli::serve::messages::Command;
use crate::cli::serve::state::AppState;

/// What an update asks for.
struct UpdateRequest {
    weight_dir: PathBuf,
    /// Default: one past the version in force.
    weights_version: Option<u64>,
    /// `None`: the server's `--quantize`; `Some(None)`: as stored.
    quantize: Option<Option<WeightFormat>>,
}

fn parse(body: &[u8]) -> Result<UpdateRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::status(
            StatusCode::BAD_REQUEST,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::status(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        ));
    };
    // prime-rl's and SGLang's names for the same thing.
    let dir = obj.get("weight_dir").or_else(|| obj.get("model_path"));
    let weight_dir = match dir {
        Some(Value::String(dir)) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            return Err(ApiError::bad(
                "weight_dir",
                "weight_dir must be the path of a checkpoint (a Hugging Face directory or a \
                 GGUF file)",
            ));
        }
    };
    let quantize = match obj.get("quantize") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(
            parse_quantize(text)
                .map_err(|e| ApiError::bad("quantize", e))?
                .0,
        ),
        Some(v) => {
            return Err(ApiError::bad(
                "quantize",
                format!(
                    "quantize must be one of {} or none, not {v}",
                    sprout::model::quantize_on_load::quantize_format_names()
                ),
            ));
        }
    };
    Ok(UpdateRequest {
        weight_dir,
        weights_version: version(&obj)?,
        quantize,
    })
}

/// `weights_version` (or SGLang's `weight_version`), a non-negative integer.
fn version(obj: &Map<String, Value>) -> Result<Option<u64>, ApiError> {
    let given = obj
        .get("weights_version")
        .or_else(|| obj.get("weight_version"));
    match given {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ApiError::bad(
                "weights_version",
                format!("weights_version must be a non-negative integer, not {v}"),
            )
        }),
    }
}

/// Clears the "an update is loading" flag however the update ends.
struct Updating<'a>(&'a AppState);

impl Drop for Updating<'_> {
    fn drop(&mut self) {
        self.0.updating.store(false, Ordering::Release);
    }
}

pub async fn update_weights(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = body.map_err(|e| ApiError::status(e.status(), e.body_text()))?;
    let request = parse(&body)?;
    let current = state.weights_version.load(Ordering::Acquire);
    let version = request
        .weights_version
        .unwrap_or_else(|| current.wrapping_add(1));
    if version == current {
        return Err(ApiError::bad(
            "weights_version",
            format!("the server already serves weights version {current}"),
        ));
    }
    if state.updating.swap(true, Ordering::AcqRel) {
        return Err(ApiError::status(
            StatusCode::CONFLICT,
            "another weight update is loading; retry when it has finished",
        ));
    }
    let _updating = Updating(&state);
    // Loading puts the new weights on the device, which a sleeping server has given to a
    // trainer.
    if state.engine.status().sleep.weights {
        return Err(weights_asleep());
    }
    let started = Instant::now();
    let loading = state.clone();
    let dir = request.weight_dir.clone();
    let quantize = request.quantize.unwrap_or(state.facts.quantize);
    let weights = tokio::task::spawn_blocking(move || {
        let weights = load(&loading, &dir, quantize);
        // The checkpoint's host copy is freed by now.
        heap::release_free_pages();
        weights
    })
    .await
    .map_err(internal)??;
    // An adapter in force is relabelled by the swap: no load or unload may change what the
    // HTTP side knows of it meanwhile (`adapters`' invariant).
    let _adapter_change = state.adapters.changing.lock().await;
    let (reply, swapped) = oneshot::channel();
    let command = Command::UpdateWeights {
        weights,
        version,
        reply,
    };
    state
        .engine
        .send(command)
        .map_err(|_| ApiError::engine_stopped())?;
    let lora_version = swapped
        .await
        .map_err(|_| ApiError::engine_stopped())?
        .map_err(|e| ApiError::status(StatusCode::CONFLICT, e))?;
    state.weights_version.store(version, Ordering::Release);
    if let (Some(lora_version), Some(served)) = (lora_version, state.adapters.get()) {
        state.adapters.set(Some(ServedLora {
            version: lora_version,
            ..served
        }));
    }
    let load_s = started.elapsed().as_secs_f64();
    tracing::info!(
        "weights version {version} from {} in force ({load_s:.2} s)",
        request.weight_dir.display()
    );
    let mut reply = json!({
        "success": true,
        "weights_version": version,
        "load_s": load_s,
    });
    if let Some(lora_version) = lora_version {
        reply["lora_version"] = json!(lora_version);
    }
    Ok(Json(reply))
}

fn weights_asleep() -> ApiError {
    ApiError::status(
        StatusCode::CONFLICT,
        "the weights are asleep (/sleep): wake them first (POST /wake_up?tags=weights), then \
         update",
    )
}

/// Reads, checks and uploads the checkpoint at `path` (blocking), its float matrices
/// quantized to `quantize` as they are read.
fn load(
    state: &AppState,
    path: &Path,
    quantize: Option<WeightFormat>,
) -> Result<DecoderWeights, ApiError> {
    let bad =
        |e: &dyn std::fmt::Display| ApiError::bad("weight_dir", format!("{}: {e}", path.display()));
    if !path.exists() {
        return Err(bad(&"no such file or directory"));
    }
    let (mut source, tokenizer): (Box<dyn WeightSource>, Option<Tokenizer>) = if path.is_dir() {
        let dir = SafetensorsDir::open(path).map_err(|e| bad(&e))?;
        let tokenizer = match path.join("tokenizer.json").exists() {
            true => Some(dir.tokenizer().map_err(|e| bad(&e))?),
            false => None,
        };
        (Box::new(dir), tokenizer)
    } else {
        let model = GgufModel::open(path).map_err(|e| bad(&e))?;
        let tokenizer = model.tokenizer().map_err(|e| bad(&e))?;
        (Box::new(model), Some(tokenizer))
    };
    if let Some(tokenizer) = &tokenizer {
        check_vocabulary(&state.facts.tokenizer, tokenizer).map_err(|e| bad(&e))?;
    }
    if let Some(format) = quantize {
        let quantized = QuantizeOnLoad::new(source, format);
        source = Box::new(quantized.map_err(|e| ApiError::bad("quantize", e.to_string()))?);
    }
    let facts = &state.facts;
    DecoderWeights::load_update(&facts.gpu, source.as_mut(), &facts.config, &mut |_, _| {})
        .map_err(|e| bad(&e))
}

/// The new checkpoint's tokenizer must map every id to the same token as the served one.
fn check_vocabulary(serving: &Tokenizer, new: &Tokenizer) -> Result<(), String> {
    match serving.vocabulary_difference(new) {
        None => Ok(()),
        Some(VocabularyDifference::Size { ours, theirs }) => Err(format!(
            "its vocabulary has {theirs} tokens, the served model's {ours}"
        )),
        Some(VocabularyDifference::Token { id, ours, theirs }) => Err(format!(
            "its vocabulary differs from the served model's at token {id} ({theirs:?}, not \
             {ours:?})"
        )),
    }
}
