//! The server's errors, answered in the OpenAI body: `{"error": {"message", "type",
//! "param", "code"}}` with the HTTP status as `code`.
//!
//! Every refusal of a request goes through [`ApiError`], so a client always gets this
//! shape (never a plain-text body or a dropped connection).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

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
        if let Some(seconds) = self.retry_after {
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
