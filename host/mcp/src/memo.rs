//! One tenant's memo: the store, the tenant's tool-memo policy, and the two decisions they make
//! together — may this call be answered from memory, and which results to keep after a fetch.
//!
//! The policy answers by scoring `tool-result` items (`wit/policy.wit`): a score above zero means
//! "keep, and it may be served"; zero, below or non-finite means "drop" (its TTL ran out, or the
//! result is not worth keeping). Over budget, the lowest-ranked go first under the host's one
//! ranking rule. When the policy gives no answer in time (queue full, a failing policy, its
//! deadline), the gateway acts as if there were no memo: it calls the server and keeps nothing
//! new — a miss is always a right answer.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use agentrt_runtime::keep_order;
use agentrt_runtime::types::{Event, Item};

use crate::keys::ResultKey;
use crate::memo_store::{Entry, MemoBudget, MemoStore};
use crate::memo_worker::{MemoWorker, Scores};

/// How the memo is run, the same for every tenant.
#[derive(Clone, Copy, Debug)]
pub struct MemoLimits {
    /// How much each tenant's store may hold.
    pub budget: MemoBudget,
    /// How long a call waits for the policy's answer before going to the server.
    pub decision_timeout: Duration,
    /// The host's ceiling on a result's age, whatever a policy says (µs).
    pub max_age_us: u64,
}

impl Default for MemoLimits {
    fn default() -> Self {
        Self {
            budget: MemoBudget::default(),
            decision_timeout: Duration::from_millis(50),
            max_age_us: 3_600_000_000,
        }
    }
}

/// Why a call was not answered from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// Nothing memoized for these arguments.
    Absent,
    /// The policy dropped the result (its score ≤ 0: TTL over), or it passed the host's ceiling.
    Expired,
    /// The policy did not answer in time.
    NoAnswer,
}

/// What happened to a fetched result offered to the memo.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// The offered result is in the store (the policy kept it and the budget did not evict it).
    pub stored: bool,
    /// Results dropped because the policy no longer values them.
    pub expired: usize,
    /// Results dropped to bring the store under budget.
    pub evicted: usize,
    /// The policy did not answer in time: nothing changed.
    pub no_answer: bool,
}

/// One tenant's store and tool-memo policy, and the two decisions ([`Self::lookup`],
/// [`Self::offer`]).
pub struct TenantMemo {
    store: Mutex<MemoStore>,
    worker: MemoWorker,
    limits: MemoLimits,
}

impl TenantMemo {
    /// An empty store decided by `worker`'s policy under `limits`.
    pub fn new(worker: MemoWorker, limits: MemoLimits) -> Self {
        Self {
            store: Mutex::new(MemoStore::default()),
            worker,
            limits,
        }
    }

    fn store(&self) -> MutexGuard<'_, MemoStore> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (entries, bytes) held now.
    pub fn size(&self) -> (usize, usize) {
        let store = self.store();
        (store.len(), store.bytes())
    }

    /// The thread that runs the tenant's tool-memo policy.
    pub fn worker(&self) -> &MemoWorker {
        &self.worker
    }

    /// Tell the policy `events` without asking anything.
    pub fn observe(&self, events: Vec<Event>) {
        self.worker.observe(events);
    }

    /// The memoized answer to `key`, if the policy (told of `call` first) still keeps it.
    pub async fn lookup(&self, key: &ResultKey, call: Event, now_us: u64) -> Result<Entry, Miss> {
        let entry = self.store().get(key).cloned();
        let Some(entry) = entry else {
            self.worker.observe(vec![call]);
            return Err(Miss::Absent);
        };
        if now_us.saturating_sub(entry.fetched_at_us) > self.limits.max_age_us {
            self.worker.observe(vec![call]);
            self.store().remove_if(entry.key.key, entry.fetched_at_us);
            return Err(Miss::Expired);
        }
        let Some(scores) = self.ask(vec![call], vec![entry.item()]).await else {
            return Err(Miss::NoAnswer);
        };
        if keeps(scores[0]) {
            Ok(entry)
        } else {
            self.store().remove_if(entry.key.key, entry.fetched_at_us);
            Err(Miss::Expired)
        }
    }

    /// Offer a freshly fetched result (the policy told of its `returned` event first): the policy
    /// scores it with everything already kept; the host stores it if it scores above zero, drops
    /// what scores zero or less, and drops the lowest-ranked while over budget.
    pub async fn offer(&self, entry: Entry, returned: Event) -> Kept {
        let mut items = self.store().items();
        items.retain(|i| i.key != entry.key.key);
        items.push(entry.item());
        let Some(scores) = self.ask(vec![returned], items.clone()).await else {
            return Kept {
                no_answer: true,
                ..Kept::default()
            };
        };
        let mut kept = Kept::default();
        let mut store = self.store();
        let new = items.len() - 1;
        // Worst first: walk the keep order backwards.
        let order = keep_order(&items, &scores);
        if keeps(scores[new]) {
            store.insert(entry);
            kept.stored = true;
        }
        for &i in order.iter().rev() {
            if i == new {
                continue;
            }
            if !keeps(scores[i]) && store.remove_if(items[i].key, items[i].last_access) {
                kept.expired += 1;
            }
        }
        for &i in order.iter().rev() {
            if !store.over(&self.limits.budget) {
                break;
            }
            let removed = if i == new {
                let removed = kept.stored && store.remove_if(items[i].key, items[i].last_access);
                kept.stored &= !removed;
                removed
            } else {
                store.remove_if(items[i].key, items[i].last_access)
            };
            kept.evicted += usize::from(removed);
        }
        kept
    }

    /// Score `items` after `events`, within the decision timeout; `None` without an answer.
    async fn ask(&self, events: Vec<Event>, items: Vec<Item>) -> Option<Vec<f32>> {
        let n = items.len();
        let answer = self.worker.decide(events, items)?;
        match tokio::time::timeout(self.limits.decision_timeout, answer).await {
            Ok(Ok(Scores::Ok(scores))) if scores.len() == n => Some(scores),
            Ok(Ok(Err(error))) => {
                tracing::debug!(%error, "tool-memo policy gave no scores; the call goes to the server");
                None
            }
            _ => None,
        }
    }
}

/// The policy's "keep and serve" answer.
fn keeps(score: f32) -> bool {
    score.is_finite() && score > 0.0
}
