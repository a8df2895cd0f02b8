//! What an operator sets per tenant — API keys, admin tokens, cache shares, quotas — as one value
//! that a reload replaces whole: from the flags, merged with the config file (`--config`,
//! [`ConfigFile`]) when there is one. Requests read the current value without a lock; a reload
//! that fails to parse or validate changes nothing.
//!
//! ```toml
//! # unauthenticated = true        # only in a file that gives no API keys on purpose
//!
//! [defaults]                      # every tenant's quotas (else the flags')
//! max-in-flight = 256
//! policy-cpu-ms-per-s = 200
//! warmup-tokens-per-s = 20000
//!
//! [tenants.alpha]
//! api-keys = ["sk-alpha-1"]       # requests with `Authorization: Bearer sk-alpha-1` are alpha's
//! admin-tokens = ["adm-alpha"]    # the admin API for alpha's routes only
//! share = { min-blocks = 400, max-blocks = 1200 }
//! max-in-flight = 64              # any quota, for this tenant only
//! admission-weight = 2            # its share of places in the admission queue (default 1)
//!
//! [public]                        # anchors every tenant shares cache blocks for
//! anchors = ["3f9a0c1d2e4b5a69"]  # (the hashes the admin API's tenant stats list)
//! ```
//!
//! Keys are spelled with dashes, like `[serve]`'s (the flags' names). The underscored spelling
//! of earlier versions (`api_keys`, `max_in_flight`, …) is still read, with a warning naming the
//! key ([`crate::tenant::config_warnings`]).
//!
//! **A file never opens the proxy by accident.** Without API keys every request is the
//! unauthenticated tenant `default`. A file (with the flags) that gives no key is refused — at
//! start and on a reload — unless it says `unauthenticated = true`, so an emptied, truncated or
//! half-written file cannot turn authentication off. For the same reason `default` is not a
//! name a keyed tenant may have: it is the unauthenticated mode's tenant (unsalted) and the
//! engine-wide policy's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use agentrt_runtime::Share;

use crate::auth::AdminTokens;
use crate::names::{validate_tenant_name, DEFAULT_TENANT};
use crate::tenant::quotas::{LimitSource, Quotas, MAX_ADMISSION_WEIGHT};

/// Every tenant's settings at one moment.
#[derive(Debug, Clone, Default)]
pub struct TenantSettings {
    /// API key → tenant; empty: every request belongs to `default`.
    pub keys: HashMap<String, String>,
    /// The admin API's bearer tokens: the operator's and each tenant admin's.
    pub admin: AdminTokens,
    /// Cache shares by tenant (engine blocks); empty: one policy ranks the whole engine.
    pub shares: HashMap<String, Share>,
    /// The quotas of a tenant the settings do not name.
    pub defaults: Quotas,
    /// Tenants with quotas of their own.
    pub quotas: HashMap<String, Quotas>,
    /// Anchor hashes whose requests carry the public cache salt ([`crate::tenant::cache_salt`]).
    pub public_anchors: HashSet<u64>,
}

impl TenantSettings {
    /// The quotas `tenant` runs under.
    pub fn quotas_of(&self, tenant: &str) -> Quotas {
        self.quotas.get(tenant).copied().unwrap_or(self.defaults)
    }

    /// Whether `tenant` is one requests can reach: one an API key names (`default` without any).
    pub fn reachable(&self, tenant: &str) -> bool {
        if self.keys.is_empty() {
            tenant == DEFAULT_TENANT
        } else {
            self.keys.values().any(|t| t == tenant)
        }
    }
}

