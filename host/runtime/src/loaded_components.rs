//! Compiled components this process already holds, kept by digest, so that loading one again — a
//! second tenant on a policy another tenant runs, a reload of an unchanged file, a swap back to
//! the module before — is a table lookup rather than a deserialize.
//!
//! Why: a load from the on-disk artifact cache costs ~0.7 ms, two thirds of it wasmtime copying
//! the artifact into fresh executable memory and faulting it in (docs/performance.md), and no
//! cheaper way to read an artifact is also safe (a mapped file truncated under the host kills it
//! with SIGBUS). A `Component` is immutable compiled code: every slot instantiates it into a store
//! of its own, so sharing one between loads and tenants shares no state. The key is the BLAKE3
//! digest of the component's bytes, the same key as the artifact cache's: one tenant cannot make
//! another's load resolve to other code.
//!
//! Bounded by the size of the compiled code kept, most recently used first: a Rust policy
//! compiles to well under a megabyte, a Python or JavaScript one to tens. A component still in use
//! by a slot costs nothing extra to keep; one no slot runs any more holds its code mapped until it
//! is pushed out.

use std::sync::Mutex;

use wasmtime::component::Component;

/// Compiled components by digest, the most recently used last, within a byte budget.
pub(crate) struct LoadedComponents {
    limit_bytes: usize,
    table: Mutex<Vec<Kept>>,
}

struct Kept {
    digest: String,
    component: Component,
    code_bytes: usize,
}

impl LoadedComponents {
    /// An empty table keeping at most `limit_bytes` of compiled code; 0 keeps nothing.
    pub(crate) fn new(limit_bytes: usize) -> Self {
        Self {
            limit_bytes,
            table: Mutex::new(Vec::new()),
        }
    }

    /// The component compiled from bytes with `digest`, if it is kept; it becomes the most
    /// recently used.
    pub(crate) fn get(&self, digest: &str) -> Option<Component> {
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let at = table.iter().position(|kept| kept.digest == digest)?;
        let kept = table.remove(at);
        let component = kept.component.clone();
        table.push(kept);
        Some(component)
    }

    /// Keep `component` (compiled from bytes with `digest`), pushing out the least recently used
    /// until the kept code fits the budget. A component larger than the whole budget is not kept.
    pub(crate) fn put(&self, digest: &str, component: &Component) {
        let range = component.image_range();
        let code_bytes = (range.end as usize).saturating_sub(range.start as usize);
        if code_bytes > self.limit_bytes {
            return;
        }
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        table.retain(|kept| kept.digest != digest);
        let mut total: usize = table.iter().map(|kept| kept.code_bytes).sum();
        while total + code_bytes > self.limit_bytes && !table.is_empty() {
            total -= table.remove(0).code_bytes;
        }
        table.push(Kept {
            digest: digest.to_string(),
            component: component.clone(),
            code_bytes,
        });
    }

    /// How many components are kept and their compiled code's size in bytes.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let table = self.table.lock().unwrap();
        (table.len(), table.iter().map(|kept| kept.code_bytes).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::Engine;

    /// Three distinct empty components (a custom section tells their bytes apart), each with the
    /// digest it is kept under.
    fn components(engine: &Engine) -> Vec<(String, Component)> {
        (0..3u8)
            .map(|i| {
                // Preamble of a component (magic, version 0x0d, layer 1), then custom section
                // "t" holding `i`.
                let bytes = [
                    0x00, b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00, 0x00, 0x03, 0x01, b't', i,
                ];
                let component = Component::new(engine, bytes).unwrap();
                assert!(code_bytes(&component) > 0, "an empty component still has an image");
                (format!("digest-{i}"), component)
            })
            .collect()
    }

    fn code_bytes(component: &Component) -> usize {
        let range = component.image_range();
        range.end as usize - range.start as usize
    }

    #[test]
    fn a_kept_component_is_found_by_digest_and_others_are_not() {
        let engine = Engine::default();
        let all = components(&engine);
        let kept = LoadedComponents::new(usize::MAX);
        kept.put(&all[0].0, &all[0].1);
        let found = kept.get("digest-0").expect("kept");
        assert_eq!(
            found.image_range(),
            all[0].1.image_range(),
            "the same compiled code, not a copy"
        );
        assert!(kept.get("digest-1").is_none());
    }

    #[test]
    fn the_budget_pushes_out_the_least_recently_used() {
        let engine = Engine::default();
        let all = components(&engine);
        let one = code_bytes(&all[0].1)
            .max(code_bytes(&all[1].1))
            .max(code_bytes(&all[2].1));
        // Room for two of the three.
        let kept = LoadedComponents::new(2 * one);
        kept.put(&all[0].0, &all[0].1);
        kept.put(&all[1].0, &all[1].1);
        assert!(kept.get("digest-0").is_some(), "0 is now the most recently used");
        kept.put(&all[2].0, &all[2].1);
        assert!(kept.get("digest-1").is_none(), "1 was the least recently used");
        assert!(kept.get("digest-0").is_some() && kept.get("digest-2").is_some());
        let (count, bytes) = kept.held();
        assert_eq!(count, 2);
        assert!(bytes <= 2 * one);
    }

    #[test]
    fn a_zero_budget_keeps_nothing_and_a_second_put_does_not_double_count() {
        let engine = Engine::default();
        let all = components(&engine);
        let none = LoadedComponents::new(0);
        none.put(&all[0].0, &all[0].1);
        assert!(none.get("digest-0").is_none());

        let kept = LoadedComponents::new(usize::MAX);
        kept.put(&all[0].0, &all[0].1);
        kept.put(&all[0].0, &all[0].1);
        assert_eq!(kept.held(), (1, code_bytes(&all[0].1)));
    }
}
