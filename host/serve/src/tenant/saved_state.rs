//! The tenants' state kept across a restart (`--state-dir DIR`).
//!
//! A policy learns from traffic; a rolling deploy of `serve` would throw that away with the
//! process. With a state directory, a graceful shutdown ([`crate::front::connections`]'s drain,
//! then [`StateDir::save`]) writes, for every tenant started, each slot's snapshot and the agent
//! directory its state refers to — agent names and their handles, the live sessions — and the
//! next process restores them when the tenant starts again: the snapshot into a policy of the
//! same name (another policy starts fresh, as a hot swap to it would with `fresh=true`), the
//! agents under the same handles, so that what the state says of agent 7 is still about agent 7.
//!
//! Handles are the proxy's, shared by every tenant: a restored tenant's handles must not go to
//! another tenant that starts first. So every saved directory is read when `serve` starts, its
//! handles reserved for their tenant at once, and the handle counter resumes where it stopped.
//!
//! Layout: `DIR/handles.json` (the counter), and per tenant `DIR/tenant-NAME/agents.json` and
//! `DIR/tenant-NAME/SLOT.snapshot` with `SLOT.json` (the policy's name and version). Files are
//! written 0600 through a temporary name and a rename, so a crash mid-save leaves the previous
//! file whole; reads are bounded (a snapshot by the policy host's own bound). What does not read
//! back is logged and skipped: the tenant starts fresh.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use agentrt_runtime::results::MAX_SNAPSHOT_BYTES;
use agentrt_runtime::PolicyHandle;

use crate::tenant::agents::{AgentDirectory, SavedDirectory};
use crate::tenant::handles::Handles;

/// The largest `agents.json` read back (4,096 names of 256 bytes take ~1.2 MB).
const MAX_DIRECTORY_BYTES: u64 = 16 << 20;

/// What of one tenant is saved and restored: its name, its slots' policies and its agents. The
/// tenant hands this view over, so this module needs nothing else of it.
pub struct TenantState<'a> {
    /// The tenant's name: its folder under the state directory.
    pub name: &'a str,
    /// Each slot's name and policy, whose snapshot is saved and restored.
    pub slots: Vec<(&'a str, &'a PolicyHandle)>,
    /// The agents and live sessions the snapshots refer to.
    pub agents: &'a AgentDirectory,
}

/// Which policy a snapshot is of.
#[derive(Debug, Serialize, Deserialize)]
struct SnapshotOf {
    policy: String,
    version: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedHandles {
    next: u32,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

/// What one save wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Saved {
    /// Tenants whose state was written.
    pub tenants: usize,
    /// Slot snapshots written.
    pub snapshots: usize,
    /// Slots whose snapshot failed (logged each).
    pub failed: usize,
}

/// The saved directories read at start, each taken by its tenant when it starts.
#[derive(Default)]
pub struct Pending(Mutex<HashMap<String, SavedDirectory>>);

impl StateDir {
    /// The state directory at `root`, made (0700) if it is missing.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(root)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    fn tenant_dir(&self, tenant: &str) -> PathBuf {
        // Tenant names are letters, digits, `-`, `_` and `.`: the prefix keeps `..` a plain name.
        self.root.join(format!("tenant-{tenant}"))
    }

