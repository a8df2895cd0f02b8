//! Pins: the engine side of the `pin`/`unpin` side effects. A policy's `act` may ask to protect
//! an agent's cached blocks for a while; the host carries that out here, where evictions are
//! decided, by moving pinned candidates to the keep end of every ranking (keeping the policy's
//! order within each part). Pinned blocks are still evicted when nothing else is left: a pin
//! lowers a block's eviction priority, it never makes the cache refuse an allocation.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentrt_runtime::types::{Item, Pin};

/// Active pins, shared between the eviction service and whoever applies side effects.
#[derive(Debug, Default)]
pub struct PinTable {
    pins: Mutex<Vec<ActivePin>>,
}

#[derive(Debug, Clone, Copy)]
struct ActivePin {
    agent: u32,
    /// 0 = every session of the agent.
    session: u64,
    /// `None` = until unpinned.
    until: Option<Instant>,
}

impl PinTable {
    /// Protect `pin.agent`'s blocks (in `pin.session`, or all sessions when 0) for `pin.ttl_ms`
    /// milliseconds; `u32::MAX` means until [`PinTable::unpin`]. Re-pinning extends.
    pub fn pin(&self, pin: &Pin) {
        let until = (pin.ttl_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(u64::from(pin.ttl_ms)));
        let mut pins = self.lock();
        pins.retain(|p| !(p.agent == pin.agent && p.session == pin.session));
        pins.push(ActivePin {
            agent: pin.agent,
            session: pin.session,
            until,
        });
        tracing::debug!(agent = pin.agent, session = pin.session, ttl_ms = pin.ttl_ms, "pinned");
    }

    /// Lift the pin on `pin.agent` in `pin.session` (the same session value it was pinned with:
    /// unpinning one session does not lift an all-sessions pin). Its `ttl_ms` is ignored.
    pub fn unpin(&self, pin: &Pin) {
        self.lock()
            .retain(|p| !(p.agent == pin.agent && p.session == pin.session));
    }

    /// True when no pin is held (expired pins still count until the next ranking drops them).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ActivePin>> {
        self.pins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reorder a keep-first `order` of `items` so pinned items come first (a stable partition).
    /// Returns how many items were pinned.
    pub fn apply(&self, items: &[Item], order: &mut Vec<usize>) -> usize {
        let mut pins = self.lock();
        if pins.is_empty() {
            return 0;
        }
        let now = Instant::now();
        pins.retain(|p| p.until.is_none_or(|t| t > now));
        let pinned = |item: &Item| {
            item.agent != 0
                && pins
                    .iter()
                    .any(|p| p.agent == item.agent && (p.session == 0 || p.session == item.session))
        };
        let (mut keep, rest): (Vec<usize>, Vec<usize>) = order.iter().partition(|&&i| pinned(&items[i]));
        let n = keep.len();
        keep.extend(rest);
        *order = keep;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::types::ItemKind;

    fn item(agent: u32, session: u64) -> Item {
        Item {
            kind: ItemKind::KvBlock,
            key: 0,
            agent,
            session,
            last_access: 0,
            tokens: 32,
            position: 0,
            tier: agentrt_runtime::types::Tier::Gpu,
        }
    }

    #[test]
    fn pinned_items_move_to_the_keep_end_in_order() {
        let table = PinTable::default();
        let items = [item(1, 0), item(2, 5), item(1, 0), item(3, 5)];
        let mut order = vec![3, 2, 1, 0];
        assert_eq!(table.apply(&items, &mut order), 0);
        table.pin(&Pin {
            agent: 1,
            session: 0,
            ttl_ms: u32::MAX,
        });
        assert_eq!(table.apply(&items, &mut order), 2);
        assert_eq!(order, vec![2, 0, 3, 1]);
        table.unpin(&Pin {
            agent: 1,
            session: 0,
            ttl_ms: 0,
        });
        assert!(table.is_empty());
    }

    #[test]
    fn session_pins_and_expiry() {
        let table = PinTable::default();
        table.pin(&Pin {
            agent: 2,
            session: 5,
            ttl_ms: u32::MAX,
        });
        table.pin(&Pin {
            agent: 3,
            session: 0,
            ttl_ms: 0, // expires at once
        });
        let items = [item(2, 4), item(2, 5), item(3, 5)];
        let mut order = vec![0, 1, 2];
        assert_eq!(table.apply(&items, &mut order), 1);
        assert_eq!(order, vec![1, 0, 2]);
    }
}
