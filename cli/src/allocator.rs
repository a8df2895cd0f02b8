//! The process's allocator: mimalloc, without transparent huge pages.
//!
//! mimalloc rather than glibc's malloc: under load the proxy's tokio workers allocate and free on
//! every request from several threads, and glibc's arenas cost it ~15 % of the proxy's CPU in
//! malloc and free plus ~4 % waking threads blocked on an arena's lock (a profile of `serve` at
//! its ceiling, docs/performance.md).
//!
//! mimalloc asks Linux for transparent huge pages on its heap (`MADV_HUGEPAGE`), and the kernel
//! then zeroes a whole 2 MiB page on the first touch of each. For a proxy that is a stall on the
//! request path whenever the heap grows — a burst of connections, say — and a stall makes the
//! next burst: in the peer benchmark at 2,000 req/s `serve` stopped answering for 50–750 ms every
//! few hundred milliseconds, a quarter of its CPU in `clear_page_erms` under mimalloc's page
//! faults. Without huge pages those stalls went, and peak RSS halved. An operator who wants them
//! back sets `MIMALLOC_ALLOW_THP=1`, which mimalloc reads itself.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Stop the kernel backing this process's memory with transparent huge pages, unless the
/// operator set `MIMALLOC_ALLOW_THP`. Call first thing in `main`: it holds for every page the
/// process touches afterwards, whichever thread touches it.
pub fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
