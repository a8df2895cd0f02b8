//! The container image, built and run: `deploy/build-image.sh` builds the release binary and the
//! components and puts them in an image FROM scratch (`deploy/Dockerfile.prebuilt`, no registry
//! needed); podman runs `agentrt serve` in it against a STUB UPSTREAM on the host — a stand-in
//! for vLLM that answers every chat request with one fixed reply, because what is under test is
//! the image (its binary, libraries, loader, components, user and folders), not the engine. Through
//! the container's port the test sends a chat request, swaps the default tenant's policy to `ttl`
//! over the admin API (its token given as the image's environment), sends another request, and
//! reads `/metrics`.
//!
//! Needs podman and runc (`bash deploy/setup-podman.sh`; CI installs them). Without podman the
//! test says why and passes, unless `AGENTRT_REQUIRE_PODMAN=1` (set by `.ci/run`), where a missing
//! podman is an error. The first run builds the release binary (minutes); the figures it prints
//! (image size, build and start times) are those in docs/deploy.md.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TAG: &str = "localhost/agentrt:deploy-test";
const ADMIN_TOKEN: &str = "deploy-test-admin-token";
/// The stub's one answer; a reply carrying it came from the stub through the container.
const STUB_REPLY: &str = "stub upstream says hello";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(1)
        .expect("cli lies one folder below the repository root")
        .to_path_buf()
}

/// The target folder as deploy/build-image.sh resolves it.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => repo().join(dir),
        None => repo().join("target"),
    }
}

fn podman_installed() -> bool {
    Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn output(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the stub upstream was sent: each request's line and body.
type Received = Arc<Mutex<Vec<(String, String)>>>;

/// STUB UPSTREAM on 127.0.0.1 (any free port): answers `POST /v1/chat/completions` with
/// [`STUB_REPLY`] in an OpenAI chat completion, everything else (`/tokenize`, …) with 404 as an
/// engine without that route would. Keeps connections open: the proxy pools them.
fn start_stub_upstream() -> (u16, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Received::default();
    let log = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || serve_stub_connection(stream, &log));
        }
    });
    (port, received)
}

fn serve_stub_connection(stream: TcpStream, log: &Received) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request_line = request_line.trim().to_string();
        let (status, reply) = if request_line.starts_with("POST /v1/chat/completions ") {
            let reply = serde_json::json!({
                "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": STUB_REPLY}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
            });
            ("200 OK", reply.to_string())
        } else {
            (
                "404 Not Found",
                r#"{"error": "the stub upstream has no such route"}"#.to_string(),
            )
        };
        log.lock()
            .unwrap()
            .push((request_line, String::from_utf8_lossy(&body).into_owned()));
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            reply.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// `agentrt serve` in the image, run by podman in the foreground; the container is removed when
/// this is dropped.
struct Container {
    name: String,
    child: Child,
    /// What the container printed on stderr so far, for failure messages.
    log: Arc<Mutex<String>>,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "2", &self.name])
            .output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Container {
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// Start the image's `agentrt serve` on the host's network (`--network host`: the stub upstream
/// and the test reach it on 127.0.0.1) and wait for it to listen.
fn run_image(listen_port: u16, upstream_port: u16) -> Container {
    let name = format!("agentrt-deploy-test-{}", std::process::id());
    let _ = Command::new("podman").args(["rm", "--force", &name]).output();
    let mut child = Command::new("podman")
        .args([
            "run",
            "--rm",
            "--name",
            &name,
            // runc, installed with podman from Debian; the limits are set because podman's
            // defaults (a million open files) exceed what an unprivileged CI container may grant.
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=4096:4096",
            "--ulimit",
            "nproc=4096:4096",
            "--network",
            "host",
            "--env",
            &format!("AGENTRT_ADMIN_TOKEN={ADMIN_TOKEN}"),
            "--env",
            "AGENTRT_LOG=info",
            TAG,
            "serve",
            "--upstream",
            &format!("http://127.0.0.1:{upstream_port}"),
            "--listen",
            &format!("127.0.0.1:{listen_port}"),
            "--policy",
            "cachesage",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting podman run");
    let log = Arc::new(Mutex::new(String::new()));
    let (listening_tx, listening_rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    // Keep draining its output so the container never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening on http://") {
                let _ = listening_tx.send(());
            }
            sink.lock().unwrap().push_str(&line);
            sink.lock().unwrap().push('\n');
        }
    });
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || for _ in BufReader::new(stdout).lines() {});
    let container = Container { name, child, log };
    if listening_rx.recv_timeout(Duration::from_secs(120)).is_err() {
        panic!(
            "agentrt serve in the image did not start listening within 120 s; its output:\n{}",
            container.log()
        );
    }
    container
}

