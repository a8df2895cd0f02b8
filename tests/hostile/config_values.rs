//! The config file's values as an attacker or a careless operator writes them: numbers that
//! parse but make no sense (NaN, zero timeouts), secrets where `[serve]` expects an address or a
//! number, and a storm of reloads while the file is renamed over. Flags and file share one parser
//! per kind of value (`agentrt_runtime::flag_values`); no error or log line repeats a value.

mod config_support;
mod log_capture;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Command};
use config_support::{proxy_with_config, write_config, OPERATOR, TWO_TENANTS};
use serde_json::Value;
use support::{chat, post, post_json, Proxy};

const SECRET: &str = "sk-LEAKED-42";
/// `agentrt serve`'s flags as the binary defines them.
fn agentrt() -> Command {
    Command::new("agentrt").subcommand(agentrt_serve::ServeArgs::augment_args(Command::new("serve")))
}

/// What `agentrt serve --config FILE` makes of `file` before it starts anything: the error of
/// the file's `[serve]` table, else of the whole command line.
fn start_with(file: &Path) -> Result<(), String> {
    let argv: Vec<OsString> = ["agentrt", "serve", "--config", file.to_str().unwrap()]
        .iter()
        .map(OsString::from)
        .collect();
    let argv = agentrt_serve::config_flags::with_file_flags(&agentrt(), "serve", argv)?;
    agentrt()
        .try_get_matches_from(argv)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The settings a proxy starts with (the same read as every reload): its error.
fn settings_error(file: &Path) -> Option<String> {
    let flags = agentrt_serve::tenant::settings::FlagSettings::default();
    agentrt_serve::tenant::reload::initial_settings(
        Some(file.to_path_buf()),
        flags,
        agentrt_serve::config_flags::check_serve_table,
    )
    .err()
}

fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    write_config("agentrt.toml", text)
}

/// Write `text` over `file` (written elsewhere, renamed over it: never waited for).
fn rename_over(file: &Path, text: &str) {
    let next = file.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, file).unwrap();
}

