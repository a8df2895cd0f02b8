//! Loading: bad input fails with an error that names the problem; good input is compiled once and
//! then served from the artifact cache.

use agentrt_runtime::CONTRACT;
use agentrt_tests::*;

fn load_error(bytes: &[u8]) -> String {
    let (engine, _cache) = engine();
    match engine.load_bytes("input.wasm", bytes) {
        Ok(_) => panic!("loaded invalid input"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_core_module_is_refused_as_not_a_component() {
    // The smallest valid core module: magic + version 1.
    let err = load_error(b"\0asm\x01\0\0\0");
    assert!(err.starts_with("input.wasm: "), "{err}");
    assert!(err.contains("core WebAssembly module, not a component"), "{err}");
}

#[test]
fn another_world_is_refused_naming_the_missing_export() {
    let err = load_error(&component_bytes("other-world"));
    let guest = CONTRACT.replace(":policy@", ":policy/guest@");
    assert!(err.contains(&format!("missing export `{guest}`")), "{err}");
    assert!(err.contains("`greet`"), "says what it exports instead: {err}");
}

#[test]
fn an_empty_component_is_refused() {
    let err = load_error(b"\0asm\x0d\0\x01\0");
    assert!(err.contains("missing export"), "{err}");
}

#[test]
fn truncated_bytes_are_refused() {
    let bytes = component_bytes("lru");
    let err = load_error(&bytes[..bytes.len() / 2]);
    assert!(err.contains("not a valid component"), "{err}");
    let err = load_error(&bytes[..5]);
    assert!(err.contains("truncated"), "{err}");
}

/// A component of the previous line still loads, and hears what it always heard: every session
/// end as `session-end(session-id)` whatever its reason, no waits or handoffs, blocks of both
/// tiers (0.3 knows the host tier).
#[test]
fn a_0_3_component_loads_and_hears_what_it_heard() {
    use agentrt_runtime::compat::ContractLine;
    use agentrt_runtime::types::*;
    let (engine, _cache) = engine();
    let component = load(&engine, "contract-0-3");
    assert_eq!(component.contract_line(), ContractLine::V0_3);
    let policy = agentrt_runtime::PolicyHandle::start(&engine, component, agentrt_runtime::SlotConfig::new("t/kv"))
        .expect("a 0.3 component starts");
    let end = |session, reason| {
        Event::SessionEnd(SessionEnd {
            session,
            reason,
            at_us: 5,
        })
    };
    let block = |tier| {
        Event::Block(BlockEvent {
            op: BlockOp::Stored,
            agent: 1,
            block_hash: 9,
            parent_hash: 0,
            position: 0,
            tier,
        })
    };
    policy
        .observe(&[
            register(1, "planner", 0xaaaa),
            end(1, EndReason::Closed),
            Event::SessionWait(SessionWait {
                session: 2,
                agent: 1,
                kind: WaitKind::Tool,
                tool: 3,
                expected_us: 0,
                hinted: false,
                at_us: 5,
            }),
            Event::Handoff(Handoff {
                session: 2,
                from_agent: 1,
                to_agent: 1,
                at_us: 5,
            }),
            end(2, EndReason::Idle),
            end(3, EndReason::Evicted),
            block(Tier::Gpu),
            block(Tier::Host),
        ])
        .unwrap();
    let heard = String::from_utf8(policy.snapshot().unwrap()).unwrap();
    assert_eq!(heard, "agent-registered 1\nblock 2\nsession-end 3\n");
}

/// A component of the oldest line the host loads (0.2, before the KV tier) hears of the GPU tier
/// only — its block events are left out, typed and packed — and its share of a host-tier ranking
/// is answered by the host (score 0: the host pool's own order, everything stored), so it behaves
/// on a two-tier engine exactly as on a one-tier one.
#[test]
fn a_0_2_component_hears_only_the_gpu_tier() {
    use agentrt_runtime::compat::ContractLine;
    use agentrt_runtime::types::{BlockEvent, BlockOp, Event, Item, ItemKind, RequestArrival, Tier};
    let (engine, _cache) = engine();
    let component = load(&engine, "contract-0-2");
    assert_eq!(component.contract_line(), ContractLine::V0_2);
    let start = || {
        agentrt_runtime::PolicyHandle::start(&engine, component.clone(), agentrt_runtime::SlotConfig::new("t/kv"))
            .expect("a 0.2 component starts")
    };
    // Two instances on the same trace; the second also hears host-tier events, typed and packed.
    let (plain, told) = (start(), start());
    let block = |tier, hash| {
        Event::Block(BlockEvent {
            op: BlockOp::Touched,
            agent: 3,
            block_hash: hash,
            parent_hash: 0,
            position: 16,
            tier,
        })
    };
    for step in 1..=20 {
        let arrival = Event::RequestArrival(RequestArrival {
            request_id: step,
            agent: 1,
            session: 1,
            anchor_hash: 7,
            prompt_tokens: 64,
            continues: None,
            warmup: false,
            at_us: step,
        });
        let gpu = agentrt_sdk::packed::words(1, 0, 1, 16, step, 0);
        plain.observe(&[arrival.clone(), block(Tier::Gpu, step)]).unwrap();
        plain.observe_blocks(&gpu).unwrap();
        told.observe(&[arrival, block(Tier::Gpu, step), block(Tier::Host, 1000 + step)])
            .unwrap();
        let mut words = agentrt_sdk::packed::words(1, 1, 3, 16, 2000 + step, 0).to_vec();
        words.extend(gpu);
        told.observe_blocks(&words).unwrap();
    }
    let heard = String::from_utf8(told.snapshot().unwrap()).unwrap();
    assert_eq!(heard, String::from_utf8(plain.snapshot().unwrap()).unwrap());
    assert_eq!(heard, "block 20\npacked-block 20\nrequest-arrival 20\n");

    // A mixed batch: the GPU items score as the guest scores them alone (last access + 1); the
    // host-tier ones 0, without a call.
    let item = |key, tier| Item {
        kind: ItemKind::KvBlock,
        key,
        agent: 1,
        session: 1,
        last_access: key * 10,
        tokens: 16,
        position: 0,
        tier,
    };
    let mixed: Vec<Item> = (1..=8)
        .map(|k| item(k, if k % 2 == 0 { Tier::Host } else { Tier::Gpu }))
        .collect();
    let scores = told.score(&mixed).unwrap();
    let want: Vec<f32> = mixed
        .iter()
        .map(|i| {
            if i.tier == Tier::Host {
                0.0
            } else {
                i.last_access as f32 + 1.0
            }
        })
        .collect();
    assert_eq!(scores, want);
    assert_eq!(
        told.metrics().calls(agentrt_runtime::Primitive::Score),
        1,
        "one call, for the GPU items"
    );
}

/// A component of the 0.4 line loads under the 0.5 host and hears everything but what 0.5 added:
/// no `engine-capacity` (packed kind 10), and it is never asked to score `session` items (item
/// kind 3) — they score 0 without a call, beside the items it does score.
#[test]
fn a_0_4_component_loads_hears_no_engine_capacity_and_scores_no_sessions() {
    use agentrt_runtime::compat::ContractLine;
    use agentrt_runtime::types::*;
    let (engine, _cache) = engine();
    let component = load(&engine, "contract-0-4");
    assert_eq!(component.contract_line(), ContractLine::V0_4);
    let policy = agentrt_runtime::PolicyHandle::start(&engine, component, agentrt_runtime::SlotConfig::new("t/adm"))
        .expect("a 0.4 component starts");
    policy
        .observe(&[
            register(1, "planner", 0xaaaa),
            Event::EngineCapacity(EngineCapacity {
                capacity_tokens: 1000,
                resident_tokens: 900,
                resident_sessions: 2,
                held_sessions: 1,
                prefill_us_per_ktoken: 35_000,
                decode_step_us: 25_000,
                at_us: 5,
            }),
            Event::SessionWait(SessionWait {
                session: 2,
                agent: 1,
                kind: WaitKind::Tool,
                tool: 3,
                expected_us: 0,
                hinted: false,
                at_us: 5,
            }),
        ])
        .unwrap();
    let item = |kind, key| Item {
        kind,
        key,
        agent: 1,
        session: key,
        last_access: 0,
        tokens: 16,
        position: 0,
        tier: Tier::Gpu,
    };
    let scores = policy
        .score(&[
            item(ItemKind::KvBlock, 1),
            item(ItemKind::Session, 2),
            item(ItemKind::Request, 3),
        ])
        .unwrap();
    assert_eq!(
        scores,
        vec![1.0, 0.0, 1.0],
        "the session scores 0, the others are the guest's"
    );
    let heard = String::from_utf8(policy.snapshot().unwrap()).unwrap();
    assert_eq!(heard, "agent-registered 1\nitem-0 1\nitem-1 1\npacked-8 1\n");
}

#[test]
fn non_wasm_is_refused() {
    let err = load_error(b"#!/bin/sh\necho hello\n");
    assert!(err.contains("not a WebAssembly binary"), "{err}");
}

#[test]
fn a_missing_file_names_the_path() {
    let (engine, _cache) = engine();
    let err = engine
        .load_file("/nonexistent/policy.wasm".as_ref())
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        err.contains("/nonexistent/policy.wasm") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn bad_config_is_rejected_by_name() {
    let (engine, _cache) = engine();
    let component = load(&engine, "probe");
    let config = agentrt_runtime::SlotConfig::new("t/probe").with_init([("bais", "1")]);
    let err = agentrt_runtime::PolicyHandle::start(&engine, component, config)
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("rejected init") && err.contains("bais"), "{err}");
}

#[test]
fn compiled_artifacts_are_cached_and_damage_is_survived() {
    use agentrt_runtime::{EngineOptions, LoadSource, PolicyEngine};
    let (engine, cache) = engine();
    let path = component_path("lru");
    let first = engine.load_file(&path).unwrap();
    assert_eq!(first.load_stats().source, LoadSource::Compiled);
    // The same process loading it again finds the compiled code it already holds.
    let second = engine.load_file(&path).unwrap();
    assert_eq!(second.load_stats().source, LoadSource::InMemory);
    assert_eq!(first.digest(), second.digest());

    // Another process (an engine of its own on the same folder) reads the artifact.
    let on_disk = |keep_compiled_bytes| {
        PolicyEngine::new(EngineOptions {
            cache_dir: Some(cache.path().to_path_buf()),
            keep_compiled_bytes,
            ..EngineOptions::default()
        })
        .unwrap()
    };
    let restarted = on_disk(agentrt_runtime::DEFAULT_KEEP_COMPILED_BYTES);
    let third = restarted.load_file(&path).unwrap();
    assert_eq!(third.load_stats().source, LoadSource::ArtifactCache);
    assert_eq!(third.digest(), first.digest());
    // Keeping nothing in memory, every load reads the artifact.
    let keeps_nothing = on_disk(0);
    for _ in 0..2 {
        assert_eq!(
            keeps_nothing.load_file(&path).unwrap().load_stats().source,
            LoadSource::ArtifactCache
        );
    }

    // Corrupt every artifact: the next load recompiles instead of failing.
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let after_damage = keeps_nothing.load_file(&path).unwrap();
    assert_eq!(after_damage.load_stats().source, LoadSource::Compiled);
    assert_eq!(
        keeps_nothing.load_file(&path).unwrap().load_stats().source,
        LoadSource::ArtifactCache
    );
}

#[test]
fn the_world_shape_lists_imports_and_exports() {
    let (engine, _cache) = engine();
    let lru = load(&engine, "lru");
    let world = lru.world(engine.wasmtime());
    let (name, funcs) = &world.exports[0];
    assert_eq!(name, &CONTRACT.replace(":policy@", ":policy/guest@"));
    for f in [
        "info",
        "init",
        "observe",
        "observe-blocks",
        "score",
        "predict",
        "act",
        "snapshot",
        "restore",
    ] {
        assert!(funcs.iter().any(|g| g == f), "missing {f} in {funcs:?}");
    }
    assert!(
        world.imports.iter().all(|(n, _)| n.starts_with("agentrt:policy/")),
        "{:?}",
        world.imports
    );
}

fn engine_with_max_component_bytes(limit: u64) -> (agentrt_runtime::PolicyEngine, tempfile::TempDir) {
    let cache = tempfile::tempdir().expect("temp dir");
    let engine = agentrt_runtime::PolicyEngine::new(agentrt_runtime::EngineOptions {
        pooling: None,
        cache_dir: Some(cache.path().to_path_buf()),
        max_component_bytes: limit,
        ..agentrt_runtime::EngineOptions::default()
    })
    .expect("engine");
    (engine, cache)
}

#[test]
fn an_endless_file_is_refused_at_the_default_limit_not_read_to_the_end() {
    // `agentrt policy check /dev/zero` once read 22 GB before failing.
    let (engine, _cache) = engine_with_max_component_bytes(agentrt_runtime::DEFAULT_MAX_COMPONENT_BYTES);
    let err = engine
        .load_file("/dev/zero".as_ref())
        .err()
        .expect("refused")
        .to_string();
    assert_eq!(
        err,
        format!(
            "/dev/zero: larger than the {}-byte limit on component files; not loaded",
            agentrt_runtime::DEFAULT_MAX_COMPONENT_BYTES
        )
    );
}

#[test]
fn a_component_file_over_the_limit_is_refused_naming_the_path_and_the_limit() {
    let path = component_path("lru");
    let size = std::fs::metadata(&path).unwrap().len();
    let (engine, _cache) = engine_with_max_component_bytes(size - 1);
    let err = engine.load_file(&path).err().expect("refused").to_string();
    assert!(
        err.contains(&path.display().to_string()) && err.contains(&format!("{}-byte limit", size - 1)),
        "{err}"
    );
    // The same bytes handed over directly (an admin upload) meet the same limit.
    let err = engine
        .load_bytes("upload", &std::fs::read(&path).unwrap())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.starts_with("upload: ") && err.contains("limit"), "{err}");
    // At the limit it loads.
    let (engine, _cache) = engine_with_max_component_bytes(size);
    assert!(engine.load_file(&path).is_ok());
}

/// The default limits fit every supported language: a JavaScript policy's heap settles near
/// 65 MiB. Under the default cap and the default instance pool (`EngineOptions::default()`), a
/// policy holding 100 MiB starts, answers and is measured; under a 64 MiB cap it does not start.
#[test]
fn the_default_cap_and_pool_hold_a_policy_of_100_mib() {
    use agentrt_runtime::{EngineOptions, PolicyEngine, PolicyError, PolicyHandle, SandboxLimits, SlotConfig};
    let cache = tempfile::tempdir().unwrap();
    let engine = PolicyEngine::new(EngineOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..EngineOptions::default()
    })
    .unwrap();
    let probe = std::sync::Arc::new(engine.load_file(&component_path("probe")).unwrap());
    let holding = |limits: SandboxLimits| {
        let slot = SlotConfig::new("test/probe")
            .with_init([("hold_mib", "100")])
            .with_limits(limits);
        PolicyHandle::start(&engine, probe.clone(), slot)
    };
    // Filling 100 MiB takes longer than the serving deadline on a loaded machine; the memory
    // cap under test is the default one.
    let generous = SandboxLimits {
        call_deadline: std::time::Duration::from_secs(5),
        ..SandboxLimits::default()
    };
    assert_eq!(generous.memory_bytes, 128 << 20);
    let big = holding(generous.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(big.score(&[block_item(1, 1, 1)]).unwrap(), vec![1.0]);
    let bytes = big.metrics().memory_bytes();
    assert!((100 << 20..128 << 20).contains(&bytes), "{} MiB", bytes >> 20);

    let small = holding(SandboxLimits {
        memory_bytes: 64 << 20,
        ..generous
    });
    assert!(
        matches!(small, Err(PolicyError::OutOfMemory { .. })),
        "{:?}",
        small.err()
    );
}

/// `bytes` with a custom section appended that brings it to `len` bytes (a component may carry
/// custom sections anywhere at its top level; they change the digest, not the code).
fn padded_to(mut bytes: Vec<u8>, len: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                break;
            }
        }
    }
    let name = b"pad";
    // Section id, size (5-byte LEB, so the size is known up front), name, payload.
    let overhead = 1 + 5 + 1 + name.len();
    let payload = len
        .checked_sub(bytes.len() + overhead)
        .expect("room for the pad section");
    bytes.push(0);
    let size = 1 + name.len() + payload;
    bytes.extend([(size & 0x7f) as u8 | 0x80, ((size >> 7) & 0x7f) as u8 | 0x80]);
    bytes.extend([((size >> 14) & 0x7f) as u8 | 0x80, ((size >> 21) & 0x7f) as u8 | 0x80]);
    bytes.push(((size >> 28) & 0x7f) as u8);
    leb(name.len(), &mut bytes);
    bytes.extend(name);
    bytes.resize(len, 0);
    bytes
}

