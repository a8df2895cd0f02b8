//! The slow-stream attack's parts: a FIREHOSE UPSTREAM and slow readers.
//!
//! The firehose is a stand-in for vLLM that streams a long SSE reply as fast as the proxy takes
//! it (a real engine cannot be made to stream megabytes on demand). It is written on a bare TCP
//! socket, not axum, so it buffers nothing of its own per stream (each write waits for the
//! kernel): what the process holds while readers stall is the proxy's, not the stub's. It
//! answers `/v1/chat/completions` only: `stream: true` gets [`STREAM_BYTES`] of events, anything
//! else a small completion.
//!
//! A slow reader sends a streamed chat request on its own connection, reads the response head
//! and then reads nothing, with a small receive buffer: the reply backs up into the proxy.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Bytes of events in one streamed reply: far more than any buffer on the way can hold.
pub const STREAM_BYTES: usize = 8 << 20;

/// One event as an engine sends a token (a little padded), repeated.
const EVENT: &[u8] = b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"firehose firehose firehose\"}}]}\n\n";

/// The firehose's kernel send buffer per connection. An engine's grows to `net.ipv4.tcp_wmem`'s
/// maximum (4 MiB) while the proxy holds its stream up, and 600 such streams on one machine pass
/// `tcp_mem`'s pressure threshold, where the proxy sheds new requests (front::tcp_memory) and the
/// machine's other sockets suffer: the stand-in keeps its buffers small, so that what the tests
/// measure is the proxy.
const FIREHOSE_SEND_BUFFER: u32 = 256 << 10;

/// Start the firehose on loopback; returns its base URL.
pub async fn firehose() -> String {
    let socket = TcpSocket::new_v4().unwrap();
    // Accepted connections take the listening socket's send buffer.
    socket.set_send_buffer_size(FIREHOSE_SEND_BUFFER).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1024).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream));
        }
    });
    url
}

/// Answer requests on one connection until the proxy closes it (or goes away mid-stream).
async fn serve_connection(mut stream: TcpStream) {
    let mut pending = Vec::new();
    while let Some(body) = read_request(&mut stream, &mut pending).await {
        let streamed = serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|b| b["stream"] == true);
        let written = if streamed {
            write_stream(&mut stream).await
        } else {
            let reply = br#"{"id":"c1","object":"chat.completion","model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                reply.len()
            );
            stream.write_all(&[head.as_bytes(), reply].concat()).await
        };
        if written.is_err() {
            return;
        }
    }
}

/// One request's body (its head read and dropped); `None` when the connection ends.
async fn read_request(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).await.ok().filter(|&n| n > 0)?;
        pending.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while pending.len() < head_end + length {
        let n = stream.read(&mut buf).await.ok().filter(|&n| n > 0)?;
        pending.extend_from_slice(&buf[..n]);
    }
    let body = pending[head_end..head_end + length].to_vec();
    pending.drain(..head_end + length);
    Some(body)
}

/// A chunked SSE reply of [`STREAM_BYTES`], written in 16 KiB chunks as fast as the socket
/// takes them.
async fn write_stream(stream: &mut TcpStream) -> std::io::Result<()> {
    stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        .await?;
    // One chunk for every stream: the firehose holds nothing per stream but its socket.
    static CHUNK: std::sync::OnceLock<(Vec<u8>, usize)> = std::sync::OnceLock::new();
    let (chunk, events) = CHUNK.get_or_init(|| {
        let events: Vec<u8> = EVENT.repeat((16 << 10) / EVENT.len());
        let chunk = [format!("{:x}\r\n", events.len()).as_bytes(), &events, b"\r\n"].concat();
        (chunk, events.len())
    });
    for _ in 0..STREAM_BYTES / events {
        stream.write_all(chunk).await?;
    }
    let done = b"data: [DONE]\n\n";
    let tail = [format!("{:x}\r\n", done.len()).as_bytes(), done, b"\r\n0\r\n\r\n"].concat();
    stream.write_all(&tail).await
}

/// A client that asked for a stream and reads no more of it than its head.
pub struct SlowReader {
    pub status: u16,
    /// What a refusal (any status but 200) said: its head and as much of its body as came
    /// within a second, so that a failing assertion says why the stream was refused.
    pub refusal: String,
    stream: TcpStream,
}

impl SlowReader {
    /// Send a streamed chat request for `model` to the proxy at `addr` (host:port) under `key`,
    /// and read the response head (within 10 s). Its receive buffer is 4 KiB, as a stalled
    /// client's would be.
    pub async fn open_model(addr: &str, key: &str, model: &str) -> SlowReader {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
        let body =
            format!(r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"flood me"}}]}}"#);
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        // Byte by byte, so nothing past the head is taken off the socket.
        tokio::time::timeout(Duration::from_secs(10), async {
            while !head.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).await.unwrap() == 0 {
                    break;
                }
                head.push(byte[0]);
            }
        })
        .await
        .expect("the response head within 10 s");
        let status = String::from_utf8_lossy(&head)
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut refusal = String::new();
        if status != 200 {
            // A refusal is small and complete: read it, so it can be shown.
            let mut body = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut body))
                .await
                .map_or(0, |r| r.unwrap_or(0));
            refusal = format!(
                "{}{}",
                String::from_utf8_lossy(&head),
                String::from_utf8_lossy(&body[..n])
            );
        }
        SlowReader {
            status,
            refusal,
            stream,
        }
    }

    /// As [`Self::open_model`], sent again after each 503 (at most `tries` in all), a second
    /// apart, as a client that honours `Retry-After` does: a proxy sharing its cores with the
    /// test's own clients may shed a moment of overload, and shedding is not what these tests
    /// measure.
    pub async fn open_retrying(addr: &str, key: &str, model: &str, tries: u32) -> SlowReader {
        let mut reader = Self::open_model(addr, key, model).await;
        for _ in 1..tries {
            if reader.status != 503 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            reader = Self::open_model(addr, key, model).await;
        }
        reader
    }

    /// Read `bytes` of the stream, then stop again.
    pub async fn read(&mut self, bytes: usize) -> usize {
        let mut buf = vec![0u8; bytes];
        let mut got = 0;
        while got < bytes {
            match self.stream.read(&mut buf[got..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        got
    }
}

/// The process's resident memory now, in bytes (Linux: /proc/self/status).
pub fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
