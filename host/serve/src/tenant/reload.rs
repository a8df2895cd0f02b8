//! Reloading the tenants' settings without a restart: on SIGHUP or `POST /admin/reload`, the
//! config file (`--config`) is read again, merged with the flags, validated, and only then
//! replaces the settings requests read ([`crate::tenant::Tenants::replace_settings`]) and the
//! engine's cache shares. A file that does not parse or validate changes nothing: the error says
//! what and where (file, line, tenant), and the proxy goes on with the settings it had.
//!
//! The file is read as [`crate::tenant::config_file`] reads it (a settled regular file under a size
//! cap; a file renamed over the last one read is read at once), on a blocking thread. Reloads
//! coalesce: one runs at a time, and every request that arrives meanwhile joins the next one
//! and gets its answer, so a storm of N requests costs at most two reads and two applies, and
//! each answer comes from a read that began after its request ([`Rounds`]). A file that would
//! leave the proxy without API keys is refused unless it says `unauthenticated = true`
//! ([`crate::tenant::settings`]).
//!
//! The `[serve]` table is checked on every read as at start, by the flags' own parsers
//! ([`crate::config_flags`], handed in by `cli` as a [`ServeTableCheck`]: the tenant layer does
//! not reach up to the flags): every key a flag's name, every value one its flag takes. It is then compared with the table at start
//! value by value, floats by their bits, so a file read again unchanged is never "changed".
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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};

use agentrt_runtime::Share;
use serde::Serialize;

use crate::metrics::ProxyMetrics;
use crate::tenant::config_file::{read_settled_since, FileStamp};
use crate::tenant::settings::{ConfigFile, FlagSettings, TenantSettings};
use crate::tenant::Tenants;

/// How the file's `[serve]` table is checked against the flags (`table`, the file's `path` for
/// the messages): `Err` names what is wrong, never a value.
pub type ServeTableCheck = fn(table: &toml::Table, path: &std::path::Path) -> Result<(), String>;

