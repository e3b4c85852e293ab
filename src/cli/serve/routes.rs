//! The HTTP routes: `POST /v1/completions`, `POST /v1/chat/completions`,
//! `GET /v1/models` (the served model, and the LoRA adapter when one is loaded, as vLLM
//! lists one: `parent` the served model, `root` its directory), `GET /health`,
//! `GET /metrics`, with the API-key check, the body
//! limit and one access-log line per request; the API key guards the token routes
//! (`generate`, `tokenize`, `render`) as it guards `/v1`.
//!
//! The handlers themselves live with what they do: `handlers` (completions and chat),
//! `generate`, `tokenize`, `render`, `trl`, `admin`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::cli::serve::error::ApiError;
use crate::cli::serve::error::internal;
use crate::cli::serve::handlers::{chat_completions, completions};
use crate::cli::serve::state::AppState;
use crate::cli::serve::{admin, generate, render, tokenize, trl};

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 16 << 20;

pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/generate/", post(trl::generate))
        .route("/generate", post(trl::generate))
        .route("/inference/v1/generate", post(generate::generate))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/v1/chat/completions/render", post(render::chat))
        .route("/v1/completions/render", post(render::completions))
        .route_layer(middleware::from_fn_with_state(state.clone(), check_key));
    Router::new()
        .route("/health", get(health))
        .route("/health/", get(health))
        .route("/metrics", get(metrics))
        .merge(v1)
        .merge(admin::router(state.clone()))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(refuse_long_bodies))
        .layer(middleware::from_fn(access_log))
        .with_state(state)
}

/// One line per request: method, path, status, duration.
async fn access_log(request: HttpRequest, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let start = Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        "{method} {path} {} {:.1}ms",
        response.status().as_u16(),
        start.elapsed().as_secs_f64() * 1e3
    );
    response
}

/// Refuses a body whose declared length is over the limit before reading any of it (the
/// body limit itself only stops a body once that much has arrived).
async fn refuse_long_bodies(request: HttpRequest, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = declared
        && length > MAX_BODY_BYTES as u64
    {
        return ApiError::status(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is {length} bytes, over the limit of {MAX_BODY_BYTES}"),
        )
        .into_response();
    }
    next.run(request).await
}

/// With `--api-key`, the `/v1` routes need `Authorization: Bearer KEY`.
async fn check_key(
    State(state): State<Arc<AppState>>,
    request: HttpRequest,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return ApiError::status(
                StatusCode::UNAUTHORIZED,
                "a valid API key is required: Authorization: Bearer KEY",
            )
            .into_response();
        }
    }
    next.run(request).await
}

async fn not_found(request: HttpRequest) -> ApiError {
    ApiError::status(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

async fn health(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let m = &state.engine.metrics;
    let status = state.engine.status();
    Json(json!({
        "status": "ok",
        "requests_running": m.num_requests_running.get(),
        "requests_waiting": m.num_requests_waiting.get(),
        "queued_samples": state.queued.load(Ordering::Relaxed),
        "kv_blocks_in_use": m.kv_blocks_in_use.get(),
        "kv_blocks": state.facts.kv_blocks,
        "weights_version": state.weights_version.load(Ordering::Acquire),
        "lora_adapter": state.adapters.get().map(|l| json!({
            "name": l.name,
            "path": l.path,
            "version": l.version,
        })),
        "is_sleeping": status.sleep.is_sleeping(),
        "weights": status.weights,
        "gpu_memory_bytes": status.memory.bytes,
        "gpu_memory_allocated_bytes": status.memory.allocated,
        "gpu_memory_source": status.memory.source,
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let text = state.engine.metrics.render().map_err(internal)?;
    let kind = "text/plain; version=0.0.4; charset=utf-8";
    Ok(([(header::CONTENT_TYPE, kind)], text).into_response())
}

async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut data = vec![json!({
        "id": state.served_name,
        "object": "model",
        "created": state.started,
        "owned_by": "sprout",
        "root": state.facts.model_path,
        "parent": null,
        "max_model_len": state.max_model_len,
        "weights_version": state.weights_version.load(Ordering::Acquire),
    })];
    if let Some(lora) = state.adapters.get() {
        data.push(json!({
            "id": lora.name,
            "object": "model",
            "created": state.started,
            "owned_by": "sprout",
            "root": lora.path,
            "parent": state.served_name,
            "max_model_len": state.max_model_len,
            "lora_version": lora.version,
        }));
    }
    Json(json!({"object": "list", "data": data}))
}
