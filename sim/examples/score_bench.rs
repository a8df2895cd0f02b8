use agentrt_runtime::types::{Item, ItemKind};
use agentrt_sim::harness::PolicyHost;
use agentrt_sim::policies::Rerank;
use std::time::Instant;
fn main() {
    let host = PolicyHost::new(None).unwrap();
    for name in ["lru", "ttl", "cachesage"] {
        let p = host.start(name, name, &[], 16, Rerank::EveryStep).unwrap();
        for n in [1024usize, 24_000] {
            let items: Vec<Item> = (0..n as u64)
                .map(|i| Item {
                    kind: ItemKind::KvBlock,
                    key: i * 7919,
                    agent: (i % 5) as u32,
                    session: i % 300,
                    last_access: i,
                    tokens: 16,
                    position: 0,
                })
                .collect();
            let h = p.handle();
            h.score(&items).unwrap();
            let t = Instant::now();
            for _ in 0..20 {
                h.score(&items).unwrap();
            }
            let per = t.elapsed().as_secs_f64() / 20.0;
            println!(
                "{name} {n}: {:.3} ms/call, {:.1} ns/item",
                per * 1e3,
                per * 1e9 / n as f64
            );
        }
    }
}