    /// Read every saved tenant's directory, reserve its handles for it in `handles` and resume
    /// the counter; the directories wait for their tenants in the returned [`Pending`].
    pub fn load(&self, handles: &Handles) -> Pending {
        let mut pending = HashMap::new();
        if let Some(saved) = read_json::<SavedHandles>(&self.root.join("handles.json"), 4096) {
            handles.resume_at(saved.next);
        }
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Pending::default();
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(tenant) = name.strip_prefix("tenant-") else {
                continue;
            };
            if crate::names::validate_tenant_name(tenant).is_err() {
                continue;
            }
            let path = entry.path().join("agents.json");
            let Some(directory) = read_json::<SavedDirectory>(&path, MAX_DIRECTORY_BYTES) else {
                continue;
            };
            let owner: Arc<str> = tenant.into();
            for (_, handle) in &directory.agents {
                handles.reserve(*handle, &owner);
            }
            pending.insert(tenant.to_string(), directory);
        }
        if !pending.is_empty() {
            tracing::info!(tenants = pending.len(), dir = %self.root.display(), "saved tenant state found");
        }
        Pending(Mutex::new(pending))
    }

    /// Write every tenant's slots' snapshots and agent directory, and the handle counter.
    pub fn save<'a>(&self, tenants: impl IntoIterator<Item = TenantState<'a>>, handles: &Handles) -> Saved {
        let mut saved = Saved::default();
        for tenant in tenants {
            let dir = self.tenant_dir(tenant.name);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                tracing::warn!(tenant = %tenant.name, error = %e, "could not save the tenant's state");
                continue;
            }
            for &(slot, policy) in &tenant.slots {
                match save_snapshot(&dir, slot, policy) {
                    Ok(()) => saved.snapshots += 1,
                    Err(e) => {
                        saved.failed += 1;
                        tracing::warn!(tenant = %tenant.name, slot, error = %e, "the slot's state was not saved");
                    }
                }
            }
            let directory = tenant.agents.saved();
            match write_json(&dir.join("agents.json"), &directory) {
                Ok(()) => saved.tenants += 1,
                Err(e) => tracing::warn!(tenant = %tenant.name, error = %e, "the tenant's agents were not saved"),
            }
        }
        let counter = SavedHandles { next: handles.next() };
        if let Err(e) = write_json(&self.root.join("handles.json"), &counter) {
            tracing::warn!(error = %e, "the agent handle counter was not saved");
        }
        saved
    }

    /// Restore `tenant`'s saved state, if any: its agents and sessions, then each slot's
    /// snapshot into a policy of the same name.
    pub fn restore(&self, pending: &Pending, tenant: TenantState<'_>) {
        let Some(directory) = pending.take(tenant.name) else {
            return;
        };
        let (agents, sessions) = (directory.agents.len(), directory.sessions.len());
        tenant.agents.restore(directory);
        let dir = self.tenant_dir(tenant.name);
        let mut restored = Vec::new();
        for &(slot, policy) in &tenant.slots {
            match restore_snapshot(&dir, slot, policy) {
                Ok(true) => restored.push(slot),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(tenant = %tenant.name, slot, error = %e, "saved state not restored; the slot starts fresh")
                }
            }
        }
        tracing::info!(tenant = %tenant.name, agents, sessions, slots = ?restored, "tenant state restored");
    }
}

impl Pending {
    fn take(&self, tenant: &str) -> Option<SavedDirectory> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(tenant)
    }
}

fn save_snapshot(dir: &Path, slot: &str, policy: &PolicyHandle) -> Result<(), String> {
    let bytes = policy.snapshot().map_err(|e| e.to_string())?;
    let info = policy.info();
    write_file(&dir.join(format!("{slot}.snapshot")), &bytes).map_err(|e| e.to_string())?;
    let of = SnapshotOf {
        policy: info.name,
        version: info.version,
    };
    write_json(&dir.join(format!("{slot}.json")), &of).map_err(|e| e.to_string())
}

/// Restore `slot`'s snapshot into `policy`: `Ok(false)` when none was saved, or it is another
/// policy's (logged).
fn restore_snapshot(dir: &Path, slot: &str, policy: &PolicyHandle) -> Result<bool, String> {
    let Some(of) = read_json::<SnapshotOf>(&dir.join(format!("{slot}.json")), 4096) else {
        return Ok(false);
    };
    let running = policy.info();
    if of.policy != running.name {
        tracing::info!(slot, saved = %of.policy, running = %running.name, "saved state is another policy's; the slot starts fresh");
        return Ok(false);
    }
    let bytes = read_bounded(&dir.join(format!("{slot}.snapshot")), MAX_SNAPSHOT_BYTES as u64)
        .ok_or("its snapshot is missing or larger than a snapshot may be")?;
    policy.restore(&bytes).map_err(|e| e.to_string())?;
    Ok(true)
}

fn read_bounded(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path, max: u64) -> Option<T> {
    let bytes = read_bounded(path, max)?;
    match serde_json::from_slice(&bytes) {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "saved state does not read back; skipped");
            None
        }
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    write_file(path, &serde_json::to_vec(value).expect("saved state serializes"))
}

/// Write `bytes` at `path` (0600) through a temporary file and a rename.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}
