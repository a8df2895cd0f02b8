//! The decision: which sessions are resident, which are held, which held calls go now — the
//! rules of the crate's guide, over the [`Ledger`] and the [`CostMeter`].

use std::collections::HashMap;

use crate::cost::CostMeter;
use crate::ledger::{Ledger, Session, SessionState};
use crate::{SessionId, TenantId};

/// The host's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Hold nothing while the resident sessions need at most this share of the capacity.
    pub fill: f64,
    /// The longest a session's first call waits (µs): a new session's first response is never
    /// held longer (its context is small; room is made for it).
    pub max_first_wait_us: u64,
    /// The longest any call waits held (µs): the aging bound.
    pub max_hold_us: u64,
    /// Rebalance at least this often while sessions are live (µs).
    pub check_every_us: u64,
    /// After an answer, a close or a held call, rebalance no sooner than this (µs).
    pub min_gap_us: u64,
    /// Answers measured before any hold.
    pub min_answers: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            fill: 0.95,
            max_first_wait_us: 30_000_000,
            max_hold_us: 600_000_000,
            check_every_us: 1_000_000,
            min_gap_us: 50_000,
            min_answers: 32,
        }
    }
}

/// A call of a session reaches the proxy.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub session: SessionId,
    pub tenant: TenantId,
    pub agent: u32,
    /// Its agent's anchor (system prompt + tools): its hash and size (0, 0 when unknown).
    pub anchor_hash: u64,
    pub anchor_tokens: u32,
    pub prompt_tokens: u32,
}

/// A call's answer ended, as its response says.
#[derive(Debug, Clone)]
pub struct Answered {
    pub session: SessionId,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub output_tokens: u32,
    /// Its prefill: from the engine scheduling it to its first token (µs), without its wait in
    /// the engine's queue (vLLM's `request_prefill_time`; the time to first token would count
    /// the queue, which under load grows with the prompts that were evicted).
    pub prefill_us: u64,
    /// From its first token to its last (µs).
    pub decode_us: u64,
}

/// Whether a call goes to the engine now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    Hold,
}

/// The engine's load now (vLLM's `num_requests_running` / `num_requests_waiting`, or the
/// proxy's own count of calls in flight).
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineNow {
    pub running: u32,
    pub waiting: u32,
}

/// A session to score: the caller makes it a `session` item for the tenant's admission slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub session: SessionId,
    pub tenant: TenantId,
    pub agent: u32,
    pub context_tokens: u32,
    pub last_activity_us: u64,
}

/// What the ranker does with a block of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionClass {
    /// Offered for eviction before any other block: the session is held.
    First,
    /// The cache policy's order.
    Policy,
    /// Kept: the session's held call was just let go and is not answered yet.
    Keep,
}

/// The engine as the decision sees it now: the fields of contract 0.5.0's `engine-capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapacityReport {
    pub capacity_tokens: u64,
    /// Tokens the resident sessions need cached.
    pub resident_tokens: u64,
    pub resident_sessions: u32,
    pub held_sessions: u32,
    /// Measured: µs per 1,000 uncached prompt tokens, and one decode step (0 until measured).
    pub prefill_us_per_ktoken: u32,
    pub decode_step_us: u32,
}

/// What the decision did, for metrics and reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub holds: u64,
    pub sessions_held: u64,
    pub resumes: u64,
    pub forced_resumes: u64,
    /// Calls that waited held, and the sum and largest of their waits (µs).
    pub calls_waited: u64,
    pub wait_us_sum: u64,
    pub max_wait_us: u64,
    /// Rebalances, and those in which holding was found not to pay.
    pub rebalances: u64,
    pub gate_closed: u64,
}

/// Working-set admission for one engine (see the crate's guide).
#[derive(Debug, Clone)]
pub struct WorkingSet {
    settings: Settings,
    capacity_tokens: u64,
    ledger: Ledger,
    cost: CostMeter,
    weights: HashMap<TenantId, f64>,
    /// Something changed since the last rebalance (and when it was).
    dirty: bool,
    last_rebalance_us: Option<u64>,
    /// Held calls to let go at the next rebalance whatever happens (their session closed).
    release_now: Vec<SessionId>,
    ever_held: std::collections::HashSet<SessionId>,
    figures: Figures,
}

