//! The routes a trainer drives the server with, in vLLM's shapes: `POST /pause`,
//! `POST /resume`, `GET /is_paused`, `POST /abort_requests`, `POST /reset_prefix_cache`,
//! `POST /update_weights` (in `update`), and `POST /sleep`, `POST /wake_up` and
//! `GET /is_sleeping` (in `sleep`), and vLLM's `POST /v1/load_lora_adapter` and
//! `POST /v1/unload_lora_adapter` (in `lora`: they read a directory on the server).
//!
//! They answer loopback clients only, unless `--admin-api-key` is set: then anyone with
//! `Authorization: Bearer ADMIN_KEY`, and no one without it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Query, Request as HttpRequest, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cli::serve::error::{ApiError, poisoned};
use crate::cli::serve::messages::{Command, PauseMode};
use crate::cli::serve::state::AppState;
use crate::cli::serve::{lora, sleep, update};

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/is_paused", get(is_paused))
        .route("/abort_requests", post(abort_requests))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .route("/reset_prefix_cache/", post(reset_prefix_cache))
        .route("/update_weights", post(update::update_weights))
        .route("/sleep", post(sleep::sleep))
        .route("/wake_up", post(sleep::wake_up))
        .route("/is_sleeping", get(sleep::is_sleeping))
        .route("/v1/load_lora_adapter", post(lora::load_lora_adapter))
        .route("/v1/unload_lora_adapter", post(lora::unload_lora_adapter))
        .route_layer(middleware::from_fn_with_state(state, check_admin))
}

/// Loopback only, or the admin key: see the module docs.
async fn check_admin(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: HttpRequest,
    next: Next,
) -> Response {
    let allowed = match &state.admin_key {
        Some(key) => {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            given == Some(key.as_str())
        }
        None => peer.ip().is_loopback(),
    };
    if !allowed {
        let message = match state.admin_key {
            Some(_) => "a valid admin key is required: Authorization: Bearer ADMIN_KEY",
            None => "the admin routes answer loopback clients only (set --admin-api-key)",
        };
        let status = match state.admin_key {
            Some(_) => StatusCode::UNAUTHORIZED,
            None => StatusCode::FORBIDDEN,
        };
        return ApiError::status(status, message).into_response();
    }
    next.run(request).await
}

/// `/pause`'s query: vLLM's keys, and no others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseQuery {
    mode: Option<String>,
    /// vLLM's older spelling of `mode=wait` (true) or `mode=abort` (false).
    wait_for_inflight_requests: Option<bool>,
    /// Forget the prefix cache once the requests in flight are gone (vLLM's default:
    /// true); not with `mode=keep`, whose requests keep their blocks.
    clear_cache: Option<bool>,
}

impl PauseQuery {
    /// The mode asked for, by name or by vLLM's older flag; both at once must agree.
    fn mode(&self) -> Result<(PauseMode, &'static str), ApiError> {
        let named = self.mode.as_deref().map(PauseMode::parse).transpose()?;
        let flagged = self.wait_for_inflight_requests.map(|wait| match wait {
            true => (PauseMode::Wait, "wait"),
            false => (PauseMode::Abort, "abort"),
        });
        match (named, flagged) {
            (Some(m), Some(f)) if m.0 != f.0 => Err(ApiError::bad(
                "wait_for_inflight_requests",
                format!(
                    "wait_for_inflight_requests={} contradicts mode={}",
                    f.0 == PauseMode::Wait,
                    m.1
                ),
            )),
            (m, f) => Ok(m.or(f).unwrap_or((PauseMode::Abort, "abort"))),
        }
    }
}

/// `?mode=abort` (the default, as vLLM's), `wait` or `keep`; `clear_cache` (default true)
/// forgets the prefix cache after an `abort` or `wait` pause, as vLLM does.
async fn pause(
    State(state): State<Arc<AppState>>,
    query: Result<Query<PauseQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let query = query.map_err(|e| ApiError::status(StatusCode::BAD_REQUEST, e.body_text()))?;
    let (mode, name) = query.0.mode()?;
    let clear = query.0.clear_cache.unwrap_or(true) && mode != PauseMode::Keep;
    state
        .engine
        .ask(|reply| Command::Pause { mode, reply })
        .await
        .map_err(|_| {
            ApiError::status(
                StatusCode::CONFLICT,
                "the server resumed before the requests in flight had finished",
            )
        })?;
    state.paused.store(true, Ordering::Relaxed);
    let forgotten = match clear {
        true => {
            state
                .engine
                .ask(|reply| Command::ResetPrefixCache { reply })
                .await?
        }
        false => 0,
    };
    Ok(Json(
        json!({"paused": true, "mode": name, "forgotten_blocks": forgotten}),
    ))
}

async fn resume(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    state.engine.ask(|reply| Command::Resume { reply }).await?;
    state.paused.store(false, Ordering::Relaxed);
    Ok(Json(json!({"paused": false})))
}

async fn is_paused(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"is_paused": state.paused.load(Ordering::Relaxed)}))
}

/// `{"request_ids": [...]}`: the ids of requests in flight (`request_id` in their body,
/// or their response's `id`); an empty list (or none) aborts every request.
async fn abort_requests(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = body.map_err(|e| ApiError::status(e.status(), e.body_text()))?;
    let ids: Vec<String> = match body.is_empty() {
        true => Vec::new(),
        false => {
            let value: Value = serde_json::from_slice(&body).map_err(|e| {
                ApiError::status(
                    StatusCode::BAD_REQUEST,
                    format!("the body is not valid JSON: {e}"),
                )
            })?;
            match value.get("request_ids") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
                    ApiError::bad("request_ids", "request_ids must be a list of strings")
                })?,
            }
        }
    };
    let (indexes, not_found) = match ids.is_empty() {
        true => (None, Vec::new()),
        false => {
            let jobs = state.jobs.lock().map_err(|_| poisoned())?;
            let mut indexes = Vec::new();
            let mut not_found = Vec::new();
            for id in ids {
                match jobs.get(&id) {
                    Some(found) => indexes.extend(found),
                    None => not_found.push(id),
                }
            }
            (Some(indexes), not_found)
        }
    };
    let aborted = state
        .engine
        .ask(|reply| Command::AbortRequests { indexes, reply })
        .await?;
    Ok(Json(
        json!({"aborted_prompts": aborted, "not_found": not_found}),
    ))
}

/// `/reset_prefix_cache`'s query: vLLM's keys, each accepted at false only (sprout forgets
/// the blocks no request holds, and has no external cache), and no others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetQuery {
    reset_running_requests: Option<bool>,
    reset_external: Option<bool>,
}

async fn reset_prefix_cache(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ResetQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let query = query.map_err(|e| ApiError::status(StatusCode::BAD_REQUEST, e.body_text()))?;
    let refused = [
        (
            "reset_running_requests",
            query.0.reset_running_requests,
            "the blocks of running requests stay theirs",
        ),
        (
            "reset_external",
            query.0.reset_external,
            "sprout has no external prefix cache",
        ),
    ];
    if let Some((name, _, why)) = refused.iter().find(|(_, on, _)| *on == Some(true)) {
        return Err(ApiError::bad(
            name,
            format!("{name}=true is not supported: {why}"),
        ));
    }
    let forgotten = state
        .engine
        .ask(|reply| Command::ResetPrefixCache { reply })
        .await?;
    Ok(Json(
        json!({"success": true, "forgotten_blocks": forgotten}),
    ))
}
