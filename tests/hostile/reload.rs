//! Reloading the tenants' config file (`--config`, `POST /admin/reload`, SIGHUP) as an attacker
//! or a careless operator would: an emptied or half-written file, a file that is not a file,
//! malformed files carrying secrets, and a key revoked while its requests are still in flight.
//! Real HTTP on loopback against the real router, in front of the stub upstream.

mod config_support;
mod log_capture;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use config_support::{proxy_with_config, write_config, OPERATOR, TWO_TENANTS};
use futures_util::StreamExt;
use serde_json::Value;
use support::{admin_get, chat, metrics_text, post, post_json, Proxy};

fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    write_config("tenants.toml", text)
}

async fn reload(p: &Proxy) -> (u16, Value) {
    let response = post(
        &format!("{}/admin/reload", p.url),
        "",
        &[("authorization", &format!("Bearer {OPERATOR}"))],
    )
    .await;
    (response.status().as_u16(), response.json().await.unwrap())
}

/// One chat request with `key` (none: no `Authorization`): its status.
async fn call(p: &Proxy, key: Option<&str>) -> u16 {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    post_json(p, &chat("You plan.", "Task", "tiny", false), &headers)
        .await
        .status()
        .as_u16()
}

fn message(answer: &Value) -> String {
    answer["error"]["message"].as_str().unwrap_or_default().to_string()
}

/// Write `text` over `file` and wait until it has settled.
fn rewrite(file: &Path, text: &str) {
    std::fs::write(file, text).unwrap();
    std::thread::sleep(agentrt_serve::tenant::config_file::SETTLE);
}

