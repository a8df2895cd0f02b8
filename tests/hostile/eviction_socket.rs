//! The eviction socket (`--eviction-socket`): the Unix socket the engine's plugin asks which KV
//! blocks to evict. Local peers flooding it with connections or garbage, the socket file's mode
//! and what was at its path before, and RANK batches that mix the GPU and host tiers.
//! docs/security.md lists the limits.

#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;
#[path = "../../host/eviction/tests/common/mod.rs"]
mod vllm_plugin;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentrt_eviction::eviction::DEFAULT_MAX_CONNECTIONS;
use agentrt_eviction::{EvictionOptions, EvictionService, SocketAccess, SocketOptions};
use agentrt_runtime::types::{Pin, SideEffect, Tier};
use agentrt_tests::CapturedLog;
use support::{chat, post_json, Setup};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use vllm_plugin::{item, Plugin};

fn lru_service(path: &Path, options: EvictionOptions) -> std::io::Result<(EvictionService, tempfile::TempDir)> {
    let (engine, cache) = agentrt_tests::engine();
    let policy = Arc::new(agentrt_tests::start(&engine, "lru", &[]));
    EvictionService::bind_with(path, policy, options).map(|service| (service, cache))
}

/// True when the peer closed `stream` (end of file or a reset) within `within`.
async fn closed_by_peer(stream: &mut UnixStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// Connect to `path`, waiting while its backlog is full (a non-blocking connect then fails with
/// `WouldBlock` rather than waiting).
async fn connect(path: &Path) -> UnixStream {
    loop {
        match UnixStream::connect(path).await {
            Ok(stream) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => panic!("connecting to {}: {e}", path.display()),
        }
    }
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

// --- row 4: a flood of connections -----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_at_once_and_the_proxy_and_the_plugin_still_answer() {
    const FLOOD: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("evict.sock");
    let p = Setup {
        eviction_socket: Some(socket.clone()),
        ..Setup::new("lru")
    }
    .start()
    .await;
    let mut plugin = Plugin::connect_to(&socket).await;
    let before = open_descriptors();
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(connect(&socket).await);
    }
    // Accepted in order: once the last ones are closed, every one before was decided.
    for stream in flood.iter_mut().rev().take(20) {
        assert!(
            closed_by_peer(stream, Duration::from_secs(3)).await,
            "a connection past the cap is closed as soon as it is accepted"
        );
    }
    // The flood's own ends are ours; the proxy keeps at most the cap's worth of the others.
    let grown = open_descriptors() - before;
    assert!(
        grown <= FLOOD + DEFAULT_MAX_CONNECTIONS + 16,
        "{grown} descriptors for {FLOOD} peer connections: the proxy held more than its cap of {DEFAULT_MAX_CONNECTIONS}"
    );

    let health = reqwest::get(format!("{}/healthz", p.url)).await.unwrap();
    assert_eq!(health.status(), 200, "/healthz answers during the flood");
    let answer = post_json(&p, &chat("You are terse.", "hello", "m", false), &[]).await;
    assert_eq!(answer.status(), 200, "a chat request is served during the flood");
    let (fallback, order) = plugin.rank(1, 1, vec![item(1, 0, 1), item(2, 0, 2)]).await;
    assert!(!fallback);
    assert_eq!(order, vec![0], "the engine's plugin, connected first, still ranks");

    let text = reqwest::get(format!("{}/metrics", p.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = metric(&text, "agentrt_engine_plugin_connections_refused_total").expect("the refused series");
    assert_eq!(
        refused as usize,
        FLOOD + 1 - DEFAULT_MAX_CONNECTIONS,
        "every connection past the cap is counted"
    );
    assert_eq!(
        metric(&text, "agentrt_engine_plugin_connected"),
        Some(DEFAULT_MAX_CONNECTIONS as u64)
    );
}

// --- row 5: garbage frames --------------------------------------------------------------------

#[tokio::test(flavor = "current_thread")]
async fn garbage_frames_close_their_connection_and_log_lines_stay_bounded() {
    const ROUNDS: usize = 300;
    // One thread: the service's tasks log to this subscriber.
    let captured = CapturedLog::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let dir = tempfile::tempdir().unwrap();
    let (service, _cache) = lru_service(&dir.path().join("evict.sock"), EvictionOptions::default()).unwrap();
    let garbage: [&[u8]; 4] = [
        &[2, 0, 0, 0, 0x7f, 1],                                            // an unknown kind
        &[6, 0, 0, 0, agentrt_eviction::wire::KIND_BLOCKS, 1, 2, 3, 4, 5], // not whole block events
        &[3, 0, 0, 0, agentrt_eviction::wire::KIND_RANK, 1, 2],            // a RANK body cut short
        &u32::MAX.to_le_bytes(),                                           // a length past the limit
    ];
    for round in 0..ROUNDS {
        let mut stream = connect(service.path()).await;
        stream.write_all(garbage[round % garbage.len()]).await.unwrap();
        assert!(
            closed_by_peer(&mut stream, Duration::from_secs(2)).await,
            "round {round}: a garbage frame closes its connection"
        );
    }
    assert_eq!(service.counts().malformed, ROUNDS as u64);
    let log = captured.text();
    let lines = log.lines().count();
    assert!(
        lines <= 6,
        "{ROUNDS} garbage frames on {ROUNDS} connections logged {lines} lines; at most one per cause per 10 s:\n{log}"
    );
    // The service still serves a well-behaved plugin.
    let mut plugin = Plugin::connect(&service).await;
    let (_, order) = plugin.rank(1, 1, vec![item(1, 0, 1)]).await;
    assert_eq!(order, vec![0]);
}

// --- row 6: the socket file -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_file_is_0600_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evict.sock");
    // SAFETY: umask has no memory effects; the old mask is put back at once.
    let old = unsafe { libc::umask(0) };
    let bound = lru_service(&path, EvictionOptions::default());
    unsafe { libc::umask(old) };
    let (service, _cache) = bound.unwrap();
    let mode = std::fs::symlink_metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket's mode is {mode:o} under a umask of 0");
    // Its own user still connects.
    let mut plugin = Plugin::connect(&service).await;
    let (_, order) = plugin.rank(1, 1, vec![item(1, 0, 1)]).await;
    assert_eq!(order, vec![0]);
}

/// The name of this process's effective group.
fn own_group() -> (String, u32) {
    // SAFETY: getgrgid returns a pointer into static storage or null; it is read at once.
    unsafe {
        let gid = libc::getegid();
        let entry = libc::getgrgid(gid);
        assert!(!entry.is_null(), "no name for gid {gid}");
        let name = std::ffi::CStr::from_ptr((*entry).gr_name)
            .to_string_lossy()
            .into_owned();
        (name, gid)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_group_the_socket_file_is_0660_and_the_groups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evict.sock");
    let (group, gid) = own_group();
    let options = EvictionOptions {
        socket: SocketOptions {
            access: SocketAccess { group: Some(group) },
            ..SocketOptions::default()
        },
        ..EvictionOptions::default()
    };
    let old = unsafe { libc::umask(0) };
    let bound = lru_service(&path, options);
    unsafe { libc::umask(old) };
    let (_service, _cache) = bound.unwrap();
    let metadata = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(metadata.permissions().mode() & 0o777, 0o660);
    assert_eq!(metadata.gid(), gid);

    let unknown = EvictionOptions {
        socket: SocketOptions {
            access: SocketAccess {
                group: Some("no-such-group-here".into()),
            },
            ..SocketOptions::default()
        },
        ..EvictionOptions::default()
    };
    let e = lru_service(&dir.path().join("other.sock"), unknown)
        .err()
        .expect("an unknown group is refused");
    let message = e.to_string();
    assert!(
        message.contains("no-such-group-here") && message.contains("--eviction-socket-group"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_folders_are_created_for_the_sockets_audience_only_and_an_impossible_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // An operator's folder that exists keeps its mode.
    let existing = dir.path().join("run");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = existing.join("agentrt/a/evict.sock");
    let old = unsafe { libc::umask(0) };
    let bound = lru_service(&path, EvictionOptions::default());
    unsafe { libc::umask(old) };
    let (service, _cache) = bound.expect("the missing folders are created");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode(&existing.join("agentrt")),
        0o700,
        "created folders are agentrt's user's only"
    );
    assert_eq!(mode(&existing.join("agentrt/a")), 0o700);
    assert_eq!(mode(&existing), 0o755, "an existing folder is left as it is");
    Plugin::connect(&service).await;

    // With a group, its members must reach the socket: 0750 and the group's.
    let (group, gid) = own_group();
    let grouped = dir.path().join("grouped/evict.sock");
    let options = EvictionOptions {
        socket: SocketOptions {
            access: SocketAccess { group: Some(group) },
            ..SocketOptions::default()
        },
        ..EvictionOptions::default()
    };
    let (_grouped_service, _cache) = lru_service(&grouped, options).unwrap();
    let folder = std::fs::metadata(dir.path().join("grouped")).unwrap();
    assert_eq!(folder.permissions().mode() & 0o777, 0o750);
    assert_eq!(folder.gid(), gid);

    // A folder that cannot be made (a regular file is in the way): the error names the folder
    // and how to make it, and the file is untouched.
    let blocker = dir.path().join("not-a-folder");
    std::fs::write(&blocker, "the operator's data").unwrap();
    let blocked = blocker.join("agentrt/evict.sock");
    let e = lru_service(&blocked, EvictionOptions::default())
        .err()
        .expect("a folder under a regular file cannot be made");
    let message = e.to_string();
    assert!(
        message.contains(&blocker.join("agentrt").display().to_string()) && message.contains("install -d"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&blocker).unwrap(), "the operator's data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_stale_socket_at_the_path_is_refused_and_left_intact() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file: refused, naming the path and the fix; its content kept.
    let file = dir.path().join("file.sock");
    std::fs::write(&file, "the operator's data").unwrap();
    let e = lru_service(&file, EvictionOptions::default())
        .err()
        .expect("a regular file is refused");
    let message = e.to_string();
    assert!(
        message.contains(&file.display().to_string())
            && message.contains("regular file")
            && message.contains("remove it"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "the operator's data");
    // A folder and a symbolic link: refused, left as they are.
    let folder = dir.path().join("folder.sock");
    std::fs::create_dir(&folder).unwrap();
    assert!(lru_service(&folder, EvictionOptions::default()).is_err());
    assert!(folder.is_dir());
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let e = lru_service(&link, EvictionOptions::default())
        .err()
        .expect("a symlink is refused");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());

    // A socket someone listens on: refused (another agentrt), and that one keeps serving.
    let live = dir.path().join("live.sock");
    let (first, _cache) = lru_service(&live, EvictionOptions::default()).unwrap();
    let e = lru_service(&live, EvictionOptions::default())
        .err()
        .expect("a live socket is refused");
    assert!(e.to_string().contains("another process is listening"), "{e}");
    let mut plugin = Plugin::connect(&first).await;
    let (_, order) = plugin.rank(1, 1, vec![item(1, 0, 1)]).await;
    assert_eq!(order, vec![0], "the first service still answers on its socket");

    // A socket nobody listens on (a crashed agentrt's): replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let (service, _cache) = lru_service(&stale, EvictionOptions::default()).expect("a stale socket is replaced");
    Plugin::connect(&service).await;
}

// --- row 14: a RANK that mixes tiers ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_tier_batch_ranks_each_tier_by_its_rule_and_keeps_the_gpu_pins() {
    const PINNED_AGENT: u32 = 7;
    let dir = tempfile::tempdir().unwrap();
    let (service, _cache) = lru_service(&dir.path().join("evict.sock"), EvictionOptions::default()).unwrap();
    service.apply(&SideEffect::Pin(Pin {
        agent: PINNED_AGENT,
        session: 0,
        ttl_ms: u32::MAX,
    }));
    let host = |hash, last_access| agentrt_eviction::wire::WireItem {
        tier: Tier::Host,
        ..item(hash, 0, last_access)
    };
    let batch = vec![
        item(1, PINNED_AGENT, 1), // GPU, pinned, the least recent of all
        host(2, 2),
        host(3, 3),
        item(4, 0, 5), // GPU
    ];
    let mut plugin = Plugin::connect(&service).await;
    let (_, order) = plugin.rank(1, 4, batch.clone()).await;
    assert_eq!(
        order,
        vec![1, 2, 3, 0],
        "host-tier items first, then GPU items with the pinned one last"
    );
    let (_, order) = plugin.rank(2, 3, batch).await;
    assert!(!order.contains(&0), "the pinned GPU item is kept: {order:?}");
}
