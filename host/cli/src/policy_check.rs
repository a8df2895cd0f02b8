//! `agentrt policy check FILE.wasm`: other tools and scripts rely on its exit status (0 = a valid
//! policy this host can run) and on the first line of its output (`ok: NAME VERSION`).

use std::path::PathBuf;
use std::sync::Arc;

use agentrt_runtime::{EngineOptions, PolicyEngine, PolicyHandle, SlotConfig, SlowCompileNotice, CONTRACT};
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
        if stats.from_cache {
            "from the artifact cache"
        } else {
            "compiled now, cached"
        }
    );
    println!("  world:    agentrt:policy/policy ({CONTRACT})");
    let world = component.world(engine.wasmtime());
    for (name, funcs) in &world.imports {
        println!("  import    {name}: {}", funcs.join(", "));
    }
    for (name, funcs) in &world.exports {
        println!("  export    {name}: {}", funcs.join(", "));
    }
    Ok(())
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
