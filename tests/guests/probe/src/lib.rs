//! TEST FIXTURE — not a policy to deploy.
//!
//! `probe` makes every primitive's output a checkable function of its input and state, so host
//! tests can prove that values round-trip through the component boundary; and it misbehaves on
//! cue, so tests can cause the faults a real policy might have:
//!
//! - `score` with an item whose key is [`LOOP_KEY`] never returns (CPU deadline);
//! - `observe` of a tool call whose tool is [`GROW_TOOL`] allocates without bound (memory cap);
//! - `predict(PANIC_HORIZON)` panics (a trap);
//! - `observe` of an agent registered under the name [`TRAP_AGENT`] panics (a trap mid-request);
//! - `observe` of an agent registered under the name [`LOG_FLOOD_AGENT`] logs
//!   [`LOG_FLOOD_LINES`] lines, each trying to forge a host log line with a newline;
//! - once an agent named [`SICK_AGENT`] is registered, `observe` panics on every registration,
//!   arrival or finish of *another* agent (a policy broken for good by its traffic: the
//!   registration is replayed on every restart, and its own request still goes through);
//! - once an agent named [`SLOW_AGENT`] is registered, `observe` spends [`SLOW_OBSERVE_US`] on
//!   every event (by the host's clock), under the default 20 ms deadline: a policy that is slow
//!   but never fails, so no breaker stops it;
//! - once an agent named [`SNAPSHOT_LOOP_AGENT`] is registered, `snapshot` never returns (while
//!   every other primitive keeps working);
//! - once an agent named [`ACT_FLOOD_AGENT`] / [`LONG_STRING_AGENT`] / [`PREDICT_FLOOD_AGENT`] /
//!   [`SNAPSHOT_FLOOD_AGENT`] is registered, `act` returns [`FLOOD_LEN`] side effects / a deny
//!   reason of [`LONG_STRING_BYTES`], `predict` [`FLOOD_LEN`] forecasts, `snapshot`
//!   [`SNAPSHOT_FLOOD_BYTES`] bytes.
//!
//! And it is broken from the start when `init` is given `fault=NAME` (one of [`FAULTS`]), for the
//! conformance kit (`agentrt policy test`) and the simulator to catch:
//!
//! - `score-spin`: `score` never returns (on any non-empty batch);
//! - `short-score`: `score` returns one score fewer than it was given items;
//! - `observe-trap`: `observe` panics on any event, typed or packed;
//! - `restore-trap`: `restore` panics on bytes that are not a probe snapshot, instead of
//!   returning an error;
//! - `clock-scores`: scores depend on the host's clock (two instances fed alike disagree);
//! - `lossy-snapshot`: `restore` drops the event count, so snapshot → restore → snapshot differs;
//! - `init-trap`: `init` panics on a key it does not know, instead of returning an error;
//! - `late-trap`: `observe` panics on the instance's `trap_at`th request arrival (default
//!   [`DEFAULT_TRAP_AT`]): a policy that passes a short stream and fails after a while.
//!
//! It also keeps what it heard of sessions' lives (0.4.0), in its snapshot (version 3): the
//! sessions ended as `closed`, every `session-wait` and every `handoff`, the first
//! [`MAX_LIFECYCLE_RECORDS`] of each, so host tests can check what the proxy told it.
//!
//! `hold_mib=N` makes `init` allocate and keep N MiB (for memory-cap tests); `burn=N` makes every
//! `score` of a non-empty batch first run N iterations of a loop: a fixed amount of CPU work, for
//! tests of what a call is charged.

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{
    info, BlockEvent, BlockOp, Config, Deny, Event, Forecast, ForecastKind, Hedge, Item, Pin, Policy, PolicyInfo,
    Preload, SetPriority, SideEffect, WarmPrefix,
};