async fn reload(url: &str) -> (u16, Value) {
    let response = post(
        &format!("{url}/admin/reload"),
        "",
        &[("authorization", &format!("Bearer {OPERATOR}"))],
    )
    .await;
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn call(p: &Proxy, key: &str) -> u16 {
    let auth = format!("Bearer {key}");
    post_json(
        p,
        &chat("You plan.", "Task", "tiny", false),
        &[("authorization", &auth)],
    )
    .await
    .status()
    .as_u16()
}

fn capture_log() {
    log_capture::capture(tracing::Level::DEBUG);
}

// --- row 7: NaN in [serve] ------------------------------------------------------------------

#[test]
fn a_nan_or_infinite_rate_is_refused_at_start_naming_the_key() {
    for value in ["nan", "inf", "-inf", "-2.5", "0.0"] {
        let (_dir, file) = config_file(&format!(
            "[serve]\nupstream = \"http://x\"\nwarmup-rate = {value}\n{TWO_TENANTS}"
        ));
        let e = start_with(&file).expect_err(value);
        assert!(
            e.contains("[serve] warmup-rate") && e.contains("--warmup-rate"),
            "{value}: {e}"
        );
        let e = settings_error(&file).unwrap_or_else(|| panic!("{value}: the proxy's read took it"));
        assert!(e.contains("warmup-rate"), "{value}: {e}");
    }
    // On the command line too: one parser for both.
    let e = agentrt()
        .try_get_matches_from(["agentrt", "serve", "--upstream", "http://x", "--warmup-rate", "NaN"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("finite"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_floats_in_serve_reloads_unchanged_and_a_key_can_be_revoked() {
    let serve = "[serve]\nupstream = \"http://x\"\nwarmup-rate = 2.5\nslot-config = []\n";
    let (_dir, file) = config_file(&format!("{serve}{TWO_TENANTS}"));
    let p = proxy_with_config(&file).await;
    let (status, answer) = reload(&p.url).await;
    assert_eq!(status, 200, "the same file is not \"changed\": {answer}");
    rename_over(&file, &format!("{serve}[tenants.alpha]\napi_keys = [\"key-a\"]\n"));
    let (status, answer) = reload(&p.url).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(call(&p, "key-b").await, 401, "beta's key is revoked");
    assert_eq!(call(&p, "key-a").await, 200);
}

// --- row 13: zeros that meant "no limit" ------------------------------------------------------

#[test]
fn zero_timeouts_and_a_zero_element_budget_are_refused_from_the_file_and_the_command_line() {
    for key in [
        "upstream-connect-timeout-ms",
        "upstream-first-byte-timeout-ms",
        "upstream-idle-timeout-ms",
        "header-read-timeout-ms",
        "mcp-call-timeout-ms",
        "mcp-connect-timeout-ms",
        "max-json-elements",
        "max-body-bytes",
        "max-request-items",
    ] {
        let (_dir, file) = config_file(&format!("[serve]\nupstream = \"http://x\"\n{key} = 0\n{TWO_TENANTS}"));
        let e = start_with(&file).expect_err(key);
        assert!(
            e.contains(&format!("[serve] {key}: --{key}: must be at least 1")),
            "{key}: {e}"
        );
        assert!(
            settings_error(&file).is_some_and(|e| e.contains(key)),
            "{key}: the proxy's read took it"
        );
        let flag = format!("--{key}=0");
        let e = agentrt()
            .try_get_matches_from(["agentrt", "serve", "--upstream", "http://x", &flag])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be at least 1"), "{key}: {e}");
    }
    // Where 0 has a meaning, it is taken (and documented in --help).
    for zero_allowed in ["session-idle-ms", "tenant-max-in-flight", "max-request-tools"] {
        let (_dir, file) = config_file(&format!(
            "[serve]\nupstream = \"http://x\"\n{zero_allowed} = 0\n{TWO_TENANTS}"
        ));
        assert_eq!(start_with(&file), Ok(()), "{zero_allowed}");
    }
}

// --- rows 8 and 16: secrets in values ----------------------------------------------------------

/// `[serve]` lines with the secret where a flag's parser or the key check trips on it.
fn serve_lines_with_a_secret() -> Vec<String> {
    [
        "listen = \"S\"",
        "listen = \"S:8080\"",
        "share = [\"S\"]",
        "share = [\"alpha=S\"]",
        "share = [\"S/x=5\"]",
        "public-anchor = [\"S\"]",
        "engine = \"S\"",
        "upstream-router = \"S\"",
        "client-engine-field = [\"S\"]",
        "max-connections = \"S\"",
        "warmup-rate = \"S\"",
        "upstream-connect-timeout-ms = \"S\"",
        "S = \"x\"",
        "\"S\" = true",
    ]
    .iter()
    .map(|line| line.replace('S', SECRET))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_values_carrying_a_secret_are_refused_at_start_and_on_reload_without_repeating_it() {
    capture_log();
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    for line in serve_lines_with_a_secret() {
        let text = format!("[serve]\nupstream = \"http://x\"\n{line}\n{TWO_TENANTS}");
        rename_over(&file, &text);
        let e = start_with(&file).expect_err(&line);
        assert!(!e.contains(SECRET), "{line}: the start error repeats the secret: {e}");
        assert!(
            e.contains("agentrt.toml: [serve]"),
            "{line}: the error names the file and table: {e}"
        );
        let e = settings_error(&file).unwrap_or_else(|| panic!("{line}: the proxy's read took it"));
        assert!(
            !e.contains(SECRET),
            "{line}: the settings error repeats the secret: {e}"
        );
        let (status, answer) = reload(&p.url).await;
        assert_eq!(status, 400, "{line}: {answer}");
        assert!(
            !answer.to_string().contains(SECRET),
            "{line}: the reload's answer repeats the secret: {answer}"
        );
    }
    let log = log_capture::text();
    assert!(!log.contains(SECRET), "the log repeats a secret:\n{log}");
    // A typo is still named, with the flag it meant.
    rename_over(&file, &format!("[serve]\nmax-conections = 5\n{TWO_TENANTS}"));
    let e = settings_error(&file).unwrap();
    assert!(e.contains("did you mean `max-connections`?"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_public_anchors_are_refused_without_repeating_them() {
    capture_log();
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    // Too short, too long, 16 characters that are not hex, a secret that looks like a hash.
    for anchor in [
        SECRET.to_string(),
        format!("{SECRET}{SECRET}"),
        format!("{SECRET}abcd"),
        "0123456789abcdeg".into(),
    ] {
        rename_over(&file, &format!("[public]\nanchors = [\"{anchor}\"]\n{TWO_TENANTS}"));
        let (status, answer) = reload(&p.url).await;
        assert_eq!(status, 400, "{anchor}: {answer}");
        let text = answer.to_string();
        assert!(!text.contains(&anchor), "{anchor}: the answer repeats it: {text}");
        assert!(text.contains("[public] anchors[0]: not an anchor hash"), "{text}");
    }
    let log = log_capture::text();
    assert!(!log.contains(SECRET), "the log repeats a secret:\n{log}");
}

// --- row 12: a reload storm ---------------------------------------------------------------------

const WITH_GAMMA: &str = "[tenants.alpha]\napi_keys = [\"key-a\"]\n\n[tenants.beta]\napi_keys = [\"key-b\"]\n\n\
                          [tenants.gamma]\napi_keys = [\"key-g\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_reloads_while_the_file_is_renamed_over_is_answered_within_seconds() {
    let (_dir, file) = config_file(TWO_TENANTS);
    let p = proxy_with_config(&file).await;
    // The file renamed over every 20 ms for as long as the storm lasts.
    let storming = Arc::new(AtomicBool::new(true));
    let renamer = {
        let (file, storming) = (file.clone(), storming.clone());
        std::thread::spawn(move || {
            let mut renames = 0;
            while storming.load(Ordering::Relaxed) {
                rename_over(&file, if renames % 2 == 0 { WITH_GAMMA } else { TWO_TENANTS });
                renames += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            rename_over(&file, WITH_GAMMA);
            renames
        })
    };
    let started = Instant::now();
    let storm: Vec<_> = (0..150)
        .map(|_| {
            let url = p.url.clone();
            tokio::spawn(async move { reload(&url).await })
        })
        .collect();
    let answers = tokio::time::timeout(Duration::from_secs(10), futures_util::future::join_all(storm)).await;
    let took = started.elapsed();
    storming.store(false, Ordering::Relaxed);
    let renames = renamer.join().unwrap();
    let answers = answers.unwrap_or_else(|_| panic!("150 reloads were not all answered within 10 s"));
    for answer in answers {
        let (status, answer) = answer.unwrap();
        assert_eq!(status, 200, "every renamed file is whole: {answer}");
        let tenants = answer["tenants"].clone();
        assert!(
            tenants == serde_json::json!(["alpha", "beta"]) || tenants == serde_json::json!(["alpha", "beta", "gamma"]),
            "{answer}"
        );
    }
    assert!(took < Duration::from_secs(5), "150 reloads took {took:?}");
    eprintln!("150 reloads under {renames} renames answered in {took:?}");
    // The last rename is what is in force after one more reload.
    let (status, answer) = reload(&p.url).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tenants"], serde_json::json!(["alpha", "beta", "gamma"]));
    assert_eq!(call(&p, "key-g").await, 200);
    let metrics = support::metrics_text(&p).await;
    let applied: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agentrt_proxy_reloads_total{result=\"applied\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    eprintln!("{applied} reloads applied for 151 requests");
    assert!(
        applied < 151,
        "requests that arrived during a reload joined the next one ({applied} applied)"
    );
}
