//! Giving the memory of a flood that went back to the operating system.
//!
//! What a flood held — MCP sessions, client connections — is freed to the allocator when it ends,
//! but glibc's keeps freed memory in its arenas: after 5,000 MCP sessions of one tenant expired,
//! the process stayed at 166 MiB resident; `malloc_trim(0)` took it to 49 MiB
//! (tests/hostile/mcp_sessions.rs measures it). So when a table or the open connections shrink —
//! a flood is gone — a trim is asked for: at most one pending at a time, run a second later on a
//! thread of its own (it walks the heap), so a wave of closings costs one trim. Other allocators and platforms return memory their own way: nothing to do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static PENDING: AtomicBool = AtomicBool::new(false);

/// Ask for freed memory to be returned to the operating system soon.
pub fn trim_soon() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) || PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("agentrt-trim".into()).spawn(|| {
        std::thread::sleep(Duration::from_secs(1));
        PENDING.store(false, Ordering::Release);
        trim();
    });
    if spawned.is_err() {
        PENDING.store(false, Ordering::Release);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's `malloc_trim` takes no pointer and locks each arena it trims; it may be
    // called from any thread at any time.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