/// One HTTP/1.1 request to the container; the status and the body.
fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {reply:?}"));
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn chat(port: u16, content: &str) -> (u16, String) {
    let body = serde_json::json!({
        "model": "stub",
        "max_tokens": 8,
        "messages": [
            {"role": "system", "content": "You are the deploy test's agent."},
            {"role": "user", "content": content}
        ]
    });
    request(
        port,
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// The value of the first sample of `series` whose labels contain every one of `labels`.
fn sample(metrics: &str, series: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(series) && l[series.len()..].starts_with(['{', ' ']))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn the_image_serves_a_chat_request_swaps_the_policy_and_shows_metrics() {
    if !podman_installed() {
        assert!(
            std::env::var("AGENTRT_REQUIRE_PODMAN").as_deref() != Ok("1"),
            "AGENTRT_REQUIRE_PODMAN=1 but podman is not installed (bash deploy/setup-podman.sh)"
        );
        eprintln!(
            "SKIPPED: podman is not installed, so the image cannot be built or run (bash deploy/setup-podman.sh)"
        );
        return;
    }

    let started = Instant::now();
    let built = output(
        Command::new("bash")
            .arg(repo().join("deploy/build-image.sh"))
            .args(["--tag", TAG])
            .current_dir(repo()),
    );
    let build_time = started.elapsed();
    let size: u64 = output(Command::new("podman").args(["image", "inspect", "--format", "{{.Size}}", TAG]))
        .trim()
        .parse()
        .expect("podman reports the image's size in bytes");
    // The binary, its libraries and seven components: tens of MiB. A base image slipped in
    // (a distribution's userland) would show here.
    assert!(
        size < 200 << 20,
        "the image is {} MiB; it should hold only agentrt, its libraries and the components",
        size >> 20
    );

    let (upstream_port, received) = start_stub_upstream();
    let port = free_port();
    let run_started = Instant::now();
    let container = run_image(port, upstream_port);
    let start_time = run_started.elapsed();

    // A chat request through the container reaches the stub and its answer comes back.
    let (status, body) = chat(port, "first request through the image");
    assert_eq!(status, 200, "{body}\n{}", container.log());
    assert!(body.contains(STUB_REPLY), "{body}");
    let forwarded = received.lock().unwrap().clone();
    assert!(
        forwarded
            .iter()
            .any(|(line, body)| line.starts_with("POST /v1/chat/completions")
                && body.contains("first request through the image")),
        "the stub upstream was not sent the request: {forwarded:?}"
    );

    // The admin API takes the token from the environment podman gave the image, and nothing else.
    let ttl = std::fs::read(target_dir().join("image-context/rootfs/usr/local/share/agentrt/components/ttl.wasm"))
        .expect("build-image.sh staged ttl.wasm");
    let swap_path = "/admin/tenants/default/policy?fresh=true";
    let (status, _) = request(port, "PUT", swap_path, &[("authorization", "Bearer wrong-token")], &ttl);
    assert_eq!(status, 401, "a wrong admin token is refused");
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let (status, body) = request(port, "PUT", swap_path, &[("authorization", &bearer)], &ttl);
    assert_eq!(status, 200, "the swap to ttl: {body}\n{}", container.log());
    let (status, stats) = request(
        port,
        "GET",
        "/admin/tenants/default/stats",
        &[("authorization", &bearer)],
        b"",
    );
    assert_eq!(status, 200, "{stats}");
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats are JSON");
    assert_eq!(stats["policy"]["name"], "ttl", "the tenant now runs ttl: {stats}");

    let (status, body) = chat(port, "second request, under ttl");
    assert_eq!(status, 200, "{body}\n{}", container.log());

    let (status, metrics) = request(port, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200, "{metrics}");
    let requests = sample(&metrics, "agentrt_proxy_requests_total", &[]).expect("agentrt_proxy_requests_total");
    assert!(requests >= 2.0, "two chat requests counted, not {requests}:\n{metrics}");
    assert_eq!(
        sample(&metrics, "agentrt_policy_swaps_total", &["tenant=\"default\""]),
        Some(1.0),
        "one swap of the default tenant's policy:\n{metrics}"
    );

    eprintln!(
        "deploy image: {} MiB; build-image.sh {:.1} s ({}); podman run to listening {:.1} s; smoke test {:.1} s in all",
        size >> 20,
        build_time.as_secs_f64(),
        built.lines().last().unwrap_or_default(),
        start_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