/// What the flags give: the settings without a file, and the base a file adds to.
#[derive(Debug, Clone, Default)]
pub struct FlagSettings {
    /// API key → tenant, from `--tenant KEY=TENANT`.
    pub keys: HashMap<String, String>,
    /// The operator's admin token (`--admin-token`): every route, every tenant.
    pub operator_token: Option<String>,
    /// Admin token → the one tenant it acts on, from `--tenant-admin TOKEN=TENANT`.
    pub tenant_admin_tokens: HashMap<String, String>,
    /// Each tenant's share of the engine's KV cache in blocks, from `--share TENANT=MIN[:MAX]`.
    pub shares: HashMap<String, Share>,
    /// Every tenant's quotas from the quota flags (`--tenant-max-in-flight` and the like); a
    /// file's `[defaults]` replace them.
    pub defaults: Quotas,
    /// Anchor hashes whose requests carry the public cache salt, from `--public-anchor`.
    pub public_anchors: HashSet<u64>,
}

impl FlagSettings {
    /// The settings from the flags alone.
    pub fn settings(&self) -> Result<TenantSettings, String> {
        self.merge(ConfigFile::default())
    }

    /// The flags' settings with `file`'s added. Keys, tokens and shares may come from either but
    /// not both for the same key, token or tenant: which would win is not obvious, so it is an
    /// error. The file's `[defaults]` replace the quota flags'.
    pub fn merge(&self, file: ConfigFile) -> Result<TenantSettings, String> {
        let unauthenticated = file.unauthenticated;
        let mut merged = Merged {
            keys: self.keys.clone(),
            admin_tokens: self.tenant_admin_tokens.clone(),
            shares: self.shares.clone(),
            quotas: HashMap::new(),
            file_tokens: Vec::new(),
        };
        let mut public_anchors = self.public_anchors.clone();
        for (i, hash) in file.public.anchors.iter().enumerate() {
            public_anchors.insert(parse_anchor_hash(hash).map_err(|e| format!("[public] anchors[{i}]: {e}"))?);
        }
        let defaults = file
            .defaults
            .over(self.defaults, "[defaults]", LimitSource::FileDefaults)?;
        for (tenant, section) in file.tenants {
            merged.add_tenant(tenant, section, defaults)?;
        }
        self.check_roles(unauthenticated, &merged)?;
        let admin = AdminTokens::new(self.operator_token.clone(), merged.admin_tokens, &merged.keys)?;
        Ok(TenantSettings {
            keys: merged.keys,
            admin,
            shares: merged.shares,
            defaults,
            quotas: merged.quotas,
            public_anchors,
        })
    }

    /// Refuses what the merged keys and tokens may not say together: keys beside
    /// `unauthenticated = true`, a keyed tenant named `default`, a file's admin token that is
    /// also another role's; its own step because these look at the whole merge, not one tenant.
    fn check_roles(&self, unauthenticated: bool, merged: &Merged) -> Result<(), String> {
        let keys = &merged.keys;
        if unauthenticated && !keys.is_empty() {
            return Err(
                "`unauthenticated = true`, but API keys are given (in the file or with --tenant): \
                 either key tenants or serve unauthenticated, not both"
                    .into(),
            );
        }
        if !keys.is_empty() && keys.values().any(|t| t == DEFAULT_TENANT) {
            return Err(format!(
                "a tenant is named `{DEFAULT_TENANT}`: that name is the unauthenticated mode's tenant (its \
                 requests carry no cache salt) and the engine-wide policy's; give the tenant another name"
            ));
        }
        for (token, tenant) in &merged.file_tokens {
            let other_role = if self.operator_token.as_ref() == Some(token) {
                Some("the operator's --admin-token")
            } else if keys.contains_key(token) {
                Some("an API key")
            } else {
                None
            };
            if let Some(role) = other_role {
                return Err(format!(
                    "[tenants.{tenant}] admin-tokens: a token is also {role}; give each role a token of its own"
                ));
            }
        }
        Ok(())
    }
}

/// The flags' keys, tokens and shares with the file's tenants added so far.
struct Merged {
    keys: HashMap<String, String>,
    admin_tokens: HashMap<String, String>,
    shares: HashMap<String, Share>,
    quotas: HashMap<String, Quotas>,
    /// The file's admin tokens, to name their place if one serves another role too.
    file_tokens: Vec<(String, String)>,
}

