//! Errors the proxy itself produces, in the shape of the API the client speaks — OpenAI's
//! (`{"error": {"message", "type", "param", "code"}}`) or, on the Messages route, Anthropic's
//! (`{"type": "error", "error": {"type", "message"}}`) — so clients' SDKs report them well.
//! Errors from the upstream are passed through untouched instead.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error response: status, OpenAI error `type`, and a message that says what and where.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status the response carries.
    pub status: StatusCode,
    /// OpenAI's error `type` (e.g. `invalid_request_error`); the Anthropic shape maps it onto
    /// that API's own types.
    pub kind: &'static str,
    /// What went wrong and where, for a person; never a secret.
    pub message: String,
    /// The request field the error is about (OpenAI's `param`), when there is one.
    pub param: Option<&'static str>,
    /// Which API's error shape the body takes.
    pub shape: ErrorShape,
}

/// The error bodies clients' SDKs understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorShape {
    /// OpenAI's `{"error": {"message", "type", "param", "code"}}`, on every route but Messages.
    #[default]
    OpenAi,
    /// The Anthropic Messages API's.
    Anthropic,
}

impl ApiError {
    /// 400: the request itself is wrong (a field, its JSON); the message says which.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 502: the upstream failed (unreachable, an unreadable or oversized reply), not the client.
    pub fn upstream(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY,
            kind: "upstream_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 500: the server's own fault (its configuration, a task that died), not the client's.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 429: the tenant is over one of its quotas; the message names which and its flag.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 503: the proxy cannot serve this now (e.g. no policy instance is free).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "service_unavailable",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }

    /// The upstream did not answer in time; the message names which timeout and its flag.
    pub fn upstream_timeout(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::GATEWAY_TIMEOUT,
            kind: "upstream_timeout_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 408: the client did not send its request's body in time; the message names the flag.
    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            kind: "request_timeout_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// A request body over the proxy's limit.
    pub fn payload_too_large(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 401: the bearer token (API key, admin or metrics token) is missing, unknown or revoked.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            kind: "authentication_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 404: what the request names (a stored response, a policy slot, a tenant) does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "not_found_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 409: the request cannot be carried out in the server's present state (e.g. a reload with
    /// no config file to reload).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            kind: "conflict_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }
    /// 403: the caller may not do this: the admin API is disabled, an admin token acts on another
    /// tenant, or one of the tenant's policies denied the session.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            kind: "permission_error",
            message: message.into(),
            param: None,
            shape: ErrorShape::OpenAi,
        }
    }

    /// The same error about request field `param`.
    pub fn about(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    /// The same error in `shape`.
    pub fn shaped(mut self, shape: ErrorShape) -> Self {
        self.shape = shape;
        self
    }

    /// The JSON body in this error's [`ErrorShape`]; `code` (OpenAI shape) is the HTTP status.
    pub fn body(&self) -> serde_json::Value {
        match self.shape {
            ErrorShape::OpenAi => json!({ "error": {
                "message": self.message, "type": self.kind, "param": self.param, "code": self.status.as_u16()
            } }),
            ErrorShape::Anthropic => json!({ "type": "error", "error": {
                "type": self.anthropic_kind(), "message": self.message
            } }),
        }
    }

    /// Anthropic's name for this kind of error (its API lists `invalid_request_error`,
    /// `authentication_error`, `permission_error`, `not_found_error`, `request_too_large`,
    /// `rate_limit_error`, `api_error`, `overloaded_error`).
    fn anthropic_kind(&self) -> &'static str {
        match self.status {
            StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
            StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
            s if s.is_server_error() => "api_error",
            _ => match self.kind {
                "invalid_request_error"
                | "authentication_error"
                | "permission_error"
                | "not_found_error"
                | "rate_limit_error" => self.kind,
                _ => "invalid_request_error",
            },
        }
    }
}

/// Seconds a client is asked to wait before retrying a 429 or a 503 (`Retry-After`): a place in
/// a tenant's quota or upstream frees as soon as one request ends, so a short wait is right.
pub const RETRY_AFTER_S: u32 = 1;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = matches!(
            self.status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if retry {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, RETRY_AFTER_S.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_gets_its_own_error_shape() {
        let e = ApiError::bad_request("`max_tokens` must be …").about("max_tokens");
        let openai = e.body();
        assert_eq!(openai["error"]["param"], "max_tokens");
        assert_eq!(openai["error"]["type"], "invalid_request_error");
        let anthropic = ApiError::too_many_requests("slow down")
            .shaped(ErrorShape::Anthropic)
            .body();
        assert_eq!(anthropic["type"], "error");
        assert_eq!(anthropic["error"]["type"], "rate_limit_error");
        assert_eq!(anthropic["error"]["message"], "slow down");
        let gateway = ApiError::upstream_timeout("late").shaped(ErrorShape::Anthropic).body();
        assert_eq!(gateway["error"]["type"], "api_error");
    }

    #[test]
    fn a_429_or_503_says_when_to_retry_and_nothing_else_does() {
        let retry_after = |e: ApiError| {
            e.into_response()
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(retry_after(ApiError::too_many_requests("busy")).as_deref(), Some("1"));
        assert_eq!(retry_after(ApiError::unavailable("full")).as_deref(), Some("1"));
        assert_eq!(retry_after(ApiError::bad_request("no")), None);
        assert_eq!(retry_after(ApiError::upstream("down")), None);
    }
}
