//! `agentrt policy check FILE.wasm`: other tools and scripts rely on its exit status (0 = a valid
//! policy this host can run) and on the first line of its output (`ok: NAME VERSION`).

use std::path::PathBuf;
use std::sync::Arc;

use agentrt_runtime::{EngineOptions, LoadSource, PolicyEngine, PolicyHandle, SlotConfig, SlowCompileNotice};
use anyhow::Context;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The component file.
    file: PathBuf,
    /// `key=value` pairs to pass to the policy's `init` (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
}

pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let engine = PolicyEngine::new(EngineOptions {
        slow_compile: Some(SlowCompileNotice::stderr()),
        ..EngineOptions::default()
    })?;
    let component = Arc::new(engine.load_file(&args.file)?);
    let init = parse_pairs(&args.config)?;
    let config = SlotConfig {
        init,
        ..SlotConfig::new(args.file.display().to_string())
    };
    let policy = PolicyHandle::start(&engine, component.clone(), config)
        .with_context(|| format!("{}: loads, but does not start", args.file.display()))?;
    let info = policy.info();
    let stats = component.load_stats();
    println!("ok: {} {}", info.name, info.version);
    println!("  {}", info.description);
    println!(
        "  file:     {} ({} bytes, blake3 {})",
        args.file.display(),
        component.size_bytes(),
        component.digest()
    );
    println!(
        "  compiled: {:.1} ms ({})",
        stats.elapsed.as_secs_f64() * 1e3,
        match stats.source {
            LoadSource::Compiled => "compiled now, cached".to_string(),
            other => other.to_string(),
        }
    );
    let world = component.world(engine.wasmtime());
    println!("  world:    {}", implemented_contract(&world.exports));
    for (name, funcs) in &world.imports {
        println!("  import    {name}: {}", functions(funcs));
    }
    for (name, funcs) in &world.exports {
        if name.starts_with("agentrt:policy/") {
            println!("  export    {name}: {}", functions(funcs));
        } else {
            // Toolchains add exports of their own (componentize-py's `exports.init`); the host
            // never calls them, and a reader must not take them for the policy's.
            println!(
                "  other     {name}: {} (the toolchain's; the host does not call it)",
                functions(funcs)
            );
        }
    }
    Ok(())
}

/// Which version of the contract the component implements, from its guest export.
fn implemented_contract(exports: &[(String, Vec<String>)]) -> String {
    let guest = exports
        .iter()
        .find_map(|(name, _)| name.strip_prefix("agentrt:policy/guest@"));
    crate::describe::contract(guest)
}

/// An interface's functions, or what it is when it has none (a types-only interface).
fn functions(funcs: &[String]) -> String {
    if funcs.is_empty() {
        "types only".to_string()
    } else {
        funcs.join(", ")
    }
}

pub(crate) fn parse_pairs(raw: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    raw.iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--config {kv:?}: expected KEY=VALUE"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::CONTRACT;

    fn export(name: &str) -> (String, Vec<String>) {
        (name.to_string(), vec!["init".to_string()])
    }

    #[test]
    fn the_world_line_names_the_contract_the_component_implements_not_the_hosts() {
        let newest = CONTRACT.trim_start_matches("agentrt:policy@");
        let current = [export(&format!("agentrt:policy/guest@{newest}"))];
        assert_eq!(implemented_contract(&current), CONTRACT);
        // A Python component: componentize-py's own export first, then the guest of 0.2.0.
        let older = [export("exports"), export("agentrt:policy/guest@0.2.0")];
        let line = implemented_contract(&older);
        assert!(line.starts_with("agentrt:policy@0.2.0 (an older contract"), "{line}");
        assert!(implemented_contract(&[export("exports")]).starts_with("no agentrt:policy guest export"));
        assert_eq!(functions(&[]), "types only");
    }
}
