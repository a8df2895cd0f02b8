//! Turning a core Wasm module into a policy component (wit-component's encoder), written only
//! when it changed: every language's build ends here.

use std::path::Path;

use anyhow::{Context, Result};
use wit_component::ComponentEncoder;

/// Turn a core module carrying wit-bindgen's component-type section into a component. An
/// unchanged component is not written again: the `agentrt` binary embeds some of them and is
/// rebuilt whenever one's modification time changes.
pub fn encode_component(core: &Path, out: &Path) -> Result<()> {
    let module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
    encode_module(&module, &[], out).with_context(|| format!("{}: not a policy module", core.display()))
}

/// [`encode_component`] for a module in memory, with `adapters` (name, core module) satisfying
/// imports of that module name (the Go policies' WASI stub).
pub fn encode_module(module: &[u8], adapters: &[(&str, &[u8])], out: &Path) -> Result<()> {
    let mut encoder = ComponentEncoder::default();
    encoder.validate(true).module(module)?;
    for (name, adapter) in adapters {
        encoder.adapter(name, adapter)?;
    }
    let component = encoder.encode().context("encoding a component")?;
    if std::fs::read(out).is_ok_and(|existing| existing == component) {
        return Ok(());
    }
    let tmp = out.with_extension("wasm.tmp");
    std::fs::write(&tmp, component)?;
    std::fs::rename(&tmp, out)?;
    Ok(())
}
