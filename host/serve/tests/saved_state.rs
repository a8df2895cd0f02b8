//! `--state-dir` with a real policy (CacheSage): a tenant's state saved by one `Tenants` comes back
//! whole in the next one — the policy's snapshot byte for byte, its agents under the same handles,
//! its live sessions — even when another tenant starts first and mints handles; a tenant whose
//! policy changed starts fresh.

use std::sync::Arc;

use agentrt_runtime::types::{Event, RequestArrival};
use agentrt_runtime::{PolicyRegistry, SlotConfig};
use agentrt_serve::identity::Identity;
use agentrt_serve::tenant::reload::initial_settings;
use agentrt_serve::tenant::saved_state::StateDir;
use agentrt_serve::tenant::settings::FlagSettings;
use agentrt_serve::tenant::Tenants;

/// Tenants on `policy`, keeping their state in `dir`, as `serve --state-dir` starts them.
fn tenants(policy: &str, dir: &std::path::Path) -> (Tenants, tempfile::TempDir) {
    let (engine, cache) = agentrt_tests::engine();
    let component = agentrt_tests::load(&engine, policy);
    let flags = FlagSettings {
        keys: [("ka", "alpha"), ("kb", "beta")]
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .into(),
        ..FlagSettings::default()
    };
    let (settings, _) = initial_settings(None, flags, agentrt_serve::config_flags::check_serve_table).unwrap();
    let tenants = Tenants::new(PolicyRegistry::new(engine), component, SlotConfig::new(""), settings)
        .with_state_dir(StateDir::open(dir).unwrap());
    (tenants, cache)
}

fn agent(name: &str, session: u64) -> Identity {
    Identity {
        agent_name: name.to_string(),
        anchor_hash: 7,
        anchor_tokens: 100,
        session_key: format!("s{session}"),
        session,
        prompt_tokens: 300,
    }
}

/// A planner → coder → tester workflow in 30 sessions, told to the tenant's policy.
fn teach(tenant: &agentrt_serve::tenant::Tenant) {
    let mut request_id = 0;
    for session in 1..=30u64 {
        for name in ["planner", "coder", "tester"] {
            let identity = agent(name, session);
            let (handle, registration) = tenant.agents.intern(&identity);
            tenant.agents.record_session(session);
            let mut events: Vec<Event> = registration.into_iter().collect();
            request_id += 1;
            events.push(Event::RequestArrival(RequestArrival {
                request_id,
                agent: handle,
                session,
                anchor_hash: identity.anchor_hash,
                prompt_tokens: 300,
                continues: None,
                warmup: false,
                at_us: request_id * 1000,
            }));
            tenant.policy.observe(&events).unwrap();
        }
    }
}

#[test]
fn a_tenants_state_comes_back_whole_and_its_handles_stay_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _cache) = tenants("cachesage", dir.path());
    let alpha = first.get_or_start("alpha").unwrap();
    teach(&alpha);
    let snapshot = alpha.policy.snapshot().unwrap();
    let agents = alpha.agents.named_agents();
    assert_eq!(agents.len(), 3);
    let saved = first.save_state().expect("a state directory");
    assert_eq!((saved.tenants, saved.snapshots, saved.failed), (1, 1, 0));
    drop((alpha, first));

    let (second, _cache) = tenants("cachesage", dir.path());
    // Beta starts first and mints new agents: none may take alpha's saved handles.
    let beta = second.get_or_start("beta").unwrap();
    let beta_handles: Vec<u32> = (0..5)
        .map(|i| beta.agents.intern(&agent(&format!("b{i}"), 1)).0)
        .collect();
    let alpha = second.get_or_start("alpha").unwrap();
    assert_eq!(
        alpha.agents.named_agents(),
        agents,
        "the same agents under the same handles"
    );
    for (handle, _) in &agents {
        assert!(!beta_handles.contains(handle), "beta took alpha's handle {handle}");
        assert_eq!(second.handles().owner(*handle).as_deref(), Some("alpha"));
    }
    assert_eq!(alpha.agents.live_sessions(), 30);
    assert_eq!(
        alpha.policy.snapshot().unwrap(),
        snapshot,
        "the policy's state, byte for byte"
    );
    let (_, registration) = alpha.agents.intern(&agent("coder", 31));
    assert!(registration.is_none(), "a restored agent is known: not announced again");
}

#[test]
fn a_tenant_whose_policy_changed_starts_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _cache) = tenants("cachesage", dir.path());
    teach(&first.get_or_start("alpha").unwrap());
    first.save_state().unwrap();
    drop(first);
    let (second, _cache) = tenants("lru", dir.path());
    let alpha = second.get_or_start("alpha").unwrap();
    let fresh = {
        let (engine, _c) = agentrt_tests::engine();
        let lru = agentrt_tests::load(&engine, "lru");
        let policy = agentrt_runtime::PolicyHandle::start(&engine, lru, SlotConfig::new("x")).unwrap();
        Arc::new(policy).snapshot().unwrap()
    };
    assert_eq!(alpha.policy.snapshot().unwrap(), fresh, "LRU starts as a fresh LRU");
    assert_eq!(alpha.agents.agents(), 3, "the agents it knew come back all the same");
}
