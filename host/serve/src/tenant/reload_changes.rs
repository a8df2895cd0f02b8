//! What a reload changed, in words for the operator's log and the reload's answer: tenants added
//! and removed, API keys and admin tokens added or revoked (counted, never shown), cache shares,
//! quotas and public anchors. Secrets are compared, never written.

use std::collections::{BTreeMap, BTreeSet};

use crate::tenant::quotas::Quotas;
use crate::tenant::settings::TenantSettings;

/// Each change from `old` to `new`, one phrase each, tenants in name order; empty when the two
/// give the same settings.
pub fn changes(old: &TenantSettings, new: &TenantSettings) -> Vec<String> {
    let mut out = Vec::new();
    let (old_keys, new_keys) = (keys_by_tenant(old), keys_by_tenant(new));
    let (old_tokens, new_tokens) = (
        secrets_by_tenant(old.admin.tenant_tokens()),
        secrets_by_tenant(new.admin.tenant_tokens()),
    );
    let tenants: BTreeSet<&str> = old_keys.keys().chain(new_keys.keys()).copied().collect();
    for tenant in tenants {
        match (old_keys.get(tenant), new_keys.get(tenant)) {
            (None, Some(keys)) => out.push(format!("tenant {tenant} added ({})", count(keys.len(), "API key"))),
            (Some(_), None) => out.push(format!("tenant {tenant} removed (its keys revoked)")),
            (Some(before), Some(after)) => out.extend(secret_change(tenant, "API key", before, after)),
            (None, None) => {}
        }
    }
    let admins: BTreeSet<&str> = old_tokens.keys().chain(new_tokens.keys()).copied().collect();
    let none = BTreeSet::new();
    for tenant in admins {
        let before = old_tokens.get(tenant).unwrap_or(&none);
        let after = new_tokens.get(tenant).unwrap_or(&none);
        out.extend(secret_change(tenant, "admin token", before, after));
    }
    out.extend(quota_changes("defaults", &old.defaults, &new.defaults));
    let named: BTreeSet<&String> = old.quotas.keys().chain(new.quotas.keys()).collect();
    for tenant in named {
        out.extend(quota_changes(tenant, &old.quotas_of(tenant), &new.quotas_of(tenant)));
    }
    let shared: BTreeSet<&String> = old.shares.keys().chain(new.shares.keys()).collect();
    for tenant in shared {
        let show = |s: Option<&agentrt_runtime::Share>| {
            s.map_or("none".to_string(), |s| match s.max_blocks {
                u64::MAX => format!("{}+ blocks", s.min_blocks),
                max => format!("{}–{max} blocks", s.min_blocks),
            })
        };
        let (before, after) = (old.shares.get(tenant), new.shares.get(tenant));
        if before != after {
            out.push(format!("{tenant}: cache share {} → {}", show(before), show(after)));
        }
    }
    let added = new.public_anchors.difference(&old.public_anchors).count();
    let removed = old.public_anchors.difference(&new.public_anchors).count();
    if added + removed > 0 {
        out.push(format!("public anchors: {added} added, {removed} removed"));
    }
    out
}

fn keys_by_tenant(settings: &TenantSettings) -> BTreeMap<&str, BTreeSet<&str>> {
    secrets_by_tenant(
        settings
            .keys
            .iter()
            .map(|(key, tenant)| (key.as_str(), tenant.as_str())),
    )
}

fn secrets_by_tenant<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut by_tenant: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (secret, tenant) in pairs {
        by_tenant.entry(tenant).or_default().insert(secret);
    }
    by_tenant
}

fn secret_change(tenant: &str, what: &str, before: &BTreeSet<&str>, after: &BTreeSet<&str>) -> Option<String> {
    let added = after.difference(before).count();
    let revoked = before.difference(after).count();
    match (added, revoked) {
        (0, 0) => None,
        (added, 0) => Some(format!("{tenant}: {} added", count(added, what))),
        (0, revoked) => Some(format!("{tenant}: {} revoked", count(revoked, what))),
        (added, revoked) => Some(format!("{tenant}: {} added, {revoked} revoked", count(added, what))),
    }
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn quota_changes(whose: &str, before: &Quotas, after: &Quotas) -> Vec<String> {
    let fields: [(&str, u64, u64); 4] = [
        ("max-in-flight", before.max_in_flight, after.max_in_flight),
        (
            "policy-cpu-ms-per-s",
            before.policy_cpu_ms_per_s.into(),
            after.policy_cpu_ms_per_s.into(),
        ),
        (
            "warmup-tokens-per-s",
            before.warmup_tokens_per_s,
            after.warmup_tokens_per_s,
        ),
        (
            "admission-weight",
            before.admission_weight.into(),
            after.admission_weight.into(),
        ),
    ];
    fields
        .iter()
        .filter(|(_, a, b)| a != b)
        .map(|(name, a, b)| format!("{whose}: {name} {a} → {b}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::settings::{ConfigFile, FlagSettings};

    fn settings(file: &str) -> TenantSettings {
        FlagSettings::default().merge(ConfigFile::parse(file).unwrap()).unwrap()
    }

    #[test]
    fn a_reload_is_described_without_a_secret() {
        let before = settings(
            "[tenants.alpha]\napi-keys = [\"sk-a1\"]\nadmin-tokens = [\"adm-a\"]\n\
             [tenants.gone]\napi-keys = [\"sk-g\"]\n",
        );
        let after = settings(
            "[defaults]\nmax-in-flight = 7\n[public]\nanchors = [\"00000000000000ff\"]\n\
             [tenants.alpha]\napi-keys = [\"sk-a2\", \"sk-a3\"]\nmax-in-flight = 3\n\
             [tenants.beta]\napi-keys = [\"sk-b\"]\n",
        );
        let said = changes(&before, &after);
        assert_eq!(
            said,
            [
                "alpha: 2 API keys added, 1 revoked",
                "tenant beta added (1 API key)",
                "tenant gone removed (its keys revoked)",
                "alpha: 1 admin token revoked",
                "defaults: max-in-flight 1024 → 7",
                "alpha: max-in-flight 1024 → 3",
                "public anchors: 1 added, 0 removed",
            ]
        );
        assert!(said.iter().all(|s| !s.contains("sk-") && !s.contains("adm-")));
        assert!(changes(&after, &after).is_empty());
    }
}