/// The config file and the flags it is merged with.
#[derive(Debug)]
pub struct Reloader {
    /// The config file (`--config`), read again on every reload.
    pub path: PathBuf,
    /// The settings the flags give, read once at start; the file is merged over them each time.
    pub flags: FlagSettings,
    /// Checks the file's `[serve]` table on every read.
    check_serve: ServeTableCheck,
    /// The file's `[serve]` table as it was at start: its flags are read once, so a reload of a
    /// file whose table differs is refused.
    serve_at_start: toml::Table,
    /// The version of the file read last: a file renamed over it is read without waiting.
    last_read: Mutex<Option<FileStamp>>,
    /// One reload at a time, and the requests that arrive meanwhile joined into the next.
    rounds: Rounds,
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

/// The settings at start: from `flags`, merged with the file at `config` when there is one
/// (its `[serve]` table checked by `check_serve`), and the reloader that re-reads it.
pub fn initial_settings(
    config: Option<PathBuf>,
    flags: FlagSettings,
    check_serve: ServeTableCheck,
) -> Result<(TenantSettings, Option<Reloader>), String> {
    match config {
        Some(path) => {
            let mut reloader = Reloader {
                path,
                flags,
                check_serve,
                serve_at_start: toml::Table::new(),
                last_read: Mutex::new(None),
                rounds: Rounds::default(),
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
        let previous = *lock(&self.last_read);
        let (text, stamp) = read_settled_since(&self.path, previous)?;
        *lock(&self.last_read) = Some(stamp);
        let mut file = ConfigFile::from_text(&self.path, &text)?;
        let serve = file.serve.take().unwrap_or_default();
        // Before the warnings: a key of [serve] that is no flag's name is never logged.
        (self.check_serve)(&serve, &self.path)?;
        for warning in std::mem::take(&mut file.warnings) {
            tracing::warn!("{warning}");
        }
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
    let same = |key: &String| match (before.get(key), after.get(key)) {
        (Some(a), Some(b)) => same_value(a, b),
        (a, b) => a.is_none() && b.is_none(),
    };
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| !same(k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Whether two TOML values are the same, floats compared by their bits: `nan` is the same as
/// `nan` (it is never equal to itself), so a file read again unchanged is never "changed".
fn same_value(a: &toml::Value, b: &toml::Value) -> bool {
    use toml::Value::{Array, Float, Table};
    match (a, b) {
        (Float(x), Float(y)) => x.to_bits() == y.to_bits(),
        (Array(xs), Array(ys)) => xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_value(x, y)),
        (Table(xs), Table(ys)) => {
            xs.len() == ys.len() && xs.iter().all(|(k, x)| ys.get(k).is_some_and(|y| same_value(x, y)))
        }
        _ => a == b,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a reload answers.
type Answer = Result<Reloaded, String>;

/// Reloads coalesced into rounds: one round runs at a time; a request joins the round that has
/// not started yet (opening it if there is none) and gets that round's answer. A round closes
/// when it starts reading, so a request that arrives during a read — maybe after the file
/// changed — is answered by the next round's read, never by an older one.
#[derive(Debug, Default)]
struct Rounds {
    /// The round requests join now; it starts when the one running finishes.
    next: Mutex<Option<Arc<Round>>>,
    /// Held by the round that runs.
    running: Mutex<()>,
}

/// One reload and everyone waiting for its answer.
#[derive(Debug, Default)]
struct Round {
    answer: Mutex<Option<Answer>>,
    ready: Condvar,
}

impl Rounds {
    /// `reload`'s answer, from this request's own round or one it joined.
    fn run(&self, reload: impl FnOnce() -> Answer) -> Answer {
        let (round, leads) = {
            let mut next = lock(&self.next);
            match &*next {
                Some(round) => (round.clone(), false),
                None => {
                    let round = Arc::new(Round::default());
                    *next = Some(round.clone());
                    (round, true)
                }
            }
        };
        if !leads {
            return round.wait();
        }
        let _running = lock(&self.running);
        lock(&self.next).take();
        // Should the reload panic, the round still answers (on drop) and no one waits forever.
        let mut answering = Answering(&round, None);
        let answer = reload();
        answering.1 = Some(answer.clone());
        answer
    }
}

impl Round {
    fn wait(&self) -> Answer {
        let mut answer = lock(&self.answer);
        loop {
            if let Some(answer) = answer.as_ref() {
                return answer.clone();
            }
            answer = self.ready.wait(answer).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Gives a round its answer when dropped: the reload's, or an error if it never came.
struct Answering<'a>(&'a Round, Option<Answer>);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        let answer = self
            .1
            .take()
            .unwrap_or_else(|| Err("the reload failed before it answered; the previous settings stay".into()));
        *lock(&self.0.answer) = Some(answer);
        self.0.ready.notify_all();
    }
}

/// Reloading in a running proxy: the file's reader, and what a reload changes — the tenants'
/// settings and, under cache shares, the engine cache's shares.
pub struct Reloads {
    reloader: Reloader,
    tenants: Arc<Tenants>,
    cache: Option<Arc<dyn CacheShares>>,
    metrics: Arc<ProxyMetrics>,
}

/// The engine's cache divided among tenants, as a reload sees it: only its shares change. The
/// engine layer implements it for the adapter that ranks by tenant, so this layer names no engine.
pub trait CacheShares: Send + Sync {
    /// Each tenant's guaranteed and maximum blocks from now on (a tenant not named: none).
    fn set_shares(&self, shares: HashMap<String, Share>);
}

impl Reloads {
    /// Reloads that install what `reloader` reads into `tenants` and, when cache shares are on,
    /// into the engine's `cache`; each outcome is counted in `metrics`.
    pub fn new(
        reloader: Reloader,
        tenants: Arc<Tenants>,
        cache: Option<Arc<dyn CacheShares>>,
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
    /// Requests that arrive while one reload runs join the next ([`Rounds`]): each round is
    /// counted once in the metrics.
    pub fn reload(&self) -> Result<Reloaded, String> {
        self.reloader.rounds.run(|| {
            let installed = self.install();
            let counter = match installed {
                Ok(_) => &self.metrics.reloads_applied,
                Err(_) => &self.metrics.reloads_refused,
            };
            counter.fetch_add(1, Relaxed);
            installed
        })
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

    #[test]
    fn a_float_read_again_is_the_same_nan_included() {
        let read = || {
            toml::from_str::<toml::Table>(
                "rate = nan
list = [1.5, inf]
",
            )
            .unwrap()
        };
        assert!(changed_keys(&read(), &read()).is_empty());
        let other: toml::Table = toml::from_str(
            "rate = 2.0
list = [1.5, inf]
",
        )
        .unwrap();
        assert_eq!(changed_keys(&read(), &other), ["rate"]);
    }

    #[test]
    fn requests_during_a_reload_join_the_next_one_and_share_its_answer() {
        use std::sync::atomic::AtomicUsize;
        let rounds = Arc::new(Rounds::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let reload = |rounds: Arc<Rounds>, runs: Arc<AtomicUsize>| {
            std::thread::spawn(move || {
                rounds.run(|| {
                    let n = runs.fetch_add(1, Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    Err(format!("round {n}"))
                })
            })
        };
        let first = reload(rounds.clone(), runs.clone());
        std::thread::sleep(std::time::Duration::from_millis(30));
        let joined: Vec<_> = (0..50).map(|_| reload(rounds.clone(), runs.clone())).collect();
        assert_eq!(first.join().unwrap(), Err("round 0".to_string()));
        for answer in joined {
            assert_eq!(
                answer.join().unwrap(),
                Err("round 1".to_string()),
                "one round for all 50"
            );
        }
        assert_eq!(runs.load(Relaxed), 2);
    }
}
