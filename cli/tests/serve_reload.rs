//! The `agentrt serve` process reloads its tenants' config file on SIGHUP: a key the new file
//! gives works at once, one it drops is refused, a broken file changes nothing — and the process
//! keeps running throughout. The file's `[serve]` table gives the process its flags. And the
//! process runs without transparent huge pages (its allocator's stalls under load).

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `agentrt serve` on a free port, its log lines kept; killed when dropped.
struct Serve {
    child: Child,
    addr: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Serve {
    /// The log lines that contain `text`, once one does (within a few seconds).
    fn logged(&self, text: &str) -> Vec<String> {
        let start = Instant::now();
        loop {
            let found: Vec<String> = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.contains(text))
                .cloned()
                .collect();
            if !found.is_empty() || start.elapsed() > Duration::from_secs(5) {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &std::path::Path) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .args([
            "serve",
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--policy",
            "lru",
        ])
        .arg("--config")
        .arg(config)
        // The log as an operator gets it: the default filter, to a pipe (not a terminal).
        .env_remove("AGENTRT_LOG")
        .env_remove("MIMALLOC_ALLOW_THP")
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting agentrt serve");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("agentrt serve exited before listening").unwrap();
        log.lock().unwrap().push(line.clone());
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep reading its log so it never blocks on a full pipe.
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    Serve { child, addr, log }
}

/// The status of `GET /v1/models` with `key`: 401 for a key no tenant has; anything else (here
/// 502 or 504: the upstream is a closed port) means the key was accepted.
fn status_with(serve: &Serve, key: &str) -> u16 {
    let mut stream = TcpStream::connect(&serve.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether the kernel may back `pid`'s memory with transparent huge pages (`THP_enabled` in its
/// status); `None` where the kernel does not say (not Linux, or older than 5.0).
fn thp_enabled(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("THP_enabled:"))?;
    Some(line.split_whitespace().nth(1)? != "0")
}

fn hang_up(serve: &Serve) {
    let status = Command::new("kill")
        .args(["-HUP", &serve.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Wait until `key`'s status satisfies `done` (a reload is asynchronous to the signal).
fn eventually(serve: &Serve, key: &str, done: impl Fn(u16) -> bool) -> u16 {
    let start = Instant::now();
    loop {
        let status = status_with(serve, key);
        if done(status) || start.elapsed() > Duration::from_secs(10) {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_reloads_the_tenants_and_a_broken_file_changes_nothing() {
    let dir = tempfile_dir();
    let config = dir.join("tenants.toml");
    std::fs::write(&config, "[tenants.alpha]\napi-keys = [\"key-a\"]\n").unwrap();
    set_mode(&config, 0o644);
    let mut serve = start(&config);
    assert_ne!(status_with(&serve, "key-a"), 401);
    assert_eq!(status_with(&serve, "key-b"), 401);
    match thp_enabled(serve.child.id()) {
        Some(enabled) => assert!(!enabled, "agentrt serve runs with transparent huge pages"),
        None => eprintln!("SKIPPED the huge-page check: this kernel's /proc/PID/status has no THP_enabled"),
    }
    // What an operator must hear at start, in plain text (the log is a pipe, not a terminal).
    for warning in [
        "every user on this machine may read it (mode 644) and it holds API keys or tokens",
        "no --eviction-socket: no engine plugin will ask which KV blocks to evict",
        "the upstream http://127.0.0.1:9 does not answer",
    ] {
        assert_eq!(
            serve.logged(warning).len(),
            1,
            "{warning}: {:?}",
            serve.log.lock().unwrap()
        );
    }
    assert!(
        !serve.log.lock().unwrap().iter().any(|l| l.contains('\x1b')),
        "no colour codes in a log file"
    );

    // The old spelling still works, with a warning naming the key.
    std::fs::write(&config, "[tenants.beta]\napi_keys = [\"key-b\"]\n").unwrap();
    hang_up(&serve);
    assert_ne!(
        eventually(&serve, "key-b", |s| s != 401),
        401,
        "beta's key works after SIGHUP"
    );
    assert_eq!(status_with(&serve, "key-a"), 401, "alpha's key is gone");
    let reloaded = serve.logged("settings reloaded (SIGHUP)");
    assert!(
        reloaded.iter().any(|l| l.ends_with(
            "settings reloaded (SIGHUP): tenant alpha removed (its keys revoked); tenant beta added (1 API key)"
        )),
        "a reload says what changed, never a key: {reloaded:?}"
    );
    let spelling = serve.logged("`api_keys` is the old spelling");
    assert!(spelling.iter().any(|l| l.contains("write `api-keys`")), "{spelling:?}");

    std::fs::write(&config, "[tenants.beta]\napi_kes = [\"key-c\"]\n").unwrap();
    hang_up(&serve);
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(status_with(&serve, "key-b"), 401, "a broken file changed nothing");
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "the process is still running"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_config_files_serve_table_gives_the_flags_and_an_unknown_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentrt.toml");
    // Everything from the file: no flag but --config on the command line.
    std::fs::write(
        &config,
        "[serve]\nupstream = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\npolicy = \"lru\"\n\
         [tenants.alpha]\napi_keys = [\"key-a\"]\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = loop {
        let line = lines.next().expect("agentrt serve exited before listening").unwrap();
        if line.contains("listening on http://") {
            break line;
        }
    };
    let serve = Serve {
        child,
        log: Default::default(),
        addr: listening
            .split("listening on http://")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string(),
    };
    std::thread::spawn(move || for _ in lines {});
    assert!(listening.contains("127.0.0.1:9 (policy lru)"), "{listening}");
    assert_eq!(status_with(&serve, "nope"), 401, "the file's tenants are in force");
    drop(serve);

    std::fs::write(
        &config,
        "[serve]\nupstream = \"http://127.0.0.1:9\"\nmax-conections = 5\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[serve] max-conections: unknown key `max-conections`"),
        "{stderr}"
    );
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A fresh folder under the system's temporary one (no tempfile dependency for one test).
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentrt-serve-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
