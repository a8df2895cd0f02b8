//! Which contract a built component speaks, read from its exports without compiling it: what
//! `agentrt policy build` prints beside the component it wrote.

use std::path::Path;

use anyhow::{Context, Result};
use wit_component::DecodedWasm;

/// The guest interface every policy exports, without its version.
const GUEST: &str = "agentrt:policy/guest";

/// The version of `agentrt:policy/guest` the component at `path` exports (`0.5.0`), or `None` when
/// it exports no such interface.
pub fn guest_version(path: &Path) -> Result<Option<String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let DecodedWasm::Component(resolve, world) =
        wit_component::decode(&bytes).with_context(|| format!("{}: not a component", path.display()))?
    else {
        return Ok(None);
    };
    Ok(resolve.worlds[world].exports.values().find_map(|item| match item {
        wit_parser::WorldItem::Interface { id, .. } => resolve
            .id_of(*id)
            .and_then(|name| name.strip_prefix(GUEST)?.strip_prefix('@').map(str::to_string)),
        _ => None,
    }))
}