pub const LOOP_KEY: u64 = 0xdead_1007;
pub const GROW_TOOL: u64 = 0x6120_3000;
pub const PANIC_HORIZON: u32 = 666;
pub const TRAP_AGENT: &str = "probe-trap";
pub const LOG_FLOOD_AGENT: &str = "probe-log-flood";
pub const LOG_FLOOD_LINES: u32 = 1000;
pub const SICK_AGENT: &str = "probe-sick";
pub const SLOW_AGENT: &str = "probe-slow";
pub const SLOW_OBSERVE_US: u64 = 15_000;
pub const SNAPSHOT_LOOP_AGENT: &str = "probe-snapshot-loop";
pub const ACT_FLOOD_AGENT: &str = "probe-act-flood";
pub const LONG_STRING_AGENT: &str = "probe-long-string";
pub const PREDICT_FLOOD_AGENT: &str = "probe-predict-flood";
pub const SNAPSHOT_FLOOD_AGENT: &str = "probe-snapshot-flood";
pub const FLOOD_LEN: usize = 100_000;
pub const LONG_STRING_BYTES: usize = 1 << 20;
pub const SNAPSHOT_FLOOD_BYTES: usize = 20 << 20;
pub const DEFAULT_TRAP_AT: u64 = 300;
/// Most records of each lifecycle kind the probe keeps.
pub const MAX_LIFECYCLE_RECORDS: usize = 256;
pub const FAULTS: [&str; 8] = [
    "score-spin",
    "short-score",
    "observe-trap",
    "restore-trap",
    "clock-scores",
    "lossy-snapshot",
    "init-trap",
    "late-trap",
];
const MAGIC: [u8; 4] = *b"PRB1";

/// Everything the probe has seen.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Probe {
    /// (agent handle, anchor hash) in registration order.
    pub agents: Vec<(u32, u64)>,
    pub events: u64,
    pub prompt_tokens: u64,
    /// Sum of `continues.shared-tokens` over arrivals: what the host said calls carried forward.
    pub continued_tokens: u64,
    /// Stored, touched, removed, cleared.
    pub blocks: [u64; 4],
    pub block_hash_sum: u64,
    /// A config value, to show `init` ran.
    pub bias: f32,
    /// Names of the misbehaviour cues registered (not part of the snapshot).
    pub cues: Vec<String>,
    /// The handle of the [`SICK_AGENT`], once registered.
    pub sick_agent: Option<u32>,
    /// The `fault` it was configured with (not part of the snapshot).
    pub fault: Option<String>,
    /// Memory held for `hold_mib` (not part of the snapshot).
    pub held: Vec<u8>,
    /// Request arrivals this instance observed (not part of the snapshot), and the one it traps on
    /// with `fault=late-trap`.
    pub arrivals: u64,
    pub trap_at: u64,
    /// Loop iterations each `score` of a non-empty batch runs first (`burn`; not part of the snapshot).
    pub burn: u64,
    /// Sessions heard ended as `closed`, in order.
    pub closed: Vec<u64>,
    /// Session ends for other reasons (idle, evicted).
    pub other_ends: u64,
    /// Every `session-wait`: (session, agent, kind: 0 tool / 1 user, tool hash, expected-us, hinted).
    pub waits: Vec<(u64, u32, u8, u64, u64, bool)>,
    /// Every `handoff`: (session, from-agent, to-agent).
    pub handoffs: Vec<(u64, u32, u32)>,
}

impl Probe {
    fn cued(&self, name: &str) -> bool {
        self.cues.iter().any(|c| c == name)
    }

    fn faulty(&self, fault: &str) -> bool {
        self.fault.as_deref() == Some(fault)
    }
}