impl Merged {
    /// Adds one `[tenants.NAME]` section; its own step because each section is checked on its
    /// own (its name, then keys, tokens, share, quotas) and its errors name it.
    fn add_tenant(&mut self, tenant: String, section: TenantSection, defaults: Quotas) -> Result<(), String> {
        validate_tenant_name(&tenant).map_err(|e| format!("[tenants.{tenant}]: {e}"))?;
        let own = section.quotas();
        for key in section.api_keys {
            if key.is_empty() {
                return Err(format!("[tenants.{tenant}] api-keys: an API key is empty"));
            }
            if self.keys.insert(key, tenant.clone()).is_some() {
                return Err(format!(
                    "[tenants.{tenant}] api-keys: an API key is given more than once (flags or file)"
                ));
            }
        }
        for token in section.admin_tokens {
            if token.is_empty() {
                return Err(format!("[tenants.{tenant}] admin-tokens: a token is empty"));
            }
            self.file_tokens.push((token.clone(), tenant.clone()));
            if self.admin_tokens.insert(token, tenant.clone()).is_some() {
                return Err(format!(
                    "[tenants.{tenant}] admin-tokens: a token is given more than once (flags or file)"
                ));
            }
        }
        if let Some(share) = section.share {
            let share = share.share().map_err(|e| format!("[tenants.{tenant}] share: {e}"))?;
            if self.shares.insert(tenant.clone(), share).is_some() {
                return Err(format!(
                    "[tenants.{tenant}] share: the tenant has a --share flag too; give it in one place"
                ));
            }
        }
        if !own.is_empty() {
            let own = own.over(defaults, &format!("[tenants.{tenant}]"), LimitSource::FileTenant)?;
            self.quotas.insert(tenant, own);
        }
        Ok(())
    }
}

const NOT_AN_ANCHOR_HASH: &str = "not an anchor hash: write 16 hex digits, as the admin API's tenant stats list them";

/// An anchor hash as the admin API lists it: 16 hex digits. The error does not repeat the text:
/// in a config file it may be a secret on the wrong line.
pub fn parse_anchor_hash(text: &str) -> Result<u64, String> {
    if text.len() != 16 {
        return Err(NOT_AN_ANCHOR_HASH.into());
    }
    u64::from_str_radix(text, 16).map_err(|_| NOT_AN_ANCHOR_HASH.into())
}

/// The config file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// What the file should say differently (old key spellings, a file others may read), for the
    /// log; filled by [`ConfigFile::load`].
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// The file gives no API keys on purpose: every request is the unauthenticated `default`.
    #[serde(default)]
    pub unauthenticated: bool,
    /// `[defaults]`: every tenant's quotas, replacing the quota flags'; a tenant's own section
    /// overrides any of them.
    #[serde(default)]
    pub defaults: QuotaSection,
    /// `[tenants.NAME]`: each tenant's keys, admin tokens, share and quotas, by name.
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantSection>,
    /// `[public]`: what every tenant shares cache blocks for.
    #[serde(default)]
    pub public: PublicSection,
    /// `[serve]`: `agentrt serve`'s flags, by their long names ([`crate::config_flags`]); read
    /// once at start, before the tenants' tables.
    #[serde(default)]
    pub serve: Option<toml::Table>,
}

/// `[public]`: content every tenant may share cache blocks for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicSection {
    /// Anchor hashes (16 hex digits each) whose requests carry the public cache salt, added to
    /// `--public-anchor`'s.
    #[serde(default)]
    pub anchors: Vec<String>,
}

