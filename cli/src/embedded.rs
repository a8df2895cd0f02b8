//! The built-in policy components this binary carries: those of
//! [`agentrt_layout::EMBEDDED_COMPONENTS`] that were built when it was (build.rs embeds them).
//! The component lookup tries them after the folders an operator controls.

include!(concat!(env!("OUT_DIR"), "/embedded_components.rs"));

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use agentrt_layout::{component_file_name, EMBEDDED_COMPONENTS};
    use agentrt_runtime::{ComponentSource, EngineOptions, PolicyEngine, PolicyHandle, SlotConfig};

    use super::EMBEDDED;

    /// The build embeds exactly the built-in components that were built, the bytes they have on
    /// disk now (the build reran when they changed), and each loads, validates and starts through
    /// the engine's size-limited path.
    #[test]
    fn every_built_builtin_component_is_embedded_current_and_starts() {
        let built_from = Path::new(EMBEDDED.built_from);
        let built: Vec<&str> = EMBEDDED_COMPONENTS
            .into_iter()
            .filter(|name| built_from.join(component_file_name(name)).is_file())
            .collect();
        let embedded: Vec<&str> = EMBEDDED.components.iter().map(|c| c.name).collect();
        assert_eq!(embedded, built, "components in {}", built_from.display());
        if embedded.is_empty() {
            eprintln!(
                "no built-in component was built in {} before this test: nothing embedded to load (`cargo xtask test` builds them first)",
                built_from.display()
            );
            return;
        }
        // No artifact cache: the test writes nothing outside the process.
        let engine = PolicyEngine::new(EngineOptions {
            cache_dir: None,
            ..EngineOptions::default()
        })
        .expect("engine");
        for component in EMBEDDED.components {
            let on_disk = std::fs::read(built_from.join(component_file_name(component.name))).expect("reading");
            assert!(component.bytes == on_disk.as_slice(), "{} is stale", component.name);
            let loaded = ComponentSource::Embedded(*component)
                .load(&engine)
                .unwrap_or_else(|e| panic!("{e}"));
            let policy = PolicyHandle::start(&engine, Arc::new(loaded), SlotConfig::new(component.name))
                .unwrap_or_else(|e| panic!("{}: {e}", component.name));
            assert!(!policy.info().name.is_empty(), "{} names itself", component.name);
        }
    }
}