impl Policy for Probe {
    fn info() -> PolicyInfo {
        info("probe", "TEST FIXTURE: echoes inputs, misbehaves on cue")
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        const KEYS: [&str; 5] = ["bias", "burn", "fault", "hold_mib", "trap_at"];
        if config.get("fault") == Some("init-trap") {
            if let Some((key, _)) = config.pairs().iter().find(|(k, _)| !KEYS.contains(&k.as_str())) {
                panic!("probe was told to trap on an unknown key ({key})");
            }
        }
        config.expect_only(&KEYS)?;
        self.bias = config.parse_or("bias", 0.0)?;
        if let Some(fault) = config.get("fault") {
            if !FAULTS.contains(&fault) {
                return Err(format!("unknown fault {fault:?}; known: {}", FAULTS.join(", ")));
            }
            self.fault = Some(fault.to_string());
        }
        self.trap_at = config.parse_or("trap_at", DEFAULT_TRAP_AT)?;
        self.burn = config.parse_or("burn", 0)?;
        let hold_mib: usize = config.parse_or("hold_mib", 0)?;
        self.held = vec![1; hold_mib << 20];
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        assert!(!self.faulty("observe-trap"), "probe was configured to trap in observe");
        if let Some(sick) = self.sick_agent {
            let agent = match event {
                Event::AgentRegistered(a) => Some(a.agent),
                Event::RequestArrival(r) => Some(r.agent),
                Event::RequestFinish(f) => Some(f.agent),
                _ => None,
            };
            assert!(agent.is_none_or(|a| a == sick), "probe is sick");
        }
        self.events += 1;
        if self.cued(SLOW_AGENT) {
            let start = agentrt_sdk::host::now_us();
            while agentrt_sdk::host::now_us().saturating_sub(start) < SLOW_OBSERVE_US {
                core::hint::spin_loop();
            }
        }
        match event {
            Event::AgentRegistered(a) if a.name == TRAP_AGENT => panic!("probe was told to trap"),
            Event::AgentRegistered(a) if a.name == LOG_FLOOD_AGENT => {
                for i in 0..LOG_FLOOD_LINES {
                    let forged = format!("probe line {i}\nERROR agentrt_serve: forged by the policy");
                    agentrt_sdk::host::log(agentrt_sdk::LogLevel::Warn, &forged);
                }
            }
            Event::AgentRegistered(a) => {
                if a.name.starts_with("probe-") {
                    self.cues.push(a.name.clone());
                }
                if a.name == SICK_AGENT {
                    // Not among the agents `act` warms: warm-ups would be successful calls.
                    self.sick_agent = Some(a.agent);
                    return;
                }
                self.agents.push((a.agent, a.anchor_hash))
            }
            Event::RequestArrival(r) => {
                self.arrivals += 1;
                assert!(
                    !(self.faulty("late-trap") && self.arrivals == self.trap_at),
                    "probe was configured to trap on request {}",
                    self.trap_at
                );
                self.prompt_tokens += u64::from(r.prompt_tokens);
                self.continued_tokens += r.continues.map_or(0, |c| u64::from(c.shared_tokens));
            }
            Event::SessionEnd(e) if e.reason != agentrt_sdk::EndReason::Closed => self.other_ends += 1,
            Event::SessionEnd(e) if self.closed.len() < MAX_LIFECYCLE_RECORDS => self.closed.push(e.session),
            Event::SessionWait(w) if self.waits.len() < MAX_LIFECYCLE_RECORDS => {
                let kind = match w.kind {
                    agentrt_sdk::WaitKind::Tool => 0,
                    agentrt_sdk::WaitKind::User => 1,
                };
                self.waits
                    .push((w.session, w.agent, kind, w.tool, w.expected_us, w.hinted));
            }
            Event::Handoff(h) if self.handoffs.len() < MAX_LIFECYCLE_RECORDS => {
                self.handoffs.push((h.session, h.from_agent, h.to_agent));
            }
            Event::ToolCall(t) if t.tool == GROW_TOOL => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    core::hint::black_box(&hoard);
                }
            }
            _ => {}
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        assert!(!self.faulty("observe-trap"), "probe was configured to trap in observe");
        let i = match block.op {
            BlockOp::Stored => 0,
            BlockOp::Touched => 1,
            BlockOp::Removed => 2,
            BlockOp::AllCleared => 3,
        };
        self.blocks[i] += 1;
        self.block_hash_sum = self.block_hash_sum.wrapping_add(block.block_hash);
    }

    /// score = key + bias: any reordering or loss across the boundary shows.
    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        if items.iter().any(|i| i.key == LOOP_KEY) || (self.faulty("score-spin") && !items.is_empty()) {
            let mut spins = 0u64;
            loop {
                spins = core::hint::black_box(spins.wrapping_add(1));
            }
        }
        if !items.is_empty() {
            let mut sum = 0u64;
            for i in 0..self.burn {
                sum = core::hint::black_box(sum.wrapping_add(i));
            }
        }
        let mut scores: Vec<f32> = if self.faulty("clock-scores") {
            // The clock alone (µs, exact in an f32 for 16 s): added to a key it would round away.
            let now = (agentrt_sdk::host::now_us() % (1 << 24)) as f32;
            items.iter().map(|_| now).collect()
        } else {
            items.iter().map(|i| i.key as f32 + self.bias).collect()
        };
        if self.faulty("short-score") {
            scores.pop();
        }
        scores
    }

    /// One next-agent forecast per registered agent, uniform.
    fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        assert!(horizon != PANIC_HORIZON, "probe was told to panic");
        if self.cued(PREDICT_FLOOD_AGENT) {
            return vec![
                Forecast {
                    kind: ForecastKind::NextAgent,
                    session: 0,
                    agent: 0,
                    subject: 0,
                    probability: 0.0,
                    steps: horizon,
                };
                FLOOD_LEN
            ];
        }
        let p = 1.0 / self.agents.len().max(1) as f32;
        self.agents
            .iter()
            .map(|&(agent, anchor)| Forecast {
                kind: ForecastKind::NextAgent,
                session: 0,
                agent,
                subject: anchor,
                probability: p,
                steps: horizon,
            })
            .collect()
    }

    /// One side effect of every kind, each carrying a value derived from state.
    fn act(&mut self) -> Vec<SideEffect> {
        if self.cued(ACT_FLOOD_AGENT) {
            let pin = Pin {
                agent: 1,
                session: 1,
                ttl_ms: 1,
            };
            return vec![SideEffect::Pin(pin); FLOOD_LEN];
        }
        if self.cued(LONG_STRING_AGENT) {
            return vec![SideEffect::Deny(Deny {
                session: 1,
                reason: "x".repeat(LONG_STRING_BYTES),
            })];
        }
        let (agent, anchor) = self.agents.last().copied().unwrap_or((0, 0));
        vec![
            SideEffect::WarmPrefix(WarmPrefix {
                agent,
                anchor_hash: anchor,
                probability: 0.5,
            }),
            SideEffect::Pin(Pin {
                agent,
                session: 7,
                ttl_ms: 1000,
            }),
            SideEffect::Unpin(Pin {
                agent,
                session: 7,
                ttl_ms: 0,
            }),
            SideEffect::Preload(Preload {
                model: format!("model-{}", self.events),
                probability: 0.25,
            }),
            SideEffect::Hedge(Hedge {
                session: 7,
                agent,
                probability: 0.75,
            }),
            SideEffect::SetPriority(SetPriority {
                session: 7,
                priority: -(self.events as i32),
            }),
            SideEffect::Deny(Deny {
                session: 9,
                reason: format!("saw {} events", self.events),
            }),
        ]
    }

    fn snapshot(&self) -> Vec<u8> {
        if self.cued(SNAPSHOT_LOOP_AGENT) {
            let mut spins = 0u64;
            loop {
                spins = core::hint::black_box(spins.wrapping_add(1));
            }
        }
        if self.cued(SNAPSHOT_FLOOD_AGENT) {
            return vec![7; SNAPSHOT_FLOOD_BYTES];
        }
        let mut w = Writer::new(MAGIC, 3);
        w.u32(self.agents.len() as u32);
        for &(agent, anchor) in &self.agents {
            w.u32(agent).u64(anchor);
        }
        w.u64(self.events).u64(self.prompt_tokens);
        for b in self.blocks {
            w.u64(b);
        }
        w.u64(self.block_hash_sum).f32(self.bias).u64(self.continued_tokens);
        w.u32(self.closed.len() as u32);
        for &session in &self.closed {
            w.u64(session);
        }
        w.u64(self.other_ends).u32(self.waits.len() as u32);
        for &(session, agent, kind, tool, expected_us, hinted) in &self.waits {
            w.u64(session)
                .u32(agent)
                .u8(kind)
                .u64(tool)
                .u64(expected_us)
                .u8(u8::from(hinted));
        }
        w.u32(self.handoffs.len() as u32);
        for &(session, from, to) in &self.handoffs {
            w.u64(session).u32(from).u32(to);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let read = Reader::new(state, MAGIC);
        if self.faulty("restore-trap") {
            if let Err(e) = &read {
                panic!("probe was configured to trap on a bad snapshot ({e})");
            }
        }
        let (mut r, version) = read?;
        let mut next = Probe::default();
        for _ in 0..r.u32()? {
            next.agents.push((r.u32()?, r.u64()?));
        }
        next.events = r.u64()?;
        next.prompt_tokens = r.u64()?;
        for b in &mut next.blocks {
            *b = r.u64()?;
        }
        next.block_hash_sum = r.u64()?;
        next.bias = r.f32()?;
        if version >= 2 {
            next.continued_tokens = r.u64()?;
        }
        if version >= 3 {
            restore_lifecycle(&mut r, &mut next)?;
        }
        r.finish()?;
        // Configuration, not state: the instance keeps its own.
        next.fault = self.fault.take();
        next.held = std::mem::take(&mut self.held);
        next.trap_at = self.trap_at;
        next.burn = self.burn;
        next.arrivals = self.arrivals;
        if next.faulty("lossy-snapshot") {
            next.events = 0;
        }
        *self = next;
        Ok(())
    }
}

