//! A body that never ends: a client that sends a request's head and part of its body, then
//! stops and keeps its connection open — the attack on a proxy that reads bodies with no
//! deadline. Written on a bare socket so the test decides exactly what is sent and when.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the body is framed.
#[derive(Debug, Clone, Copy)]
pub enum Framing {
    /// `Content-Length: n`: the body announces `n` bytes (and the client sends fewer).
    Length(usize),
    /// `Transfer-Encoding: chunked`: no end announced.
    Chunked,
}

/// A request whose body stalled: sent, then silent.
pub struct StalledBody {
    stream: TcpStream,
    /// When the last byte was sent.
    pub sent_at: Instant,
    /// An answer that came while the body was still being sent (a refusal at once).
    early: Option<Vec<u8>>,
}

impl StalledBody {
    /// `method path` to the proxy at `addr` (host:port) with `headers`, then `sent` bytes of a
    /// body framed as `framing`, and nothing more. An answer that comes while the body is being
    /// sent (the proxy refused it at once, and will close the connection) is kept, not lost to
    /// the connection's reset.
    pub async fn open(
        addr: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        framing: Framing,
        sent: usize,
    ) -> std::io::Result<StalledBody> {
        let mut stream = TcpStream::connect(addr).await?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: proxy\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        match framing {
            Framing::Length(n) => head.push_str(&format!("content-length: {n}\r\n\r\n")),
            Framing::Chunked => head.push_str("transfer-encoding: chunked\r\n\r\n"),
        }
        stream.write_all(head.as_bytes()).await?;
        let body = match framing {
            Framing::Length(_) => vec![b' '; sent],
            // One chunk of it; the closing zero-length chunk never comes.
            Framing::Chunked if sent > 0 => [format!("{sent:x}\r\n").as_bytes(), &vec![b' '; sent], b"\r\n"].concat(),
            Framing::Chunked => Vec::new(),
        };
        let (mut reader, mut writer) = stream.split();
        let mut early = Vec::new();
        let mut buf = [0u8; 1024];
        let answered = tokio::select! {
            written = writer.write_all(&body) => {
                written.is_err()
            }
            read = reader.read(&mut buf) => {
                if let Ok(n) = read {
                    early.extend_from_slice(&buf[..n]);
                }
                true
            }
        };
        let mut stalled = StalledBody {
            stream,
            sent_at: Instant::now(),
            early: None,
        };
        if answered {
            // The rest of the answer's head, if it was cut between two reads.
            if !early.is_empty() || stalled.read_head(&mut early, Duration::from_secs(1)).await {
                stalled.early = Some(early);
            }
        }
        Ok(stalled)
    }

    /// Read into `head` until it holds a response head or the connection ends; whether anything
    /// came within `wait`.
    async fn read_head(&mut self, head: &mut Vec<u8>, wait: Duration) -> bool {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(wait, async {
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .is_ok()
    }

    /// The status the proxy answers with, within `wait` (0: the connection closed without an
    /// answer), and how long after the last byte was sent; `None`: no answer yet.
    pub async fn answer(&mut self, wait: Duration) -> Option<(u16, Duration)> {
        let head = match self.early.take() {
            Some(head) => head,
            None => {
                let mut head = Vec::new();
                if !self.read_head(&mut head, wait).await {
                    return None;
                }
                head
            }
        };
        let status = String::from_utf8_lossy(&head)
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Some((status, self.sent_at.elapsed()))
    }
}
