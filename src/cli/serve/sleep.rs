//! `POST /sleep`, `POST /wake_up` and `GET /is_sleeping`, in vLLM's paths and semantics:
//! a trainer on the same device takes the memory the engine frees while it steps, then
//! gives it back (the loop's side is `engine_sleep`).
//!
//! - `/sleep?level=1` (the default) frees the KV cache and the weights' device buffers,
//!   keeping the weights in host memory; `level=2` discards the weights too (the trainer
//!   then wakes the weights, pushes `/update_weights`, and wakes the KV cache); `level=0`
//!   only stops stepping. `mode` says what happens to the requests in flight, as
//!   `/pause`'s does: `wait` (the default here: they finish first), `abort` (their
//!   clients get what they had) or `keep` (they are preempted, and finish after the wake).
//! - `/wake_up` wakes everything; `?tags=weights`, `?tags=kv_cache` (repeatable) and
//!   `?tags=scheduling` wake part of it. Stepping resumes once no memory sleeps.
//! - Both are idempotent: sleeping again does nothing more (or deepens, level 2 after 1),
//!   waking what is awake does nothing.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cli::serve::error::ApiError;
use crate::cli::serve::messages::{Command, PauseMode, WakeTag};
use crate::cli::serve::state::AppState;

/// `/sleep`'s query: vLLM's keys, and no others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SleepQuery {
    level: Option<String>,
    mode: Option<String>,
}

pub async fn sleep(
    State(state): State<Arc<AppState>>,
    query: Result<Query<SleepQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let query = query.map_err(|e| ApiError::status(StatusCode::BAD_REQUEST, e.body_text()))?;
    let level = match query.0.level.as_deref() {
        None => 1,
        Some("0") => 0,
        Some("1") => 1,
        Some("2") => 2,
        Some(other) => {
            return Err(ApiError::bad(
                "level",
                format!("level must be 0, 1 or 2, not {other:?}"),
            ));
        }
    };
    let (mode, name) = match query.0.mode.as_deref() {
        None => (PauseMode::Wait, "wait"),
        Some(text) => PauseMode::parse(text)?,
    };
    // A reply dropped unanswered is a sleep called off (as `/pause` takes it).
    let report = state
        .engine
        .ask(|reply| Command::Sleep { level, mode, reply })
        .await
        .map_err(|_| called_off())?
        .map_err(|e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok(Json(json!({
        "is_sleeping": true,
        "level": report.level,
        "mode": name,
        "preempted": report.preempted,
        "gpu_memory_bytes_before": report.gpu_memory_bytes_before,
        "gpu_memory_bytes": report.gpu_memory_bytes,
        "freed_weights_bytes": report.freed_weights_bytes,
        "freed_kv_cache_bytes": report.freed_kv_cache_bytes,
    })))
}

fn called_off() -> ApiError {
    ApiError::status(
        StatusCode::CONFLICT,
        "the sleep was called off (a /resume or /wake_up came) before the requests in flight \
         had finished",
    )
}

/// Retry-After for a wake that failed: the process holding the memory may need seconds to
/// let it go.
const RETRY_AFTER_WAKE_S: u64 = 5;

/// A wake that fails (the device cannot allocate what it needs: another process still
/// holds the memory) is a 503 naming it, with Retry-After; what did not wake still sleeps.
pub async fn wake_up(
    State(state): State<Arc<AppState>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let query = query.map_err(|e| ApiError::status(StatusCode::BAD_REQUEST, e.body_text()))?;
    let mut tags = Vec::new();
    for (key, value) in query.0 {
        if key != "tags" {
            return Err(ApiError::bad(
                &key,
                format!("unknown query parameter {key:?}: /wake_up takes only tags"),
            ));
        }
        let tag = WakeTag::ALL.into_iter().find(|t| t.name() == value);
        let tag = tag.ok_or_else(|| {
            ApiError::bad(
                "tags",
                format!("tags must be weights, kv_cache or scheduling, not {value:?}"),
            )
        })?;
        tags.push(tag);
    }
    let tags = (!tags.is_empty()).then_some(tags);
    let report = state
        .engine
        .ask(|reply| Command::WakeUp { tags, reply })
        .await?
        .map_err(|e| ApiError::unavailable(e, RETRY_AFTER_WAKE_S))?;
    Ok(Json(
        serde_json::to_value(report).map_err(crate::cli::serve::error::internal)?,
    ))
}

pub async fn is_sleeping(State(state): State<Arc<AppState>>) -> Json<Value> {
    let status = state.engine.status();
    Json(json!({
        "is_sleeping": status.sleep.is_sleeping(),
        "level": status.sleep.level,
        "asleep": {
            "weights": status.sleep.weights,
            "kv_cache": status.sleep.kv_cache,
            "scheduling": status.sleep.scheduling,
        },
        "weights": status.weights,
    }))
}
