//! The server's errors, answered in the OpenAI body: `{"error": {"message", "type",
//! "param", "code"}}` with the HTTP status as `code`.
//!
//! Every refusal of a request goes through [`ApiError`], so a client always gets this
//! shape (never a plain-text body or a dropped connection). Every 503 carries Retry-After:
//! [`ApiError::unavailable`] asks for the seconds, and a 503 made another way gets
//! [`RETRY_AFTER_DEFAULT_S`].

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Retry-After of a 503 that names no time of its own.
const RETRY_AFTER_DEFAULT_S: u64 = 1;
/// Retry-After once the engine has stopped (the server is shutting down or failed): long
/// enough for a supervisor to restart it.
const RETRY_AFTER_STOPPED_S: u64 = 5;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// Seconds a client should wait before trying again (503 only).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn bad(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
            retry_after: None,
        }
    }

    /// An error with `status` about no field in particular.
    pub fn status(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }

    /// A 503: the server cannot take the request now; retry after `seconds`.
    pub fn unavailable(message: impl Into<String>, seconds: u64) -> ApiError {
        ApiError {
            retry_after: Some(seconds),
            ..ApiError::status(StatusCode::SERVICE_UNAVAILABLE, message)
        }
    }

    /// The 503 for a request the engine thread can no longer take.
    pub fn engine_stopped() -> ApiError {
        ApiError::unavailable("the engine has stopped", RETRY_AFTER_STOPPED_S)
    }

    /// OpenAI's name for the kind of error.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable_error",
            s if s.is_server_error() => "internal_server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.status.as_u16(),
            }
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        let unavailable = self.status == StatusCode::SERVICE_UNAVAILABLE;
        let retry_after = self
            .retry_after
            .or(unavailable.then_some(RETRY_AFTER_DEFAULT_S));
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A 500 for a failure of the server's own (never the request's).
pub fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// A 500 for a lock an earlier failure poisoned.
pub fn poisoned() -> ApiError {
    ApiError::status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "a lock was poisoned by an earlier failure",
    )
}

/// A value's JSON text, cut short for an error message.
pub fn short(v: &serde_json::Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_after(e: ApiError) -> Option<String> {
        let response = e.into_response();
        let value = response.headers().get(header::RETRY_AFTER)?;
        Some(value.to_str().expect("ascii").to_string())
    }

    #[test]
    fn every_503_carries_retry_after_and_nothing_else_does() {
        assert_eq!(
            retry_after(ApiError::unavailable("asleep", 5)),
            Some("5".into())
        );
        assert_eq!(retry_after(ApiError::engine_stopped()), Some("5".into()));
        let bare = ApiError::status(StatusCode::SERVICE_UNAVAILABLE, "no time named");
        assert_eq!(retry_after(bare), Some(RETRY_AFTER_DEFAULT_S.to_string()));
        assert_eq!(retry_after(ApiError::bad("n", "too many")), None);
        assert_eq!(retry_after(internal("broken")), None);
    }
}
