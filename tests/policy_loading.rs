//! Loading: bad input fails with an error that names the problem; good input is compiled once and
//! then served from the artifact cache.

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
    assert!(err.contains("missing export `agentrt:policy/guest@0.2.0`"), "{err}");
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
    let (engine, cache) = engine();
    let path = component_path("lru");
    let first = engine.load_file(&path).unwrap();
    assert!(!first.load_stats().from_cache);
    let second = engine.load_file(&path).unwrap();
    assert!(second.load_stats().from_cache, "second load must come from the cache");
    assert_eq!(first.digest(), second.digest());

    // Corrupt every artifact: the next load recompiles instead of failing.
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let third = engine.load_file(&path).unwrap();
    assert!(!third.load_stats().from_cache);
    assert!(engine.load_file(&path).unwrap().load_stats().from_cache);
}

#[test]
fn the_world_shape_lists_imports_and_exports() {
    let (engine, _cache) = engine();
    let lru = load(&engine, "lru");
    let world = lru.world(engine.wasmtime());
    let (name, funcs) = &world.exports[0];
    assert_eq!(name, "agentrt:policy/guest@0.2.0");
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