impl ConfigFile {
    /// Read ([`crate::tenant::config_file::read_settled`]: a settled regular file under the size cap)
    /// and parse `path`; the error names the file and, for a syntax or schema error, the line.
    /// It may wait for a file being written: call it off the async workers.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = crate::tenant::config_file::read_settled(path)?;
        Self::from_text(path, &text)
    }

    /// Parse `text`, read from the file at `path`; the error names the file.
    pub fn from_text(path: &Path, text: &str) -> Result<Self, String> {
        let mut file = Self::parse(text).map_err(|e| format!("{}: {e}", path.display()))?;
        file.warnings = crate::tenant::config_warnings::warnings(path, text);
        Ok(file)
    }

    /// Parse a config file's text. The error says where (line and column) and what kind of
    /// mistake, but never repeats a value of the file: the value may be a key or a token
    /// (serde's messages quote the value they could not use, e.g. `invalid type: string
    /// "sk-…"`), so every quoted word that is not one of the file's own field names is elided.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| {
            let place = e
                .span()
                .map(|span| {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("line {line}, column {column}: ")
                })
                .unwrap_or_default();
            format!("{place}{}", elide_values(e.message(), SCHEMA_WORDS))
        })
    }
}

/// The words of the file's schema: table and field names, the only quoted text an error keeps.
/// (`the_schema_words_are_every_field_name` keeps this list in step with the structs.)
pub const SCHEMA_WORDS: &[&str] = &[
    "unauthenticated",
    "serve",
    "defaults",
    "tenants",
    "public",
    "anchors",
    "api-keys",
    "admin-tokens",
    "share",
    "min-blocks",
    "max-blocks",
    "max-in-flight",
    "policy-cpu-ms-per-s",
    "warmup-tokens-per-s",
    "admission-weight",
    // The old spellings, still read (and listed by serde beside the new ones).
    "api_keys",
    "admin_tokens",
    "min_blocks",
    "max_blocks",
    "max_in_flight",
    "policy_cpu_ms_per_s",
    "warmup_tokens_per_s",
    "admission_weight",
];

/// `message` with the text inside every pair of `"` or `` ` `` elided (`…`), except words in
/// `keep` and lone punctuation (a parser's `expected `]``).
pub fn elide_values(message: &str, keep: &[&str]) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = rest.as_bytes()[open] as char;
        out.push_str(&rest[..=open]);
        let inner = &rest[open + 1..];
        // The closing quote; inside a string, `\"` is not one.
        let mut close = None;
        let mut escaped = false;
        for (i, c) in inner.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' && quote == '"' {
                escaped = true;
            } else if c == quote {
                close = Some(i);
                break;
            }
        }
        let Some(close) = close else {
            // An unpaired quote: nothing after it is shown.
            out.push('…');
            return out;
        };
        let quoted = &inner[..close];
        let punctuation = quoted.chars().count() <= 2 && quoted.chars().all(|c| c.is_ascii_punctuation());
        if keep.contains(&quoted) || punctuation {
            out.push_str(quoted);
        } else {
            out.push('…');
        }
        out.push(quote);
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

/// One `[tenants.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TenantSection {
    /// Bearer keys whose requests belong to this tenant; each key names one tenant only.
    #[serde(default, alias = "api_keys")]
    pub api_keys: Vec<String>,
    /// Admin tokens that act on this tenant's admin routes only.
    #[serde(default, alias = "admin_tokens")]
    pub admin_tokens: Vec<String>,
    /// The tenant's share of the engine's KV cache; not also a `--share` flag for it.
    pub share: Option<ShareSection>,
    // The quotas' fields, spelled out rather than `#[serde(flatten)]`: flattening loses the
    // position of an unknown field, and an error must say which line is wrong.
    /// Requests in flight ([`Quotas::max_in_flight`]); else `[defaults]`'.
    #[serde(alias = "max_in_flight")]
    pub max_in_flight: Option<u64>,
    /// Milliseconds of policy calls per second ([`Quotas::policy_cpu_ms_per_s`]); else
    /// `[defaults]`'.
    #[serde(alias = "policy_cpu_ms_per_s")]
    pub policy_cpu_ms_per_s: Option<u32>,
    /// Prompt tokens of warm-ups per second ([`Quotas::warmup_tokens_per_s`]); else `[defaults]`'.
    #[serde(alias = "warmup_tokens_per_s")]
    pub warmup_tokens_per_s: Option<u64>,
    /// Weight in the admission queue ([`Quotas::admission_weight`]); else `[defaults]`'.
    #[serde(alias = "admission_weight")]
    pub admission_weight: Option<u32>,
}

