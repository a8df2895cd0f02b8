//! A streamed call held by working-set admission keeps its client's connection alive.
//!
//! A held call otherwise sends no byte until its session is let go, and a client's read timeout
//! (the OpenAI Python SDK's is 600 s between bytes) can end it first. So a streamed call
//! (`"stream": true`) still held after `--session-hold-keepalive-ms` is answered at once —
//! 200, `text/event-stream` — with an SSE comment line (`: …`, which every SSE client skips) at
//! each interval while it waits, then the upstream's stream as it comes. The status is sent by
//! then, so an answer that is not a stream (the upstream's error, or the proxy's) goes as one
//! error event, `data: {"error": …}`, as OpenAI's API streams its own errors mid-stream and its
//! SDKs raise them. A call let go within the interval is answered as any other, status and all.
//!
//! A client that leaves while held drops the wait, as a client that leaves a plain call does:
//! the held call is withdrawn and the call ends.

use std::future::Future;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// What a held stream sends at each interval.
const KEEPALIVE: &[u8] = b": agentrt: held, waiting for room in the engine's KV cache\n\n";
/// The most of a non-stream answer that is turned into an error event.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// `onward` (the call's wait, its trip upstream and the answer), answered as it is when it is
/// done within `every`, else as a stream kept alive every `every` until it is (`counted` then).
pub(super) async fn kept_alive(
    onward: impl Future<Output = Response> + Send + 'static,
    every: Duration,
    counted: impl FnOnce(),
) -> Response {
    let mut onward = Box::pin(onward);
    if let Ok(response) = tokio::time::timeout(every, &mut onward).await {
        return response;
    }
    counted();
    let (tx, mut rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        let response = loop {
            tokio::select! {
                response = &mut onward => break response,
                _ = tick.tick() => {
                    if tx.send(Ok(Bytes::from_static(KEEPALIVE))).await.is_err() {
                        // The client left: dropping `onward` withdraws the held call.
                        return;
                    }
                }
            }
        };
        if is_stream(&response) {
            let mut body = response.into_body().into_data_stream();
            while let Some(chunk) = body.next().await {
                if tx.send(chunk.map_err(std::io::Error::other)).await.is_err() {
                    return;
                }
            }
        } else {
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), MAX_ERROR_BYTES)
                .await
                .unwrap_or_default();
            let _ = tx.send(Ok(error_event(status, &bytes))).await;
        }
    });
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn is_stream(response: &Response) -> bool {
    response.status().is_success()
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"))
}

/// An answer that is not a stream, as the one event of a stream whose status was 200: its
/// `error` object where it has one (OpenAI's shape), else its text with the status.
fn error_event(status: StatusCode, body: &[u8]) -> Bytes {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let error = match parsed {
        Some(Value::Object(mut object)) if object.contains_key("error") => object.remove("error").unwrap_or_default(),
        _ => json!({
            "message": format!(
                "the upstream answered {status} after the call was held: {}",
                String::from_utf8_lossy(body)
            ),
            "type": "upstream_error",
            "code": status.as_u16(),
        }),
    };
    Bytes::from(format!("data: {}\n\n", json!({ "error": error })))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;

    use super::*;

    const EVERY: Duration = Duration::from_millis(20);

    /// Sets its flag when dropped: the held call's wait, withdrawn when it goes.
    struct Withdrawn(Arc<AtomicBool>);

    impl Drop for Withdrawn {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }

    fn answer(status: StatusCode, content_type: &'static str, body: &'static str) -> Response {
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    }

    #[tokio::test]
    async fn a_call_let_go_within_the_interval_is_answered_as_it_is() {
        let counted = Arc::new(AtomicBool::new(false));
        let flag = counted.clone();
        let onward = async { answer(StatusCode::TOO_MANY_REQUESTS, "application/json", "{}") };
        let response = kept_alive(onward, EVERY, move || flag.store(true, SeqCst)).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!counted.load(SeqCst), "not counted as kept alive");
    }

    #[tokio::test]
    async fn a_held_stream_hears_comments_then_the_answer_and_an_error_comes_as_an_event() {
        let onward = async {
            tokio::time::sleep(EVERY * 3).await;
            answer(
                StatusCode::BAD_GATEWAY,
                "application/json",
                r#"{"error":{"message":"upstream down"}}"#,
            )
        };
        let response = kept_alive(onward, EVERY, || {}).await;
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        let (comments, event) = text.rsplit_once("\n\n").unwrap().0.rsplit_once("\n\n").unwrap();
        assert!(comments.lines().all(|l| l.is_empty() || l.starts_with(": ")), "{text}");
        assert_eq!(event, r#"data: {"error":{"message":"upstream down"}}"#);
    }

    #[tokio::test]
    async fn a_client_that_leaves_a_held_stream_withdraws_its_wait() {
        let withdrawn = Arc::new(AtomicBool::new(false));
        let guard = Withdrawn(withdrawn.clone());
        let onward = async move {
            let _held = guard;
            std::future::pending::<()>().await;
            unreachable!()
        };
        let response = kept_alive(onward, EVERY, || {}).await;
        let mut body = response.into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert_eq!(first, Bytes::from_static(KEEPALIVE));
        assert!(!withdrawn.load(SeqCst), "still waiting while the client reads");
        drop(body);
        for _ in 0..50 {
            if withdrawn.load(SeqCst) {
                return;
            }
            tokio::time::sleep(EVERY).await;
        }
        panic!("the wait outlived its client");
    }

    #[test]
    fn an_answer_that_is_not_a_stream_becomes_one_error_event() {
        let event = |status, body: &[u8]| -> Value {
            let bytes = error_event(status, body);
            assert!(bytes.starts_with(b"data: ") && bytes.ends_with(b"\n\n"), "{bytes:?}");
            serde_json::from_slice(&bytes[6..]).unwrap()
        };
        let openai = br#"{"error":{"message":"model not found","type":"invalid_request_error","code":404}}"#;
        let parsed: Value = serde_json::from_slice(openai).unwrap();
        assert_eq!(
            event(StatusCode::NOT_FOUND, openai),
            parsed,
            "OpenAI's error object as it is"
        );
        let text = event(StatusCode::BAD_GATEWAY, b"connection reset");
        assert_eq!(text["error"]["code"], 502);
        assert!(text["error"]["message"].as_str().unwrap().contains("connection reset"));
    }
}
