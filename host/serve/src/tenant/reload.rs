//! Reloading the tenants' settings without a restart: on SIGHUP or `POST /admin/reload`, the
//! config file (`--config`) is read again, merged with the flags, validated, and only then
//! replaces the settings requests read ([`crate::tenant::Tenants::replace_settings`]) and the
//! engine's cache shares. A file that does not parse or validate changes nothing: the error says
//! what and where (file, line, tenant), and the proxy goes on with the settings it had.
//!
//! The file is read as [`crate::tenant::config_file`] reads it (a settled regular file under a size
//! cap), on a blocking thread, one reload at a time. A file that would leave the proxy without
//! API keys is refused unless it says `unauthenticated = true` ([`crate::tenant::settings`]).
//!
//! What a reload changes: the file's `[tenants.*]`, `[defaults]` and `[public]` tables and
//! `unauthenticated` — API keys (new tenants, revoked keys), tenant admin tokens, cache shares,
//! every quota and the public anchors — at once for live tenants. What it does not: every flag,
//! whether given on the command line or in the file's `[serve]` table
//! ([`crate::config_flags`]) — the operator's tokens, listen address, upstream, policies, limits,
//! table sizes, replicas, MCP — which are read once, at start; and whether shares are on at all —
//! turning them on needs the eviction service to start ranking by tenant, so start with at least
//! one share to change shares later. A reload whose file changed `[serve]` is refused, naming the
//! keys that changed: applying the rest would leave the file half in effect, and the operator
//! believing a setting changed that did not.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use serde::Serialize;

use crate::metrics::ProxyMetrics;
use crate::tenant::settings::{ConfigFile, FlagSettings, TenantSettings};
use crate::tenant::Tenants;

/// The config file and the flags it is merged with.
#[derive(Debug)]
pub struct Reloader {
    /// The config file (`--config`), read again on every reload.
    pub path: PathBuf,
    /// The settings the flags give, read once at start; the file is merged over them each time.
    pub flags: FlagSettings,
    /// The file's `[serve]` table as it was at start: its flags are read once, so a reload of a
    /// file whose table differs is refused.
    serve_at_start: toml::Table,
    /// Held through a reload: two at once could install the older file last.
    one_at_a_time: std::sync::Mutex<()>,
}

/// What a reload installed, for its caller and the log.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Reloaded {
    /// Tenants that API keys name.
    pub tenants: Vec<String>,
    /// API keys the new settings give, from the file and `--tenant` together.
    pub api_keys: usize,
    /// Tenants with a cache share.
    pub shares: Vec<String>,
    /// Tenants no key reaches any more: stopped, their requests in flight cancelled.
    pub stopped: Vec<String>,
    /// What changed, one phrase each ([`crate::tenant::reload_changes`]; never a secret).
    pub changes: Vec<String>,
}

impl Reloaded {
    /// The reload in one line for the log: what changed, or that nothing did.
    pub fn summary(&self) -> String {
        if self.changes.is_empty() {
            "nothing changed".to_string()
        } else {
            self.changes.join("; ")
        }
    }
}

/// The settings at start: from `flags`, merged with the file at `config` when there is one, and
/// the reloader that re-reads it.
pub fn initial_settings(
    config: Option<PathBuf>,
    flags: FlagSettings,
) -> Result<(TenantSettings, Option<Reloader>), String> {
    match config {
        Some(path) => {
            let mut reloader = Reloader {
                path,
                flags,
                serve_at_start: toml::Table::new(),
                one_at_a_time: std::sync::Mutex::new(()),
            };
            let (settings, serve) = reloader.read_file()?;
            reloader.serve_at_start = serve;
            Ok((settings, Some(reloader)))
        }
        None => Ok((flags.settings()?, None)),
    }
}

impl Reloader {
    /// The settings the file and flags give now (nothing is installed). It may wait for a file
    /// being written ([`crate::tenant::config_file::read_settled`]): call it off the async workers.
    pub fn read(&self) -> Result<TenantSettings, String> {
        let (settings, serve) = self.read_file()?;
        let changed = changed_keys(&self.serve_at_start, &serve);
        if !changed.is_empty() {
            return Err(format!(
                "{}: [serve] {} changed since the start; flags are read at start only, so restart \
                 agentrt serve to apply {}, or put back the values it started with to reload the \
                 rest (a reload applies [tenants.*], [defaults], [public] and `unauthenticated`)",
                self.path.display(),
                changed.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
                if changed.len() == 1 { "it" } else { "them" }
            ));
        }
        Ok(settings)
    }