#[test]
fn a_component_rewritten_in_place_is_never_served_its_old_artifact() {
    let (engine, _cache) = engine();
    let (lru, ttl) = (component_bytes("lru"), component_bytes("ttl"));
    let len = lru.len().max(ttl.len()) + 64;
    let (old, new) = (padded_to(lru, len), padded_to(ttl, len));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, &old).unwrap();
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    // A file's digest is remembered only once the file has settled (2 s; module docs of
    // agentrt_runtime's file_digest): wait, so that the loads below go through the memo.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let first = engine.load_file(&path).unwrap();
    let again = engine.load_file(&path).unwrap();
    assert!(again.load_stats().from_cache());
    assert_eq!(first.digest(), again.digest());
    assert_eq!(
        first.world(engine.wasmtime()).exports,
        again.world(engine.wasmtime()).exports
    );

    // Same path, same size, the modification time put back: other bytes, another policy.
    std::fs::write(&path, &new).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), old.len() as u64);
    let swapped = engine.load_file(&path).unwrap();
    let expected = engine.load_bytes("new", &new).unwrap();
    assert_ne!(swapped.digest(), first.digest(), "served the old component's artifact");
    assert_eq!(swapped.digest(), expected.digest());
}

#[test]
fn a_perf_map_names_the_guests_compiled_functions() {
    use agentrt_runtime::{EngineOptions, PolicyEngine};
    let cache = tempfile::tempdir().unwrap();
    let engine = PolicyEngine::new(EngineOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        perf_map: true,
        ..EngineOptions::default()
    })
    .unwrap();
    engine.load_file(&component_path("lru")).unwrap();
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", std::process::id()));
    let lines = std::fs::read_to_string(&map).expect("the perf map is written");
    let _ = std::fs::remove_file(&map);
    // perf's format: start address, size (hex), name. The built component is stripped, so its
    // functions are named by module and index (`wasm[0]::function[3]`), not by their source names.
    let functions: Vec<(&str, u64)> = lines
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let (start, size, name) = (fields.next()?, fields.next()?, fields.next()?);
            assert!(start.starts_with("0x"), "{line}");
            name.contains("::function[")
                .then(|| (name, u64::from_str_radix(size, 16).unwrap()))
        })
        .collect();
    assert!(functions.len() >= 10, "the guest's functions are listed:\n{lines}");
    assert!(functions.iter().all(|(_, size)| *size > 0), "{functions:?}");
}