impl TenantSection {
    fn quotas(&self) -> QuotaSection {
        QuotaSection {
            max_in_flight: self.max_in_flight,
            policy_cpu_ms_per_s: self.policy_cpu_ms_per_s,
            warmup_tokens_per_s: self.warmup_tokens_per_s,
            admission_weight: self.admission_weight,
        }
    }
}

/// `share = { min-blocks = N, max-blocks = M }`; without `max-blocks` no limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ShareSection {
    /// Blocks of the engine's KV cache the tenant is guaranteed.
    #[serde(alias = "min_blocks")]
    pub min_blocks: u64,
    /// The tenant's limit in blocks: past it, its blocks are evicted first. At least
    /// `min-blocks`; without it, no limit.
    #[serde(alias = "max_blocks")]
    pub max_blocks: Option<u64>,
}

impl ShareSection {
    fn share(&self) -> Result<Share, String> {
        let text = match self.max_blocks {
            Some(max) => format!("{}:{max}", self.min_blocks),
            None => self.min_blocks.to_string(),
        };
        // One parser, one set of rules (min ≤ max), for the flag and the file.
        Share::parse(&text)
    }
}

/// Quotas as a file gives them: any may be left out.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct QuotaSection {
    /// Requests in flight ([`Quotas::max_in_flight`]).
    #[serde(alias = "max_in_flight")]
    pub max_in_flight: Option<u64>,
    /// Milliseconds of policy calls per second ([`Quotas::policy_cpu_ms_per_s`]).
    #[serde(alias = "policy_cpu_ms_per_s")]
    pub policy_cpu_ms_per_s: Option<u32>,
    /// Prompt tokens of warm-ups per second ([`Quotas::warmup_tokens_per_s`]).
    #[serde(alias = "warmup_tokens_per_s")]
    pub warmup_tokens_per_s: Option<u64>,
    /// Weight in the admission queue ([`Quotas::admission_weight`]); 1 to
    /// [`MAX_ADMISSION_WEIGHT`].
    #[serde(alias = "admission_weight")]
    pub admission_weight: Option<u32>,
}

impl QuotaSection {
    fn is_empty(&self) -> bool {
        self.max_in_flight.is_none()
            && self.policy_cpu_ms_per_s.is_none()
            && self.warmup_tokens_per_s.is_none()
            && self.admission_weight.is_none()
    }

