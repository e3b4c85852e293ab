//! `POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace?}` and
//! `POST /v1/unload_lora_adapter {lora_name}`, in vLLM's paths, fields and answers (a
//! plain-text `Success: ...` with 200); refusals are sprout's JSON errors naming the
//! field. A request's `model` then names the adapter to run with it.
//!
//! sprout serves one adapter at a time beside the base model: loading another name while
//! one is loaded is a 409 (unload it first); loading the loaded name is a 400 unless
//! `load_inplace` is true, which replaces its contents one version up while requests keep
//! running (see `engine_lora`). The adapter is read and checked (PEFT's directory, its
//! ranks against `--max-lora-rank`, its shapes against the model) on a blocking thread;
//! only then does the engine thread upload it and put it in force between two steps. A
//! bad adapter is a 400 naming the problem, and the adapter in force stays.
//!
//! Unloading an adapter that is not loaded is a 404; while requests with it are
//! unfinished (queued, held or running) it is a 409 saying how many.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use sprout::model::lora::LoraAdapter;

use crate::cli::serve::adapters::ServedLora;
use crate::cli::serve::engine_lora::{already_loaded, another_loaded};
use crate::cli::serve::error::{ApiError, internal, short};
use crate::cli::serve::messages::Command;
use crate::cli::serve::request;
use crate::cli::serve::state::AppState;

/// The longest adapter name accepted, in bytes.
pub const MAX_LORA_NAME_BYTES: usize = 256;

/// The body as an object with only the `allowed` keys.
fn object(body: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let obj = request::object(body)?;
    let unknown: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if let Some(first) = unknown.first() {
        return Err(ApiError::bad(
            first,
            format!(
                "unknown fields: {} (this route takes {})",
                unknown.join(", "),
                allowed.join(", ")
            ),
        ));
    }
    Ok(obj)
}

/// `lora_name`: a non-empty string of at most [`MAX_LORA_NAME_BYTES`] bytes that is not
/// the served model's name.
fn lora_name(state: &AppState, obj: &Map<String, Value>) -> Result<String, ApiError> {
    let name = match obj.get("lora_name") {
        Some(Value::String(name)) => name,
        None | Some(Value::Null) => {
            return Err(ApiError::bad("lora_name", "lora_name is required"));
        }
        Some(v) => {
            return Err(ApiError::bad(
                "lora_name",
                format!("lora_name must be a string, not {}", short(v)),
            ));
        }
    };
    if name.is_empty() {
        return Err(ApiError::bad("lora_name", "lora_name must not be empty"));
    }
    if name.len() > MAX_LORA_NAME_BYTES {
        return Err(ApiError::bad(
            "lora_name",
            format!(
                "lora_name is {} bytes, more than {MAX_LORA_NAME_BYTES}",
                name.len()
            ),
        ));
    }
    if *name == state.served_name {
        return Err(ApiError::bad(
            "lora_name",
            format!("lora_name `{name}` is the served model's name: give the adapter another"),
        ));
    }
    Ok(name.clone())
}

/// What a load asks for.
struct LoadRequest {
    name: String,
    path: String,
    inplace: bool,
}

fn parse_load(state: &AppState, body: &[u8]) -> Result<LoadRequest, ApiError> {
    let obj = object(body, &["lora_name", "lora_path", "load_inplace"])?;
    let name = lora_name(state, &obj)?;
    let path = match obj.get("lora_path") {
        Some(Value::String(path)) if !path.is_empty() => path.clone(),
        Some(Value::String(_)) => {
            return Err(ApiError::bad("lora_path", "lora_path must not be empty"));
        }
        None | Some(Value::Null) => {
            return Err(ApiError::bad(
                "lora_path",
                "lora_path is required: the adapter's directory (PEFT's adapter_config.json \
                 and adapter_model.safetensors)",
            ));
        }
        Some(v) => {
            return Err(ApiError::bad(
                "lora_path",
                format!("lora_path must be a string, not {}", short(v)),
            ));
        }
    };
    let inplace = match obj.get("load_inplace") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ApiError::bad(
                "load_inplace",
                format!("load_inplace must be a boolean, not {}", short(v)),
            ));
        }
    };
    Ok(LoadRequest {
        name,
        path,
        inplace,
    })
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| ApiError::status(e.status(), e.body_text()))
}

/// Reads and checks the adapter at `path` against the model (blocking).
fn read(state: &AppState, path: &str) -> Result<LoraAdapter, ApiError> {
    let dir = PathBuf::from(path);
    if !dir.is_dir() {
        return Err(ApiError::bad(
            "lora_path",
            format!("lora_path {path:?} is not a directory"),
        ));
    }
    LoraAdapter::read_dir(&dir, &state.facts.config, state.adapters.max_rank)
        .map_err(|e| ApiError::bad("lora_path", format!("the LoRA adapter {path:?}: {e}")))
}

pub async fn load_lora_adapter(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let request = parse_load(&state, &body)?;
    // One change at a time, so that what is checked here is what the engine has.
    let _changing = state.adapters.changing.lock().await;
    match state.adapters.get() {
        Some(l) if l.name != request.name => return Err(another_loaded(&l.name)),
        Some(_) if !request.inplace => return Err(already_loaded(&request.name)),
        _ => {}
    }
    let reading = state.clone();
    let path = request.path.clone();
    let adapter = tokio::task::spawn_blocking(move || read(&reading, &path))
        .await
        .map_err(internal)??;
    let name = request.name.clone();
    let version = state
        .engine
        .ask(|reply| Command::LoadLora {
            adapter: Box::new(adapter),
            name,
            inplace: request.inplace,
            reply,
        })
        .await??;
    state.adapters.set(Some(ServedLora {
        name: request.name.clone(),
        path: request.path.clone(),
        version,
    }));
    tracing::info!(
        "LoRA adapter `{}` version {version} from {} in force",
        request.name,
        request.path
    );
    let text = format!(
        "Success: LoRA adapter '{}' added successfully.",
        request.name
    );
    Ok((StatusCode::OK, text).into_response())
}

pub async fn unload_lora_adapter(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let obj = object(&body, &["lora_name"])?;
    let name = lora_name(&state, &obj)?;
    let _changing = state.adapters.changing.lock().await;
    let unloading = name.clone();
    state
        .engine
        .ask(|reply| Command::UnloadLora {
            name: unloading,
            reply,
        })
        .await??;
    state.adapters.set(None);
    tracing::info!("LoRA adapter `{name}` unloaded");
    let text = format!("Success: LoRA adapter '{name}' removed successfully.");
    Ok((StatusCode::OK, text).into_response())
}