impl WorkingSet {
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            capacity_tokens: 0,
            ledger: Ledger::default(),
            cost: CostMeter::default(),
            weights: HashMap::new(),
            dirty: false,
            last_rebalance_us: None,
            release_now: Vec::new(),
            ever_held: Default::default(),
            figures: Figures::default(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The engine's KV capacity in tokens.
    pub fn set_capacity(&mut self, tokens: u64) {
        self.capacity_tokens = tokens;
        self.dirty = true;
    }

    pub fn capacity_tokens(&self) -> u64 {
        self.capacity_tokens
    }

    /// A tenant's weight (1 unless set).
    pub fn set_tenant_weight(&mut self, tenant: TenantId, weight: f64) {
        self.weights.insert(tenant, weight.max(1e-6));
    }

    fn weight(&self, tenant: TenantId) -> f64 {
        self.weights.get(&tenant).copied().unwrap_or(1.0)
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn cost(&self) -> &CostMeter {
        &self.cost
    }

    pub fn figures(&self) -> &Figures {
        &self.figures
    }

    /// Room kept for each running call's answer.
    fn reserve(&self) -> u64 {
        self.cost.mean_output().ceil() as u64
    }

    /// The tokens the resident sessions need now.
    pub fn resident_tokens(&self) -> u64 {
        self.ledger.resident_tokens(self.reserve())
    }

    fn budget(&self) -> u64 {
        (self.capacity_tokens as f64 * self.settings.fill) as u64
    }

    /// Whether holding sessions back pays on this engine now (the gate of the crate's guide).
    pub fn holding_pays(&self) -> bool {
        self.capacity_tokens > 0 && self.cost.holding_pays(self.capacity_tokens, self.settings.min_answers)
    }

    /// How long an idle session must be expected to stay away for holding it to pay (s): the
    /// time the engine takes to prefill its whole cache (keeping `S` tokens idle for `r` seconds
    /// costs `S × r / C` of the engine's seconds at full cache; recomputing them costs `p × S`).
    pub fn break_even_s(&self) -> f64 {
        self.cost.prefill_us_per_token().unwrap_or(0.0) * self.capacity_tokens as f64 / 1e6
    }

    /// Sessions whose calls are held now.
    pub fn held(&self) -> usize {
        self.ledger.sessions().filter(|(_, s)| !s.state.resident()).count()
    }

    /// A call of `a.session` arrives at `now_us`.
    pub fn arrive(&mut self, a: &Arrival, now_us: u64) -> Verdict {
        let existing = self.ledger.get(a.session).map(|s| (s.state, s.paused_since_us));
        if let Some((_, Some(since))) = existing {
            self.cost.pause(now_us.saturating_sub(since));
        }
        match existing.map(|(state, _)| state) {
            Some(SessionState::Running | SessionState::Idle) => {
                self.ledger.set_context(a.session, a.prompt_tokens);
                self.ledger.set_state(a.session, SessionState::Running);
                self.touch(a.session, now_us);
                Verdict::Admit
            }
            Some(SessionState::Waiting { .. }) => Verdict::Hold,
            Some(SessionState::Held) => {
                self.ledger.set_context(a.session, a.prompt_tokens);
                self.touch(a.session, now_us);
                self.enter(a.session, now_us)
            }
            None => {
                self.ledger.insert(
                    a.session,
                    Session {
                        tenant: a.tenant,
                        agent: a.agent,
                        anchor_hash: a.anchor_hash,
                        anchor_tokens: a.anchor_tokens,
                        context_tokens: a.prompt_tokens,
                        state: SessionState::Held,
                        last_activity_us: now_us,
                        resumed: false,
                        marked: false,
                        paused_since_us: None,
                        first_call: true,
                    },
                );
                self.enter(a.session, now_us)
            }
        }
    }

    fn touch(&mut self, session: SessionId, now_us: u64) {
        self.ledger.update(session, |s| {
            s.last_activity_us = now_us;
            s.paused_since_us = None;
        });
    }

    /// A call of a session that is not resident: it goes if there is room and no held session
    /// is in line before it (or holding does not pay), else it waits. A held session is in line
    /// even while its own call has not come yet: a new session, small now, must not take the
    /// room a held one will need when it returns — unless the held one's tenant is over its
    /// share and this one's is not (a flood's held sessions are never before another tenant's).
    fn enter(&mut self, session: SessionId, now_us: u64) -> Verdict {
        let s = self.ledger.get(session).expect("in the ledger");
        let budget = self.budget();
        let under_share = self.over_share(s.tenant, budget) <= 0.0;
        let someone_waits = self.ledger.sessions().any(|(id, other)| {
            id != session
                && !other.state.resident()
                && (other.tenant == s.tenant || !under_share || self.over_share(other.tenant, budget) <= 0.0)
        });
        let fits = self.resident_tokens() + self.ledger.cost_of(s) + self.reserve() <= budget;
        if !self.holding_pays() || (fits && !someone_waits) {
            self.ledger.set_state(session, SessionState::Running);
            return Verdict::Admit;
        }
        self.ledger
            .set_state(session, SessionState::Waiting { since_us: now_us });
        self.dirty = true;
        Verdict::Hold
    }

    /// `a`'s answer ended at `now_us`.
    pub fn answer(&mut self, a: &Answered, now_us: u64) {
        self.cost.answer(
            a.prompt_tokens,
            a.cached_tokens,
            a.output_tokens,
            a.prefill_us,
            a.decode_us,
        );
        self.ended(a.session, Some(a.prompt_tokens.saturating_add(a.output_tokens)), now_us);
    }

    /// A call of `session` ended at `now_us` without an answer the engine's cost can be read
    /// from: a reply read whole (its first token's time is not seen), a failure, a client that
    /// left. The session pauses as after an answer; its context becomes `context_tokens` when
    /// the reply said it.
    pub fn ended(&mut self, session: SessionId, context_tokens: Option<u32>, now_us: u64) {
        let Some(s) = self.ledger.get(session) else { return };
        let marked = s.marked;
        if let Some(tokens) = context_tokens {
            self.ledger.set_context(session, tokens);
        }
        self.ledger.update(session, |s| {
            s.last_activity_us = now_us;
            s.paused_since_us = Some(now_us);
            s.resumed = false;
            s.marked = false;
            s.first_call = false;
        });
        if self
            .ledger
            .get(session)
            .is_some_and(|s| s.state == SessionState::Running)
        {
            let next = if marked { SessionState::Held } else { SessionState::Idle };
            self.ledger.set_state(session, next);
            if marked {
                self.count_hold(session);
            }
        }
        self.dirty = true;
    }

    /// The session is over (closed by its framework or client, or ended by the idle rule): it
    /// leaves the ledger at once; a call of it still held goes at the next rebalance.
    pub fn close(&mut self, session: SessionId, _now_us: u64) {
        if let Some(s) = self.ledger.remove(session) {
            if matches!(s.state, SessionState::Waiting { .. }) {
                self.release_now.push(session);
            }
            self.dirty = true;
        }
    }

    /// The host inferred that the session ended (its idle rule, or its session table pushed it
    /// out): it leaves the ledger as on a closing — unless a call of it is in the engine or waits
    /// here, which says it is not over.
    pub fn idle_end(&mut self, session: SessionId, now_us: u64) {
        let active = self
            .ledger
            .get(session)
            .is_some_and(|s| matches!(s.state, SessionState::Running | SessionState::Waiting { .. }));
        if !active {
            self.close(session, now_us);
        }
    }

    /// The client of `session`'s held call left before it went: the session stays held, with
    /// no call waiting.
    pub fn withdraw(&mut self, session: SessionId) {
        if matches!(
            self.ledger.get(session).map(|s| s.state),
            Some(SessionState::Waiting { .. })
        ) {
            self.ledger.set_state(session, SessionState::Held);
            self.dirty = true;
        }
    }

    /// What the decision sees of the engine now, as the `engine-capacity` event tells the
    /// admission slot (and `serve`'s `/metrics` shows).
    pub fn capacity_report(&self) -> CapacityReport {
        let held = self.held();
        CapacityReport {
            capacity_tokens: self.capacity_tokens,
            resident_tokens: self.resident_tokens(),
            resident_sessions: (self.ledger.len() - held) as u32,
            held_sessions: held as u32,
            prefill_us_per_ktoken: self
                .cost
                .prefill_us_per_token()
                .map_or(0, |p| (p * 1000.0).round() as u32),
            decode_step_us: self.cost.decode_step_us().map_or(0, |d| d.round() as u32),
        }
    }

    /// Whether `rebalance` should run at `now_us`.
    pub fn due(&self, now_us: u64) -> bool {
        let Some(last) = self.last_rebalance_us else {
            return self.dirty;
        };
        let since = now_us.saturating_sub(last);
        (self.dirty && since >= self.settings.min_gap_us)
            || (!self.ledger.is_empty() && since >= self.settings.check_every_us)
    }

    /// When the next rebalance is due if nothing happens (µs): the periodic check, or the
    /// aging bound of the longest-waiting call, whichever is first.
    pub fn next_due_us(&self) -> Option<u64> {
        let waiting = self
            .ledger
            .sessions()
            .filter_map(|(id, s)| match s.state {
                SessionState::Waiting { since_us } => Some(since_us + self.bound_us(id)),
                _ => None,
            })
            .min();
        if self.ledger.is_empty() {
            return waiting;
        }
        let last = self.last_rebalance_us.unwrap_or(0);
        let mut next = last + self.settings.check_every_us;
        if self.dirty {
            next = next.min(last + self.settings.min_gap_us);
        }
        Some(waiting.map_or(next, |w| w.min(next)))
    }

    /// The sessions a rebalance would hold or resume, to be scored by the tenant's admission
    /// slot: the idle resident ones and the held ones with a call waiting.
    pub fn candidates(&self) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = self
            .ledger
            .sessions()
            .filter(|(_, s)| {
                matches!(
                    s.state,
                    SessionState::Idle | SessionState::Waiting { .. } | SessionState::Running
                )
            })
            .map(|(id, s)| Candidate {
                session: id,
                tenant: s.tenant,
                agent: s.agent,
                context_tokens: s.context_tokens,
                last_activity_us: s.last_activity_us,
            })
            .collect();
        out.sort_by_key(|c| c.session);
        out
    }

    /// Hold and resume by the rules of the crate's guide, with `scores` (session → the
    /// admission slot's score; missing = 0). Returns the sessions whose held calls go now.
    pub fn rebalance(&mut self, now_us: u64, engine: EngineNow, scores: &HashMap<SessionId, f32>) -> Vec<SessionId> {
        self.dirty = false;
        self.last_rebalance_us = Some(now_us);
        self.figures.rebalances += 1;
        let mut released = std::mem::take(&mut self.release_now);
        let score = |id: SessionId| scores.get(&id).copied().filter(|s| s.is_finite()).unwrap_or(0.0);
        // Aging: a call that waited its longest goes, whatever its score; idle sessions are held
        // to make room for it (the farthest first) so that the others keep their cache.
        let budget = self.budget();
        for (id, since) in self.waiting() {
            if now_us >= since + self.bound_us(id) {
                self.figures.forced_resumes += 1;
                let need = self.ledger.cost_of(self.ledger.get(id).expect("waiting")) + self.reserve();
                let tenant = self.ledger.get(id).expect("waiting").tenant;
                self.make_room(need, budget, f64::NEG_INFINITY, tenant, &score);
                self.resume(id, now_us, &mut released);
            }
        }
        if !self.holding_pays() {
            self.figures.gate_closed += 1;
            for (id, _) in self.waiting() {
                self.resume(id, now_us, &mut released);
            }
            return released;
        }
        self.hold_until_fits(budget, &score);
        let horizon_s = self.break_even_s();
        self.resume_while_fits(budget, horizon_s, now_us, engine, &score, &mut released);
        released
    }

    /// How long `id`'s waiting call may wait: its first call's bound or any call's.
    fn bound_us(&self, id: SessionId) -> u64 {
        match self.ledger.get(id) {
            Some(s) if s.first_call => self.settings.max_first_wait_us,
            _ => self.settings.max_hold_us,
        }
    }

    /// Calls waiting, oldest first.
    fn waiting(&self) -> Vec<(SessionId, u64)> {
        let mut w: Vec<(SessionId, u64)> = self
            .ledger
            .sessions()
            .filter_map(|(id, s)| match s.state {
                SessionState::Waiting { since_us } => Some((id, since_us)),
                _ => None,
            })
            .collect();
        w.sort_by_key(|&(id, since)| (since, id));
        w
    }

    /// How far tenant `t` is over its share of the budget (positive: over), in tokens.
    fn over_share(&self, t: TenantId, budget: u64) -> f64 {
        let tenants = self.ledger.tenants();
        let total: f64 = tenants.iter().map(|&x| self.weight(x)).sum();
        let share = budget as f64 * self.weight(t) / total.max(1e-9);
        self.ledger.tenant_tokens(t) as f64 - share
    }

    /// Whether `need` more tokens of tenant `t` stay within its share.
    fn within_share(&self, t: TenantId, need: u64, budget: u64) -> bool {
        self.over_share(t, budget) + need as f64 <= 0.0
    }

    /// Whether another tenant than `t` is over its share: then the room `t` lacks within its own
    /// share is the other's excess, and `t` is owed it.
    fn another_over_share(&self, t: TenantId, budget: u64) -> bool {
        self.ledger
            .tenants()
            .into_iter()
            .any(|x| x != t && self.over_share(x, budget) > 0.0)
    }

    /// Whether a session of tenant `victim` may be held to make room for a call of `for_tenant`
    /// (`None`: for the working set's excess). A tenant within its share is held only for its own
    /// calls, or when no tenant is over its share: one tenant's flood never takes another's room.
    fn may_hold(&self, victim: TenantId, for_tenant: Option<TenantId>, budget: u64) -> bool {
        Some(victim) == for_tenant
            || self.over_share(victim, budget) > 0.0
            || (for_tenant.is_none() && !self.another_over_share(victim, budget))
    }

    fn hold_until_fits(&mut self, budget: u64, score: &dyn Fn(SessionId) -> f32) {
        let reserve = self.reserve();
        if self.ledger.resident_tokens(reserve) <= budget {
            return;
        }
        // Idle sessions, those of tenants over their share first, lowest score first; a tenant
        // within its share only while none is over its own.
        let mut idle: Vec<(bool, f32, u64, SessionId, TenantId)> = self
            .ledger
            .sessions()
            .filter(|(_, s)| s.state == SessionState::Idle)
            .map(|(id, s)| {
                (
                    self.over_share(s.tenant, budget) <= 0.0,
                    score(id),
                    s.last_activity_us,
                    id,
                    s.tenant,
                )
            })
            .collect();
        idle.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        for (_, _, _, id, tenant) in idle {
            if self.ledger.resident_tokens(reserve) <= budget {
                return;
            }
            if self.may_hold(tenant, None, budget) {
                self.ledger.set_state(id, SessionState::Held);
                self.count_hold(id);
            }
        }
        // Still over: running calls are held when their answer ends — tenants over their share
        // first, then the lowest score — as many as the excess needs (their tokens counted as
        // leaving); a tenant within its share's only while none is over its own.
        let mut excess = self.ledger.resident_tokens(reserve).saturating_sub(budget) as i64;
        let mut running: Vec<(bool, f32, SessionId, u64)> = self
            .ledger
            .sessions()
            .filter(|(_, s)| s.state == SessionState::Running && !s.marked && !s.resumed)
            .filter(|(_, s)| self.may_hold(s.tenant, None, budget))
            .map(|(id, s)| {
                let under = self.over_share(s.tenant, budget) <= 0.0;
                (under, score(id), id, u64::from(s.context_tokens))
            })
            .collect();
        excess -= self
            .ledger
            .sessions()
            .filter(|(_, s)| s.marked)
            .map(|(_, s)| i64::from(s.context_tokens))
            .sum::<i64>();
        running.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
        for (_, _, id, tokens) in running {
            if excess <= 0 {
                break;
            }
            self.ledger.update(id, |s| s.marked = true);
            excess -= tokens as i64;
        }
    }

    /// Held calls go — tenants under their share first, then the higher score, then the smaller
    /// context (it packs more calls into the cache and is the cheapest to recompute; the aging
    /// bound keeps the large ones from starving), then the longer wait — while they fit; to make room for one, idle sessions expected to stay away longer
    /// than `horizon_s` are held (farthest first). One goes whatever the room when the engine
    /// would otherwise idle.
    fn resume_while_fits(
        &mut self,
        budget: u64,
        horizon_s: f64,
        now_us: u64,
        engine: EngineNow,
        score: &dyn Fn(SessionId) -> f32,
        released: &mut Vec<SessionId>,
    ) {
        let reserve = self.reserve();
        let mut order: Vec<(bool, f32, u32, u64, SessionId)> = self
            .waiting()
            .into_iter()
            .map(|(id, since)| {
                let s = self.ledger.get(id).expect("waiting");
                (
                    self.over_share(s.tenant, budget) > 0.0,
                    -score(id),
                    s.context_tokens,
                    since,
                    id,
                )
            })
            .collect();
        order.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
                .then(a.4.cmp(&b.4))
        });
        let mut engine_busy = engine.running + engine.waiting > 0 || !released.is_empty();
        for (_, _, _, _, id) in order {
            let s = self.ledger.get(id).expect("waiting");
            let (need, tenant) = (self.ledger.cost_of(s) + reserve, s.tenant);
            let fits = |ws: &Self| ws.ledger.resident_tokens(reserve) + need <= budget;
            if !fits(self) {
                self.make_room(need, budget, horizon_s, tenant, score);
            }
            // Room within a tenant's share that another's excess took is the tenant's still: its
            // call goes, and the excess is held at the next rebalance (the other's sessions,
            // running ones when their answers end).
            let owed = self.within_share(tenant, need, budget) && self.another_over_share(tenant, budget);
            if fits(self) || owed || !engine_busy {
                self.resume(id, now_us, released);
                engine_busy = true;
            }
        }
    }

    /// Room for `need` more tokens of a call of tenant `for_tenant`: hold idle sessions expected
    /// to stay away longer than `horizon_s` (a score below −`horizon_s`) — and, for a tenant
    /// within its share, any idle session of a tenant over its own (the share is kept whatever
    /// the returns) — those of tenants over their share first (a flood makes room from its own
    /// sessions), then the farthest, then the smallest (cheapest to recompute), until the call
    /// fits the budget or none is left. Never a session of another tenant within its share
    /// ([`Self::may_hold`]).
    fn make_room(
        &mut self,
        need: u64,
        budget: u64,
        horizon_s: f64,
        for_tenant: TenantId,
        score: &dyn Fn(SessionId) -> f32,
    ) {
        let reserve = self.reserve();
        let within_share = self.within_share(for_tenant, need, budget);
        let mut far: Vec<(bool, f32, u32, u64, SessionId, TenantId)> = self
            .ledger
            .sessions()
            .filter(|(_, s)| s.state == SessionState::Idle)
            .map(|(id, s)| (self.over_share(s.tenant, budget) > 0.0, id, s))
            .filter(|(over, id, _)| f64::from(-score(*id)) > horizon_s || (within_share && *over))
            .map(|(over, id, s)| (!over, score(id), s.context_tokens, s.last_activity_us, id, s.tenant))
            .collect();
        far.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
                .then(a.4.cmp(&b.4))
        });
        for (_, _, _, _, id, tenant) in far {
            if self.ledger.resident_tokens(reserve) + need <= budget {
                return;
            }
            if self.may_hold(tenant, Some(for_tenant), budget) {
                self.ledger.set_state(id, SessionState::Held);
                self.count_hold(id);
            }
        }
    }

    fn resume(&mut self, id: SessionId, now_us: u64, released: &mut Vec<SessionId>) {
        let Some(SessionState::Waiting { since_us }) = self.ledger.get(id).map(|s| s.state) else {
            return;
        };
        let waited = now_us.saturating_sub(since_us);
        self.figures.resumes += 1;
        self.figures.calls_waited += 1;
        self.figures.wait_us_sum += waited;
        self.figures.max_wait_us = self.figures.max_wait_us.max(waited);
        self.ledger.set_state(id, SessionState::Running);
        self.ledger.update(id, |s| s.resumed = true);
        released.push(id);
    }

    fn count_hold(&mut self, id: SessionId) {
        self.figures.holds += 1;
        if self.ever_held.insert(id) {
            self.figures.sessions_held += 1;
        }
    }

    /// What the engine's ranker does with a block of `session`.
    pub fn eviction_class(&self, session: SessionId) -> EvictionClass {
        match self.ledger.get(session) {
            Some(s) if !s.state.resident() => EvictionClass::First,
            Some(s) if s.resumed => EvictionClass::Keep,
            _ => EvictionClass::Policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Measured on an H100-like engine: prefill 35 µs a token, pauses of 2 s.
    fn measured(ws: &mut WorkingSet) {
        for i in 1..=40u64 {
            ws.cost
                .answer((i * 700) as u32, 0, 100, 5_000 + 35 * i * 700, 99 * 25_000);
            ws.cost.pause(2_000_000);
        }
    }

    fn arrival(session: SessionId, tenant: TenantId, tokens: u32) -> Arrival {
        Arrival {
            session,
            tenant,
            agent: session as u32,
            anchor_hash: 0,
            anchor_tokens: 0,
            prompt_tokens: tokens,
        }
    }

    fn answered(session: SessionId, prompt: u32) -> Answered {
        Answered {
            session,
            prompt_tokens: prompt,
            cached_tokens: prompt,
            output_tokens: 100,
            prefill_us: 100_000,
            decode_us: 2_000_000,
        }
    }

    fn working_set(capacity: u64) -> WorkingSet {
        let mut ws = WorkingSet::new(Settings::default());
        ws.set_capacity(capacity);
        measured(&mut ws);
        ws
    }

    #[test]
    fn while_the_working_set_fits_nothing_is_held() {
        let mut ws = working_set(100_000);
        for s in 1..=5 {
            assert_eq!(ws.arrive(&arrival(s, 0, 10_000), 0), Verdict::Admit);
        }
        assert_eq!(ws.held(), 0);
    }

    #[test]
    fn past_the_cache_new_sessions_wait_and_go_when_an_idle_far_one_is_held() {
        let mut ws = working_set(100_000); // budget 95,000
        for s in 1..=4 {
            assert_eq!(ws.arrive(&arrival(s, 0, 20_000), 0), Verdict::Admit);
        }
        // 80,000 + reserve: a fifth 20,000-token session does not fit; it waits.
        assert_eq!(ws.arrive(&arrival(5, 0, 20_000), 10), Verdict::Hold);
        // 1 and 2 answer and pause; the policy says 2 returns soon, 1 is far (a user).
        ws.answer(&answered(1, 20_000), 1_000_000);
        ws.answer(&answered(2, 20_000), 1_000_000);
        let scores = HashMap::from([(1, -60.0f32), (2, -1.0)]);
        let engine = EngineNow { running: 2, waiting: 0 };
        let released = ws.rebalance(1_100_000, engine, &scores);
        assert_eq!(released, vec![5]);
        assert_eq!(ws.eviction_class(1), EvictionClass::First, "the far one was held");
        assert_eq!(ws.eviction_class(2), EvictionClass::Policy);
        assert_eq!(
            ws.eviction_class(5),
            EvictionClass::Keep,
            "just let go: its blocks are kept"
        );
        // 1's next call waits now: there is no room.
        assert_eq!(ws.arrive(&arrival(1, 0, 20_500), 1_200_000), Verdict::Hold);
    }

    #[test]
    fn a_session_ended_while_its_call_waits_lets_the_call_go() {
        let mut ws = working_set(100_000);
        assert_eq!(ws.arrive(&arrival(1, 0, 90_000), 0), Verdict::Admit);
        assert_eq!(ws.arrive(&arrival(2, 0, 60_000), 0), Verdict::Hold);
        // The idle rule says 2 ended while its call waits: not so, it stays.
        ws.idle_end(2, 1_000);
        assert_eq!(ws.held(), 1);
        // Its client closes it: the call is not forgotten in the proxy.
        ws.close(2, 1_000);
        let busy = EngineNow { running: 1, waiting: 0 };
        assert_eq!(ws.rebalance(2_000, busy, &HashMap::new()), vec![2]);
    }

    #[test]
    fn a_closing_frees_its_tokens_at_once_and_a_waiting_call_goes() {
        let mut ws = working_set(100_000);
        assert_eq!(ws.arrive(&arrival(1, 0, 80_000), 0), Verdict::Admit);
        assert_eq!(ws.arrive(&arrival(2, 0, 60_000), 0), Verdict::Hold);
        ws.answer(&answered(1, 80_000), 500_000);
        ws.close(1, 500_000);
        assert!(ws.due(600_000));
        let released = ws.rebalance(600_000, EngineNow::default(), &HashMap::new());
        assert_eq!(released, vec![2]);
    }

    #[test]
    fn a_held_session_waits_at_most_the_aging_bound_then_room_is_made_for_it() {
        let mut ws = working_set(100_000);
        assert_eq!(ws.arrive(&arrival(1, 0, 40_000), 0), Verdict::Admit);
        assert_eq!(ws.arrive(&arrival(2, 0, 40_000), 0), Verdict::Admit);
        ws.answer(&answered(1, 40_000), 1_000);
        ws.answer(&answered(2, 40_000), 1_000);
        // Over budget once both grow: 1 is held (the farther), and its next call waits.
        ws.ledger.set_context(2, 60_000);
        let idle = EngineNow { running: 1, waiting: 0 };
        ws.rebalance(2_000, idle, &HashMap::from([(1, -50.0), (2, -1.0)]));
        assert_eq!(ws.eviction_class(1), EvictionClass::First);
        assert_eq!(ws.arrive(&arrival(1, 0, 41_000), 3_000), Verdict::Hold);
        assert!(
            ws.rebalance(600_002_000, idle, &HashMap::new()).is_empty(),
            "599.999 s: still held"
        );
        let released = ws.rebalance(600_003_000, idle, &HashMap::new());
        assert_eq!(released, vec![1]);
        assert_eq!(ws.eviction_class(2), EvictionClass::First, "2, idle, made room for it");
    }

    #[test]
    fn no_first_call_waits_longer_than_its_bound() {
        let mut ws = working_set(100_000);
        assert_eq!(ws.arrive(&arrival(1, 0, 90_000), 0), Verdict::Admit);
        assert_eq!(ws.arrive(&arrival(2, 0, 60_000), 0), Verdict::Hold);
        let busy = EngineNow { running: 1, waiting: 0 };
        assert!(ws.rebalance(29_000_000, busy, &HashMap::new()).is_empty());
        assert_eq!(ws.next_due_us(), Some(30_000_000));
        assert_eq!(ws.rebalance(30_000_000, busy, &HashMap::new()), vec![2]);
        assert_eq!((ws.figures().forced_resumes, ws.figures().max_wait_us), (1, 30_000_000));
    }

    #[test]
    fn where_holding_does_not_pay_nothing_is_held_however_full_the_cache() {
        let mut ws = WorkingSet::new(Settings::default());
        ws.set_capacity(9_600);
        // The tiny CPU model: ~1 µs a token; 9,600 tokens prefill in ~10 ms ≪ 2 s pauses.
        for i in 1..=40u64 {
            ws.cost.answer((i * 70) as u32, 0, 30, 6_000 + i * 70, 29 * 6_000);
            ws.cost.pause(2_000_000);
        }
        for s in 1..=10 {
            assert_eq!(ws.arrive(&arrival(s, 0, 2_800), 0), Verdict::Admit);
        }
        assert!(ws
            .rebalance(1_000_000, EngineNow::default(), &HashMap::new())
            .is_empty());
        assert_eq!(ws.held(), 0);
    }

    #[test]
    fn a_tenant_flooding_sessions_is_held_beyond_its_share_not_the_other() {
        let mut ws = working_set(100_000); // budget 95,000: 47,500 each
        assert_eq!(ws.arrive(&arrival(1, 1, 30_000), 0), Verdict::Admit);
        for s in 10..14 {
            ws.arrive(&arrival(s, 0, 20_000), 0);
        }
        // Tenant 0 holds 60,000 (three admitted), tenant 1 30,000; all idle now.
        for s in [1, 10, 11, 12] {
            ws.answer(&answered(s, 30_000), 100);
        }
        // Everyone scores alike: tenant 0, over its share, is held first.
        let released = ws.rebalance(200_000, EngineNow::default(), &HashMap::new());
        assert_eq!(
            ws.eviction_class(1),
            EvictionClass::Policy,
            "tenant 1 keeps its session"
        );
        let held0 = [10, 11, 12, 13]
            .iter()
            .filter(|&&s| ws.eviction_class(s) == EvictionClass::First)
            .count();
        assert!(held0 >= 1, "tenant 0 gave up at least one: {released:?}");
    }

    #[test]
    fn a_tenant_within_its_share_takes_its_room_back_from_a_flood_that_filled_the_cache() {
        let mut ws = working_set(100_000); // budget 95,000: 47,500 each while both are live
        for s in 10..14 {
            assert_eq!(
                ws.arrive(&arrival(s, 0, 22_000), 0),
                Verdict::Admit,
                "room for the flood alone"
            );
            ws.answer(&answered(s, 22_000), 100);
        }
        // The flood's sessions are idle and expected back in a second, sooner than holding pays
        // on returns alone; one more flood session waits held, then the other tenant's first.
        assert_eq!(ws.arrive(&arrival(14, 0, 22_000), 200), Verdict::Hold);
        assert_eq!(ws.arrive(&arrival(1, 1, 20_000), 300), Verdict::Hold, "no room yet");
        let soon: HashMap<SessionId, f32> = (1..15).map(|s| (s, -1.0)).collect();
        let released = ws.rebalance(600_000, EngineNow { running: 1, waiting: 0 }, &soon);
        assert_eq!(
            released,
            [1],
            "tenant 1's call goes within its share, the flood's waits"
        );
        let flood_held = (10..14)
            .filter(|&s| ws.eviction_class(s) == EvictionClass::First)
            .count();
        assert!(flood_held >= 1, "the flood's idle sessions made the room");
        assert_eq!(
            ws.eviction_class(1),
            EvictionClass::Keep,
            "tenant 1's resumed session is kept"
        );
    }

    #[test]
    fn a_flood_never_takes_the_room_of_a_tenant_within_its_share() {
        // Budget 95,000: 47,500 each while both are live.
        let mut ws = working_set(100_000);
        // The steady tenant's session waits for a long tool: idle, far, within its share.
        ws.arrive(&arrival(1, 1, 20_000), 0);
        ws.answer(&answered(1, 20_000), 100);
        // Three flood sessions run; a fourth does not fit and waits.
        for s in 10..13 {
            assert_eq!(ws.arrive(&arrival(s, 0, 22_000), 200), Verdict::Admit);
        }
        assert_eq!(ws.arrive(&arrival(13, 0, 22_000), 300), Verdict::Hold);
        let far: HashMap<SessionId, f32> = [(1, -100.0)].into_iter().collect();
        let busy = EngineNow { running: 3, waiting: 0 };
        // Past the aging bound the flood's call goes, but room is not made from the steady
        // tenant: its far idle session stays resident; the flood's running calls are marked to
        // be held when their answers end instead.
        let bound = Settings::default().max_first_wait_us;
        assert_eq!(ws.rebalance(300 + bound, busy, &far), [13]);
        assert_eq!(
            ws.eviction_class(1),
            EvictionClass::Policy,
            "the steady tenant keeps its room"
        );
        let marked = (10..13)
            .filter(|&s| ws.ledger().get(s).is_some_and(|x| x.marked))
            .count();
        assert!(marked >= 1, "the flood's excess is held as its answers end");
        // The steady tenant's next session finds the cache full of the flood's calls: room
        // within its share is owed to it, so its call goes at once, not at its aging bound.
        assert_eq!(ws.arrive(&arrival(2, 1, 20_000), 400 + bound), Verdict::Hold);
        assert_eq!(
            ws.rebalance(500 + bound, busy, &far),
            [2],
            "the call within its share goes"
        );
    }
}
