//! Between steps: the policy's side effects carried out (warm-ups become real requests), and
//! the engine's load reported to it.

use super::*;

impl Sim<'_> {
    pub(super) fn carry_out_side_effects(&mut self) {
        self.report_load();
        for effect in self.policy.act() {
            match effect {
                SideEffect::WarmPrefix(w) => self.warm(w.agent, w.anchor_hash),
                SideEffect::SetPriority(p) if self.cfg.engine_priorities => {
                    // What `serve --engine-priorities` sends: only demotions.
                    self.result.priorities_set += 1;
                    if p.priority < 0 {
                        self.session_priority.insert(p.session, p.priority.saturating_neg());
                    } else {
                        self.session_priority.remove(&p.session);
                    }
                }
                _ => self.result.effects_ignored += 1,
            }
        }
    }

    /// Tell the policy the engine's load (`engine-load`) when it changed since the last report, so
    /// that it can hold side effects back while requests wait (a warm-up's prefill would delay
    /// them).
    pub(super) fn report_load(&mut self) {
        let load = (self.queue_depth() as u32, self.running.len() as u32);
        if self.reported_load == Some(load) {
            return;
        }
        self.reported_load = Some(load);
        self.tell(Event::EngineLoad(EngineLoad {
            queue_depth: load.0,
            running: load.1,
            free_blocks: self.kv.pool.num_free() as u32,
            total_blocks: self.kv.pool.num_blocks() as u32,
            at_us: us(self.now_ns),
        }));
    }

    /// Issue a warm-up for an agent's anchor unless one is in flight or the anchor is resident.
    pub(super) fn warm(&mut self, agent: u32, anchor_hash: u64) {
        let found = self
            .trace
            .agent(agent)
            .filter(|a| anchor_hash == 0 || a.anchor_hash == anchor_hash)
            .or_else(|| {
                self.trace
                    .agents
                    .iter()
                    .find(|a| a.anchor_hash == anchor_hash && anchor_hash != 0)
            });
        let Some(a) = found else {
            self.result.warmups_skipped += 1;
            return;
        };
        let handle = a.handle;
        let resident = self.kv.pool.longest_hit(&a.anchor_blocks, a.anchor_blocks.len()).len() == a.anchor_blocks.len();
        if self.warmup_in_flight[handle as usize] || resident || a.anchor_blocks.is_empty() {
            self.result.warmups_skipped += 1;
            return;
        }
        self.warmup_in_flight[handle as usize] = true;
        self.result.warmups += 1;
        self.warmed.push(handle);
        let session = crate::tokens::hash_str(&format!("warmup/{}", a.name));
        let kv = SeqKv::new(
            a.warmup.tokens,
            a.warmup.hashes.clone(),
            a.warmup.tail.clone(),
            handle,
            session,
        );
        self.arrive(Req {
            origin: Origin::Warmup(handle),
            kv,
            prompt_tokens: a.warmup.tokens,
            output_target: 1,
            generated: 0,
            arrival_ns: self.now_ns,
            offered_ns: self.now_ns,
            scheduled_ns: None,
            first_token_ns: None,
            admitted_once: false,
            hit_tokens: 0,
            agent: handle,
            anchor_hash: a.anchor_hash,
            session: None,
            priority: 0,
            host_tokens: 0,
            load_started_ns: 0,
        });
    }
}