    /// These quotas, the rest from `base`; `section` names the table in an error, `source` is
    /// where its `max-in-flight` is.
    fn over(&self, base: Quotas, section: &str, source: LimitSource) -> Result<Quotas, String> {
        let admission_weight = self.admission_weight.unwrap_or(base.admission_weight);
        if !(1..=MAX_ADMISSION_WEIGHT).contains(&admission_weight) {
            return Err(format!(
                "{section} admission-weight: must be from 1 to {MAX_ADMISSION_WEIGHT}, not {admission_weight}"
            ));
        }
        Ok(Quotas {
            max_in_flight: self.max_in_flight.unwrap_or(base.max_in_flight),
            max_in_flight_from: match self.max_in_flight {
                Some(_) => source,
                None => base.max_in_flight_from,
            },
            policy_cpu_ms_per_s: self.policy_cpu_ms_per_s.unwrap_or(base.policy_cpu_ms_per_s),
            warmup_tokens_per_s: self.warmup_tokens_per_s.unwrap_or(base.warmup_tokens_per_s),
            admission_weight,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[defaults]
max-in-flight = 256

[tenants.alpha]
api-keys = ["sk-alpha"]
admin-tokens = ["adm-alpha"]
share = { min-blocks = 400, max-blocks = 1200 }
warmup-tokens-per-s = 5000

[tenants.beta]
api-keys = ["sk-beta-1", "sk-beta-2"]
"#;

    fn flags() -> FlagSettings {
        FlagSettings {
            operator_token: Some("op".into()),
            ..FlagSettings::default()
        }
    }

    #[test]
    fn a_file_gives_keys_tokens_shares_and_quotas() {
        let settings = flags().merge(ConfigFile::parse(EXAMPLE).unwrap()).unwrap();
        assert_eq!(settings.keys.get("sk-beta-2").map(String::as_str), Some("beta"));
        assert_eq!(settings.keys.len(), 3);
        assert_eq!(
            settings.shares["alpha"],
            Share {
                min_blocks: 400,
                max_blocks: 1200
            }
        );
        let alpha = settings.quotas_of("alpha");
        assert_eq!(
            (alpha.max_in_flight, alpha.warmup_tokens_per_s),
            (256, 5000),
            "alpha: its own warm-up quota over the file's defaults"
        );
        assert_eq!(settings.quotas_of("beta").max_in_flight, 256);
        assert_eq!(
            settings.quotas_of("beta").policy_cpu_ms_per_s,
            Quotas::default().policy_cpu_ms_per_s,
            "what neither the file nor the flags set keeps its default"
        );
        assert!(settings.reachable("beta") && !settings.reachable("default"));
    }

    #[test]
    fn a_file_of_the_old_underscored_spelling_reads_the_same() {
        let old = EXAMPLE
            .replace("max-in-flight", "max_in_flight")
            .replace("api-keys", "api_keys")
            .replace("admin-tokens", "admin_tokens")
            .replace("min-blocks", "min_blocks")
            .replace("max-blocks", "max_blocks")
            .replace("warmup-tokens-per-s", "warmup_tokens_per_s");
        let new = flags().merge(ConfigFile::parse(EXAMPLE).unwrap()).unwrap();
        let old = flags().merge(ConfigFile::parse(&old).unwrap()).unwrap();
        assert_eq!(old.keys, new.keys);
        assert_eq!(old.shares, new.shares);
        assert_eq!(old.quotas_of("alpha"), new.quotas_of("alpha"));
        assert_eq!(old.quotas_of("beta"), new.quotas_of("beta"));
    }

    #[test]
    fn an_in_flight_limit_knows_where_it_was_set() {
        let file = "[defaults]\nmax-in-flight = 9\n[tenants.alpha]\napi-keys = [\"a\"]\nmax-in-flight = 3\n\
                    [tenants.beta]\napi-keys = [\"b\"]\n";
        let settings = flags().merge(ConfigFile::parse(file).unwrap()).unwrap();
        assert_eq!(settings.quotas_of("alpha").max_in_flight_from, LimitSource::FileTenant);
        assert_eq!(settings.quotas_of("beta").max_in_flight_from, LimitSource::FileDefaults);
        let flags_only = flags()
            .merge(ConfigFile::parse("[tenants.beta]\napi-keys = [\"b\"]\n").unwrap())
            .unwrap();
        assert_eq!(flags_only.quotas_of("beta").max_in_flight_from, LimitSource::Flag);
        assert_eq!(
            LimitSource::FileTenant.describe("alpha"),
            "`max-in-flight` in [tenants.alpha] of the --config file"
        );
    }

    #[test]
    fn errors_name_the_line_or_the_tenant_and_never_a_secret() {
        let unknown = ConfigFile::parse("[tenants.alpha]\napi_key = \"sk-secret\"\n").unwrap_err();
        assert!(
            unknown.starts_with("line 2, column 1: unknown field `…`, expected one of `api-keys`"),
            "{unknown}"
        );
        assert!(!unknown.contains("sk-secret"), "{unknown}");
        // serde quotes the value it could not use; the message keeps the place, not the value.
        let wrong_type = ConfigFile::parse("[tenants.alpha]\napi-keys = \"sk-secret\"\n").unwrap_err();
        assert!(
            wrong_type.starts_with("line 2, column 12: invalid type: string \"…\""),
            "{wrong_type}"
        );

        let twice = "[tenants.alpha]\napi-keys = [\"k\"]\n[tenants.beta]\napi-keys = [\"k\"]\n";
        let e = flags().merge(ConfigFile::parse(twice).unwrap()).unwrap_err();
        assert!(e.contains("[tenants.beta] api-keys") && !e.contains("\"k\""), "{e}");

        let bad_name = flags()
            .merge(ConfigFile::parse("[tenants.\"a b\"]\n").unwrap())
            .unwrap_err();
        assert!(bad_name.starts_with("[tenants.a b]"), "{bad_name}");

        let upside_down = "[tenants.alpha]\napi-keys = [\"k\"]\nshare = { min-blocks = 9, max-blocks = 3 }\n";
        let e = flags().merge(ConfigFile::parse(upside_down).unwrap()).unwrap_err();
        assert!(e.starts_with("[tenants.alpha] share:"), "{e}");

        let both = FlagSettings {
            shares: [("alpha".to_string(), Share::NONE)].into_iter().collect(),
            ..flags()
        };
        let e = both
            .merge(ConfigFile::parse("[tenants.alpha]\nshare = { min-blocks = 1 }\n").unwrap())
            .unwrap_err();
        assert!(e.contains("--share flag too"), "{e}");
    }

    #[test]
    fn the_schema_words_are_every_field_name() {
        // serde lists a table's fields when it meets an unknown one: every name it lists must be
        // kept in errors, and no name kept may be missing from the schema.
        let mut listed = Vec::new();
        for file in [
            "zz = 1\n",
            "[defaults]\nzz = 1\n",
            "[tenants.a]\nzz = 1\n",
            "[public]\nzz = 1\n",
            "[tenants.a]\nshare = { zz = 1 }\n",
        ] {
            let e = toml::from_str::<ConfigFile>(file).unwrap_err();
            let message = e.message().to_string();
            let expected = message
                .split_once("expected one of ")
                .or_else(|| message.split_once("expected "))
                .map(|(_, fields)| fields)
                .unwrap_or_else(|| panic!("{message}"));
            listed.extend(
                expected
                    .split([',', ' '])
                    .filter(|w| w.starts_with('`'))
                    .map(|w| w.trim_matches('`').to_string()),
            );
        }
        for word in &listed {
            assert!(
                SCHEMA_WORDS.contains(&word.as_str()),
                "{word} is a field name missing from SCHEMA_WORDS"
            );
        }
        for word in SCHEMA_WORDS {
            assert!(
                listed.iter().any(|w| w == word),
                "{word} is in SCHEMA_WORDS but no table has it"
            );
        }
    }

    #[test]
    fn elided_values_keep_field_names_and_punctuation() {
        let kept = elide_values(
            "unknown field `sk-1`, expected `api-keys` or `]`, got \"a\\\"b\"",
            SCHEMA_WORDS,
        );
        assert_eq!(kept, "unknown field `…`, expected `api-keys` or `]`, got \"…\"");
        assert_eq!(elide_values("unpaired `sk-secret", SCHEMA_WORDS), "unpaired `…");
    }

    #[test]
    fn public_anchors_come_from_flags_and_file_as_sixteen_hex_digits() {
        let both = FlagSettings {
            public_anchors: [7].into_iter().collect(),
            ..flags()
        };
        let file = "[public]\nanchors = [\"00000000000000ff\"]\n";
        let settings = both.merge(ConfigFile::parse(file).unwrap()).unwrap();
        assert_eq!(settings.public_anchors, [7, 255].into_iter().collect());
        let e = flags()
            .merge(ConfigFile::parse("[public]\nanchors = [\"00000000000000ff\", \"xyz\"]\n").unwrap())
            .unwrap_err();
        assert!(e.starts_with("[public] anchors[1]: not an anchor hash"), "{e}");
    }

    #[test]
    fn an_admin_token_must_name_a_tenant_requests_reach() {
        let file = "[tenants.alpha]\nadmin-tokens = [\"adm\"]\n";
        let e = flags().merge(ConfigFile::parse(file).unwrap()).unwrap_err();
        assert!(e.contains("`alpha` receives no requests"), "{e}");
    }
}
