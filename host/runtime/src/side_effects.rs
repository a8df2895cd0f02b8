//! Merging the side effects of several policy slots of one tenant.
//!
//! A tenant may run several slots (`kv`, `admission`, `guard`, …), each its own component fed the
//! same events; after a request each slot's `act()` answers with side effects, and the host
//! carries out their merge. The rule, applied in slot order (the `kv` slot first, then the others
//! as configured):
//!
//! 1. **`deny` wins.** A session any slot denies is denied (the first reason given is kept), and
//!    nothing else any slot asked for that session is carried out: its `set-priority`, `hedge`
//!    and `pin`s are dropped. Safety is not outvoted by performance.
//! 2. **One warm-up per anchor**, whoever asked: the first `warm-prefix` for an anchor is kept.
//! 3. **One priority per session**: the first slot's `set-priority` for a session is kept, so the
//!    slot configured first (e.g. `admission`) decides and a later one cannot override it.
//! 4. Everything else is kept once: exact duplicates (two slots pinning the same agent for the
//!    same session and time) are carried out once.
//!
//! The merge is pure and order-preserving, so the effects of a single slot come out unchanged.

use crate::types::SideEffect;

/// The side effects to carry out for a tenant, given each slot's `act()` answer in slot order.
pub fn merge_side_effects(per_slot: impl IntoIterator<Item = Vec<SideEffect>>) -> Vec<SideEffect> {
    let all: Vec<SideEffect> = per_slot.into_iter().flatten().collect();
    let denied: Vec<u64> = all
        .iter()
        .filter_map(|e| match e {
            SideEffect::Deny(d) => Some(d.session),
            _ => None,
        })
        .collect();
    let mut merged: Vec<SideEffect> = Vec::with_capacity(all.len());
    for effect in all {
        let session_denied = |session: u64| denied.contains(&session);
        let keep = match &effect {
            SideEffect::Deny(d) => !merged
                .iter()
                .any(|m| matches!(m, SideEffect::Deny(k) if k.session == d.session)),
            SideEffect::SetPriority(p) => {
                !session_denied(p.session)
                    && !merged
                        .iter()
                        .any(|m| matches!(m, SideEffect::SetPriority(k) if k.session == p.session))
            }
            SideEffect::WarmPrefix(w) => !merged
                .iter()
                .any(|m| matches!(m, SideEffect::WarmPrefix(k) if k.anchor_hash == w.anchor_hash)),
            SideEffect::Hedge(h) => !session_denied(h.session) && !merged.contains(&effect),
            SideEffect::Pin(p) | SideEffect::Unpin(p) => !session_denied(p.session) && !merged.contains(&effect),
            SideEffect::Preload(_) => !merged.contains(&effect),
        };
        if keep {
            merged.push(effect);
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Deny, Hedge, Pin, SetPriority, WarmPrefix};

    fn deny(session: u64, reason: &str) -> SideEffect {
        SideEffect::Deny(Deny {
            session,
            reason: reason.into(),
        })
    }
    fn priority(session: u64, priority: i32) -> SideEffect {
        SideEffect::SetPriority(SetPriority { session, priority })
    }
    fn warm(agent: u32, anchor_hash: u64) -> SideEffect {
        SideEffect::WarmPrefix(WarmPrefix {
            agent,
            anchor_hash,
            probability: 0.9,
        })
    }
    fn pin(agent: u32, session: u64) -> SideEffect {
        SideEffect::Pin(Pin {
            agent,
            session,
            ttl_ms: 1000,
        })
    }

    #[test]
    fn one_slots_effects_come_out_unchanged() {
        let effects = vec![warm(1, 10), pin(1, 5), priority(5, 3)];
        assert_eq!(merge_side_effects([effects.clone()]), effects);
    }

    #[test]
    fn deny_wins_over_whatever_another_slot_asked_for_the_session() {
        let kv = vec![pin(1, 5), warm(1, 10)];
        let admission = vec![priority(5, 9), priority(6, 1)];
        let guard = vec![deny(5, "loop"), deny(5, "budget")];
        let merged = merge_side_effects([kv, admission, guard]);
        assert_eq!(
            merged,
            vec![warm(1, 10), priority(6, 1), deny(5, "loop")],
            "session 5's pin and priority are dropped; the first reason is kept; warm-ups (no session) stay"
        );
        let hedged = merge_side_effects([
            vec![SideEffect::Hedge(Hedge {
                session: 5,
                agent: 1,
                probability: 0.5,
            })],
            vec![deny(5, "x")],
        ]);
        assert_eq!(hedged, vec![deny(5, "x")]);
    }

    #[test]
    fn one_warmup_per_anchor_and_the_first_slots_priority() {
        let merged = merge_side_effects([
            vec![warm(1, 10), priority(5, 1)],
            vec![warm(2, 10), warm(2, 11), priority(5, 7), pin(1, 5), pin(1, 5)],
        ]);
        assert_eq!(merged, vec![warm(1, 10), priority(5, 1), warm(2, 11), pin(1, 5)]);
    }
}
