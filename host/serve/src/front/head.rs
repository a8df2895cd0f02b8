//! The request head's size, held to `--max-header-bytes` however the head arrives.
//!
//! The HTTP server's read buffer is capped at the same size, but that cap is checked per read: a
//! head sent in one write was parsed whole from a single larger read, and heads of up to 48 KB
//! passed a 32 KiB cap. So once a head is parsed, its size is counted from what it says — the
//! request line and every header, as `Name: value` lines, and the blank line that ends the head —
//! and a head over the cap gets 431 before any route sees it. That is the head's exact size as
//! every HTTP client library writes it; whitespace a client adds around a header's value is not
//! counted (the server trims it), and the read buffer's cap bounds it.

use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::front::error::ApiError;
use crate::front::limits::closing_connection;

/// The bytes of `request`'s head: `METHOD SP target SP version CRLF`, `name: value CRLF` per
/// header, and the closing `CRLF`.
pub fn head_bytes(request: &Request) -> usize {
    let line =
        request.method().as_str().len() + 1 + target_bytes(request.uri()) + 1 + version_bytes(request.version()) + 2;
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.as_bytes().len() + 2)
        .sum();
    line + headers + 2
}

/// The request target as it was sent: origin form (`/path?query`), absolute form
/// (`http://host/path`) or authority form (`host:port`).
fn target_bytes(uri: &Uri) -> usize {
    let scheme = uri.scheme_str().map_or(0, |s| s.len() + "://".len());
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    let path = uri.path_and_query().map_or(0, |p| p.as_str().len());
    scheme + authority + path
}

fn version_bytes(version: Version) -> usize {
    match version {
        Version::HTTP_09 => "HTTP/0.9".len(),
        _ => "HTTP/1.1".len(),
    }
}

/// The layer on every route: a head over `max` bytes is a 431 naming `--max-header-bytes`, and the
/// connection is closed after it.
pub async fn cap_head(State(max): State<usize>, request: Request, next: Next) -> Response {
    let bytes = head_bytes(&request);
    if bytes <= max {
        return next.run(request).await;
    }
    let refused = ApiError {
        status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ..ApiError::bad_request(format!(
            "the request head is {bytes} bytes, over the proxy's --max-header-bytes ({max}); send fewer or shorter headers"
        ))
    };
    closing_connection(refused.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_counted_as_it_is_written() {
        let request = Request::builder()
            .method("POST")
            .uri("/v1/chat/completions?x=1")
            .header("host", "127.0.0.1:8080")
            .header("x-pad", "abc")
            .body(axum::body::Body::empty())
            .unwrap();
        let written = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nx-pad: abc\r\n\r\n";
        assert_eq!(head_bytes(&request), written.len());
        let absolute = Request::builder()
            .uri("http://example.com/v1/models")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(
            head_bytes(&absolute),
            "GET http://example.com/v1/models HTTP/1.1\r\n\r\n".len()
        );
    }
}
