//! Reloading the tenants' settings without a restart: on SIGHUP or `POST /admin/reload`, the
//! config file (`--config`) is read again, merged with the flags, validated, and only then
//! replaces the settings requests read ([`crate::tenants::Tenants::replace_settings`]) and the
//! engine's cache shares. A file that does not parse or validate changes nothing: the error says
//! what and where (file, line, tenant), and the proxy goes on with the settings it had.
//!
//! What a reload changes: API keys (new tenants, revoked keys), tenant admin tokens, cache
//! shares and every quota, at once for live tenants. What it does not: the operator's tokens,
//! listen address, upstream, policy limits and table sizes (flags, read once), and whether
//! shares are on at all — turning them on needs the eviction service to start ranking by
//! tenant, so start with at least one share to change shares later.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::proxy::AppState;
use crate::tenant_settings::{ConfigFile, FlagSettings, TenantSettings};

/// The config file and the flags it is merged with.
#[derive(Debug, Clone)]
pub struct Reloader {
    pub path: PathBuf,
    pub flags: FlagSettings,
}

/// What a reload installed, for its caller and the log.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Reloaded {
    /// Tenants that API keys name.
    pub tenants: Vec<String>,
    pub api_keys: usize,
    /// Tenants with a cache share.
    pub shares: Vec<String>,
}

/// The settings at start: from `flags`, merged with the file at `config` when there is one, and
/// the reloader that re-reads it.
pub fn initial_settings(
    config: Option<PathBuf>,
    flags: FlagSettings,
) -> Result<(TenantSettings, Option<Reloader>), String> {
    match config {
        Some(path) => {
            let reloader = Reloader { path, flags };
            Ok((reloader.read()?, Some(reloader)))
        }
        None => Ok((flags.settings()?, None)),
    }
}

impl Reloader {
    /// The settings the file and flags give now (nothing is installed).
    pub fn read(&self) -> Result<TenantSettings, String> {
        let file = ConfigFile::load(&self.path)?;
        self.flags
            .merge(file)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Read, validate and install the settings; on error nothing changes.
    pub fn reload(&self, state: &AppState) -> Result<Reloaded, String> {
        let settings = self.read()?;
        check_shares(state, &settings)?;
        if let Some(cache) = &state.engine_cache {
            cache.set_shares(settings.shares.clone());
        }
        let mut tenants: Vec<String> = settings.keys.values().cloned().collect();
        tenants.sort();
        tenants.dedup();
        let mut shares: Vec<String> = settings.shares.keys().cloned().collect();
        shares.sort();
        let reloaded = Reloaded {
            tenants,
            api_keys: settings.keys.len(),
            shares,
        };
        state.tenants.replace_settings(settings);
        Ok(reloaded)
    }
}

/// Shares act only where the eviction service ranks by tenant.
pub fn check_shares(state: &AppState, settings: &TenantSettings) -> Result<(), String> {
    if state.engine_cache.is_none() && !settings.shares.is_empty() {
        return Err(
            "cache shares are set, but this proxy ranks the engine's cache with one policy: \
             shares need --eviction-socket and at least one share at start"
                .into(),
        );
    }
    Ok(())
}

/// Reload on every SIGHUP, for as long as the process runs.
#[cfg(unix)]
pub fn reload_on_sighup(state: Arc<AppState>) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(reloader) = &state.reloader else {
                tracing::warn!("SIGHUP: there is no --config file to reload");
                continue;
            };
            match reloader.reload(&state) {
                Ok(done) => {
                    tracing::info!(tenants = ?done.tenants, shares = ?done.shares, "settings reloaded (SIGHUP)")
                }
                Err(e) => tracing::error!(error = %e, "reload refused (SIGHUP); the previous settings stay"),
            }
        }
    });
    Ok(())
}