/// The lifecycle records of a version-3 snapshot.
fn restore_lifecycle(r: &mut Reader<'_>, next: &mut Probe) -> Result<(), String> {
    for _ in 0..r.u32()?.min(MAX_LIFECYCLE_RECORDS as u32) {
        next.closed.push(r.u64()?);
    }
    next.other_ends = r.u64()?;
    for _ in 0..r.u32()?.min(MAX_LIFECYCLE_RECORDS as u32) {
        next.waits
            .push((r.u64()?, r.u32()?, r.u8()?, r.u64()?, r.u64()?, r.u8()? != 0));
    }
    for _ in 0..r.u32()?.min(MAX_LIFECYCLE_RECORDS as u32) {
        next.handoffs.push((r.u64()?, r.u32()?, r.u32()?));
    }
    Ok(())
}

agentrt_sdk::export_policy!(Probe);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::Harness;
    use agentrt_sdk::AgentRegistered;

    #[test]
    fn snapshot_round_trips_natively() {
        let mut h = Harness::<Probe>::new([("bias", "0.5")]).unwrap();
        h.observe(&[Event::AgentRegistered(AgentRegistered {
            agent: 3,
            name: "coder".into(),
            anchor_hash: 42,
            anchor_tokens: 10,
        })]);
        h.observe_blocks(&[BlockEvent {
            op: BlockOp::Touched,
            agent: 3,
            block_hash: 9,
            parent_hash: 0,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        }]);
        h.observe(&[
            agentrt_sdk::testing::session_end_for(5, agentrt_sdk::EndReason::Closed),
            agentrt_sdk::testing::session_end(6),
        ]);
        assert_eq!((h.policy().closed.clone(), h.policy().other_ends), (vec![5], 1));
        let snap = h.snapshot();
        let mut other = Harness::<Probe>::new([]).unwrap();
        other.restore(&snap).unwrap();
        assert_eq!(other.policy(), h.policy());
        assert!(other.restore(&snap[..snap.len() - 1]).is_err());
    }

    fn item(key: u64) -> Item {
        Item {
            kind: agentrt_sdk::ItemKind::KvBlock,
            key,
            agent: 1,
            session: 0,
            last_access: 0,
            tokens: 16,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        }
    }

    #[test]
    fn each_fault_breaks_what_it_names_and_only_that() {
        let faulty = |fault| Harness::<Probe>::new([("fault", fault)]).unwrap();
        let items = [item(1), item(2), item(3)];
        // The SDK refuses to hand the host a short list: a Rust guest traps (the host would
        // refuse it too, as a broken contract).
        let short = std::panic::catch_unwind(|| faulty("short-score").score(&items));
        assert!(short.is_err(), "one score short");
        assert_eq!(faulty("short-score").score(&[]).len(), 0);
        assert_eq!(faulty("score-spin").score(&[]).len(), 0, "spins only on items");

        let mut lossy = faulty("lossy-snapshot");
        lossy.observe(&[agentrt_sdk::testing::session_end(1)]);
        let snap = lossy.snapshot();
        lossy.restore(&snap).unwrap();
        assert_ne!(lossy.snapshot(), snap);
        assert_eq!(
            lossy.policy().fault.as_deref(),
            Some("lossy-snapshot"),
            "kept across restore"
        );

        let mut fine = faulty("restore-trap");
        assert!(fine.restore(&fine.snapshot()).is_ok(), "its own snapshot restores");
        let junk = std::panic::catch_unwind(move || faulty("restore-trap").restore(b"junk"));
        assert!(junk.is_err(), "traps on junk");
        let observe =
            std::panic::catch_unwind(|| faulty("observe-trap").observe(&[agentrt_sdk::testing::session_end(1)]));
        assert!(observe.is_err());

        let init = std::panic::catch_unwind(|| Harness::<Probe>::new([("fault", "init-trap"), ("junk", "1")]));
        assert!(init.is_err(), "traps on an unknown key");
        assert!(Harness::<Probe>::new([("fault", "init-trap")]).is_ok());
        assert!(
            Harness::<Probe>::new([("junk", "1")]).is_err(),
            "without the fault: an error"
        );
        assert!(Harness::<Probe>::new([("fault", "typo")])
            .unwrap_err()
            .contains("unknown fault"));

        // `late-trap` passes a short stream and traps on its `trap_at`th arrival, not before.
        let arrival = Event::RequestArrival(agentrt_sdk::RequestArrival {
            request_id: 1,
            agent: 1,
            session: 1,
            anchor_hash: 0,
            prompt_tokens: 10,
            continues: None,
            warmup: false,
            at_us: 0,
        });
        let mut late = Harness::<Probe>::new([("fault", "late-trap"), ("trap_at", "3")]).unwrap();
        late.observe(&[arrival.clone(), arrival.clone()]);
        let third = std::panic::catch_unwind(move || late.observe(&[arrival]));
        assert!(third.is_err(), "traps on the third arrival");
    }
}
