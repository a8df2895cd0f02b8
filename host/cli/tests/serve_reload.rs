//! The `agentrt serve` process reloads its tenants' config file on SIGHUP: a key the new file
//! gives works at once, one it drops is refused, a broken file changes nothing — and the process
//! keeps running throughout. The file's `[serve]` table gives the process its flags.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `agentrt serve` on a free port; killed when dropped.
struct Serve {
    child: Child,
    addr: String,
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
        .env("AGENTRT_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting agentrt serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("agentrt serve exited before listening").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Serve { child, addr }
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
    std::fs::write(&config, "[tenants.alpha]\napi_keys = [\"key-a\"]\n").unwrap();
    let mut serve = start(&config);
    assert_ne!(status_with(&serve, "key-a"), 401);
    assert_eq!(status_with(&serve, "key-b"), 401);

    std::fs::write(&config, "[tenants.beta]\napi_keys = [\"key-b\"]\n").unwrap();
    hang_up(&serve);
    assert_ne!(
        eventually(&serve, "key-b", |s| s != 401),
        401,
        "beta's key works after SIGHUP"
    );
    assert_eq!(status_with(&serve, "key-a"), 401, "alpha's key is gone");

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
        "[serve]\nupstream = \"http://127.0.0.1:9\"\nmax_connections = 5\n",
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
        stderr.contains("[serve] max_connections: unknown key `max_connections` (did you mean `max-connections`?)"),
        "{stderr}"
    );
}

/// A fresh folder under the system's temporary one (no tempfile dependency for one test).
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentrt-serve-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
