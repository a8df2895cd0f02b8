//! The host's items as the SDK's native types, for running a policy natively beside its Wasm build
//! on the same input (the bench's native-vs-Wasm group and `host_phase score-cachesage-native`).

use agentrt_runtime::types::Item;

/// `items` as the SDK's items: every one a GPU-tier KV block, as the Wasm side is given them.
pub fn native_items(items: &[Item]) -> Vec<agentrt_sdk::Item> {
    items
        .iter()
        .map(|i| agentrt_sdk::Item {
            kind: agentrt_sdk::ItemKind::KvBlock,
            key: i.key,
            agent: i.agent,
            session: i.session,
            last_access: i.last_access,
            tokens: i.tokens,
            position: i.position,
            tier: agentrt_sdk::Tier::Gpu,
        })
        .collect()
}