// --- 1. a reload can turn authentication off -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_or_keyless_config_is_refused_and_every_request_still_needs_a_key() {
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    for keyless in [
        "",
        "[defaults]\nmax_in_flight = 8\n",
        "[tenants.alpha]\nmax_in_flight = 3\n",
    ] {
        rewrite(&file, keyless);
        let (status, answer) = reload(&p).await;
        assert_eq!(status, 400, "{keyless:?}: {answer}");
        assert!(
            message(&answer).contains("unauthenticated = true"),
            "the error says how to mean it: {answer}"
        );
        assert_eq!(
            call(&p, None).await,
            401,
            "{keyless:?}: a key-less request is still refused"
        );
        assert_eq!(call(&p, Some("key-a")).await, 200, "the previous settings stay");
    }
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_reloads_total{result=\"refused\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("agentrt_proxy_unauthenticated 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_serving_is_taken_only_when_the_file_says_so() {
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    rewrite(&file, "unauthenticated = true\n");
    let (status, answer) = reload(&p).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(call(&p, None).await, 200, "the operator said so");
    assert!(metrics_text(&p).await.contains("agentrt_proxy_unauthenticated 1"));
    // Saying both is a contradiction, not a choice.
    rewrite(&file, &format!("unauthenticated = true\n{TWO_TENANTS}"));
    let (status, answer) = reload(&p).await;
    assert_eq!(status, 400);
    assert!(message(&answer).contains("not both"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_in_place_is_never_applied_half_written() {
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    // An operator's editor rewriting the file in place: truncate, write alpha, pause, write beta.
    let writing = file.clone();
    let writer = std::thread::spawn(move || {
        for _ in 0..6 {
            let mut f = std::fs::File::create(&writing).unwrap();
            f.write_all(b"[tenants.alpha]\napi_keys = [\"key-a\"]\n\n").unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(60));
            f.write_all(b"[tenants.beta]\napi_keys = [\"key-b\"]\n").unwrap();
            drop(f);
            std::thread::sleep(Duration::from_millis(350));
        }
    });
    let (mut applied, mut refused) = (0, 0);
    while !writer.is_finished() {
        let (reloaded, keyless, beta) = tokio::join!(reload(&p), call(&p, None), call(&p, Some("key-b")));
        match reloaded {
            (200, answer) => {
                applied += 1;
                assert_eq!(
                    answer["tenants"],
                    serde_json::json!(["alpha", "beta"]),
                    "a whole file: {answer}"
                );
            }
            (400, _) => refused += 1,
            other => panic!("{other:?}"),
        }
        assert_eq!(keyless, 401, "authentication was never off");
        assert_eq!(beta, 200, "beta's key was never revoked by half a file");
    }
    writer.join().unwrap();
    assert!(applied > 0, "settled files were applied ({refused} refused)");
}

// --- 4. secrets in errors and logs -----------------------------------------------------------

/// Malformed files, each with the secret `sk-LEAKED-42` where a parser or a check trips on it.
const MALFORMED: [&str; 9] = [
    "[tenants.alpha]\napi_keys = \"sk-LEAKED-42\"\n",
    "[tenants.alpha]\napi_keys = [\"sk-LEAKED-42\", 7]\n",
    "[tenants.alpha]\napi_keys = [\"key-a\"]\nadmin_tokens = \"sk-LEAKED-42\"\n",
    "[tenants.alpha]\napi_keys = [\"key-a\"]\nmax_in_flight = \"sk-LEAKED-42\"\n",
    "[tenants.alpha]\napi_keys = [sk-LEAKED-42]\n",
    "[tenants.alpha]\napi_keys = [\"key-a\"]\nshare = \"sk-LEAKED-42\"\n",
    "[tenants.alpha]\nsk-LEAKED-42 = [\"key-a\"]\n",
    "[tenants.alpha]\napi_keys = [\"sk-LEAKED-42\"]\n[tenants.beta]\napi_keys = [\"sk-LEAKED-42\"]\n",
    "[tenants.alpha]\napi_keys = [\"key-a\"]\nadmin_tokens = [\"s3cret\", \"sk-LEAKED-42\"]\n",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_errors_name_the_place_never_the_secret() {
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    for malformed in MALFORMED {
        rewrite(&file, malformed);
        let (status, answer) = reload(&p).await;
        let text = message(&answer);
        assert_eq!(status, 400, "{malformed:?}: {answer}");
        assert!(
            !text.contains("LEAKED"),
            "{malformed:?}: the error repeats the secret: {text}"
        );
        assert!(
            text.contains("tenants.toml") && (text.contains("line ") || text.contains("[tenants.")),
            "{malformed:?}: the error names the file and the place: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sighup_log_never_repeats_a_secret() {
    log_capture::capture(tracing::Level::INFO);
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    p.app.reload_on_sighup().unwrap();
    for malformed in MALFORMED {
        rewrite(&file, malformed);
        let refused_before = metric(
            &metrics_text(&p).await,
            "agentrt_proxy_reloads_total{result=\"refused\"}",
        );
        // SAFETY: signalling this process; the handler above catches SIGHUP.
        assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGHUP) }, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(
            &metrics_text(&p).await,
            "agentrt_proxy_reloads_total{result=\"refused\"}",
        ) == refused_before
        {
            assert!(Instant::now() < deadline, "the SIGHUP reload did not happen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let log = log_capture::text();
    assert!(log.contains("reload refused (SIGHUP)"), "{log}");
    assert!(!log.contains("LEAKED"), "the log repeats a secret:\n{log}");
}

fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0)
}

// --- 8. a config file that is not a file -----------------------------------------------------

#[test]
fn starting_with_a_config_that_is_a_device_is_refused_naming_it() {
    let flags = agentrt_serve::tenant::settings::FlagSettings::default();
    let e = agentrt_serve::tenant::reload::initial_settings(
        Some("/dev/zero".into()),
        flags,
        agentrt_serve::config_flags::check_serve_table,
    )
    .unwrap_err();
    assert!(e.contains("/dev/zero is not a regular file"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_path_swapped_for_a_device_or_a_fifo_is_refused_at_once_and_healthz_answers() {
    let (dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // A symlink to an endless device, then a FIFO nobody writes to.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
    let (status, answer) = reload(&p).await;
    assert_eq!(status, 400);
    assert!(
        message(&answer).contains("is not a regular file (it is a device)"),
        "{answer}"
    );

    std::fs::remove_file(&file).unwrap();
    let c_path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain libc call on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let reloading = {
        let (client, url) = (client.clone(), format!("{}/admin/reload", p.url));
        tokio::spawn(async move { client.post(url).bearer_auth(OPERATOR).send().await })
    };
    let health = client.get(format!("{}/healthz", p.url)).send().await.unwrap();
    assert_eq!(health.status(), 200, "the proxy answers while a reload runs");
    let reloaded = reloading.await.unwrap().expect("the reload answered within 5 s");
    assert_eq!(reloaded.status(), 400);
    let answer: Value = reloaded.json().await.unwrap();
    assert!(message(&answer).contains("(it is a FIFO)"), "{answer}");
    assert_eq!(call(&p, Some("key-a")).await, 200, "the previous settings stay");
    drop(dir);
}

// --- 13. a revoked key keeps its stream ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_ends_its_streams_and_requests_and_stops_its_tenant() {
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    assert_eq!(call(&p, Some("key-b")).await, 200);
    // Beta has a stream open (the upstream sends one chunk, then nothing) and a request waiting
    // for its answer.
    let stream = post_json(
        &p,
        &chat("You plan.", "Task", "hang-mid-stream", true),
        &[("authorization", "Bearer key-b")],
    )
    .await;
    assert_eq!(stream.status(), 200);
    let mut chunks = stream.bytes_stream();
    let first = chunks.next().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("delta"),
        "the stream is flowing"
    );
    let waiting = {
        let url = p.url.clone();
        tokio::spawn(async move {
            support::post(
                &format!("{url}/v1/chat/completions"),
                chat("You plan.", "Task", "hang-before-headers", false).to_string(),
                &[("authorization", "Bearer key-b")],
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    rewrite(&file, "[tenants.alpha]\napi_keys = [\"key-a\"]\n");
    let (status, answer) = reload(&p).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stopped"], serde_json::json!(["beta"]));

    let rest = tokio::time::timeout(Duration::from_secs(5), async {
        let mut rest = String::new();
        while let Some(chunk) = chunks.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        rest
    })
    .await
    .expect("the revoked stream ended");
    assert!(rest.contains("revoked"), "the stream says why it ended: {rest}");
    let waited = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting request ended")
        .unwrap();
    assert_eq!(waited.status(), 401);
    assert!(waited.text().await.unwrap().contains("revoked"));

    assert_eq!(call(&p, Some("key-b")).await, 401);
    let (_, listing) = admin_get(&p, "/admin/tenants", OPERATOR).await;
    let names: Vec<&str> = listing["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"beta"), "beta left the listing: {names:?}");
    let metrics = metrics_text(&p).await;
    assert!(!metrics.contains("tenant=\"beta\""), "beta left /metrics");
    assert!(
        metrics.contains("agentrt_proxy_refused_total{reason=\"revoked\"} 2"),
        "{metrics}"
    );
    assert!(
        p.app.tenants().registry().slots_of("beta").is_empty(),
        "beta's policy gave its instance back"
    );
}