    /// The tenants' settings and the `[serve]` table the file gives now.
    fn read_file(&self) -> Result<(TenantSettings, toml::Table), String> {
        let mut file = ConfigFile::load(&self.path)?;
        for warning in std::mem::take(&mut file.warnings) {
            tracing::warn!("{warning}");
        }
        let serve = file.serve.take().unwrap_or_default();
        let says_unauthenticated = file.unauthenticated;
        let settings = self
            .flags
            .merge(file)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        if settings.keys.is_empty() && !says_unauthenticated {
            return Err(format!(
                "{}: neither the file nor --tenant gives an API key, so every request would be served \
                 unauthenticated as tenant `{}`; give tenants api-keys, or put `unauthenticated = true` \
                 at the top of the file if that is what you want",
                self.path.display(),
                crate::names::DEFAULT_TENANT
            ));
        }
        Ok((settings, serve))
    }
}

/// The `[serve]` keys whose values differ between `before` and `after` (added, removed or
/// changed), sorted.
fn changed_keys(before: &toml::Table, after: &toml::Table) -> Vec<String> {
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Reloading in a running proxy: the file's reader, and what a reload changes — the tenants'
/// settings and, under cache shares, the engine cache's shares.
pub struct Reloads {
    reloader: Reloader,
    tenants: Arc<Tenants>,
    cache: Option<Arc<agentrt_vllm::SharedCache>>,
    metrics: Arc<ProxyMetrics>,
}

impl Reloads {
    /// Reloads that install what `reloader` reads into `tenants` and, when cache shares are on,
    /// into the engine's `cache`; each outcome is counted in `metrics`.
    pub fn new(
        reloader: Reloader,
        tenants: Arc<Tenants>,
        cache: Option<Arc<agentrt_vllm::SharedCache>>,
        metrics: Arc<ProxyMetrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            reloader,
            tenants,
            cache,
            metrics,
        })
    }

    /// Read, validate and install the settings; on error nothing changes. Blocking (see
    /// [`Reloader::read`]); [`Self::reload_off_workers`] runs it on a blocking thread.
    pub fn reload(&self) -> Result<Reloaded, String> {
        let _one = self.reloader.one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        let installed = self.install();
        let counter = match installed {
            Ok(_) => &self.metrics.reloads_applied,
            Err(_) => &self.metrics.reloads_refused,
        };
        counter.fetch_add(1, Relaxed);
        installed
    }

    /// [`Self::reload`] on a blocking thread: reading may wait for a file being written, and a
    /// slow disk must not hold an async worker.
    pub async fn reload_off_workers(self: &Arc<Self>) -> Result<Reloaded, String> {
        let reloads = self.clone();
        tokio::task::spawn_blocking(move || reloads.reload())
            .await
            .unwrap_or_else(|e| Err(format!("the reload did not finish: {e}")))
    }

    fn install(&self) -> Result<Reloaded, String> {
        let settings = self.reloader.read()?;
        // Shares act only where the eviction service ranks by tenant.
        if self.cache.is_none() && !settings.shares.is_empty() {
            return Err(
                "cache shares are set, but this proxy ranks the engine's cache with one policy: \
                 shares need --eviction-socket and at least one share at start"
                    .into(),
            );
        }
        if let Some(cache) = &self.cache {
            cache.set_shares(settings.shares.clone());
        }
        let mut tenants: Vec<String> = settings.keys.values().cloned().collect();
        tenants.sort();
        tenants.dedup();
        let mut shares: Vec<String> = settings.shares.keys().cloned().collect();
        shares.sort();
        let api_keys = settings.keys.len();
        let changes = crate::tenant::reload_changes::changes(&self.tenants.settings(), &settings);
        let stopped = self.tenants.replace_settings(settings);
        Ok(Reloaded {
            tenants,
            api_keys,
            shares,
            stopped,
            changes,
        })
    }
}

/// Reload on every SIGHUP, for as long as the process runs. Without `--config` (`reloads` is
/// `None`) a SIGHUP is logged and changes nothing — and does not end the process, as its default
/// action would.
#[cfg(unix)]
pub fn reload_on_sighup(reloads: Option<Arc<Reloads>>) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(reloads) = &reloads else {
                tracing::warn!("SIGHUP: there is no --config file to reload");
                continue;
            };
            match reloads.reload_off_workers().await {
                Ok(done) => tracing::info!("settings reloaded (SIGHUP): {}", done.summary()),
                Err(e) => tracing::error!(error = %e, "reload refused (SIGHUP); the previous settings stay"),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_lists_added_removed_and_changed_ones() {
        let before: toml::Table = toml::from_str("a = 1\nb = \"x\"\nc = [1]\n").unwrap();
        let after: toml::Table = toml::from_str("a = 1\nb = \"y\"\nd = true\n").unwrap();
        assert_eq!(changed_keys(&before, &after), ["b", "c", "d"]);
        assert!(changed_keys(&before, &before).is_empty());
    }
}
