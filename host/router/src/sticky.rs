//! The fallback: session-sticky rendezvous hashing. A session's requests all go to one replica
//! (its history stays warm there) without any shared state, and when a replica leaves only its
//! own sessions move. Used when the router is down, slow or wrong ([`crate::fallback`]).
//!
//! The rule: the allowed replica with the highest hash of (session, replica). A request without a
//! session hashes its first 64 tokens instead (the start of its agent's anchor). The affinity
//! hint is the router's to weigh against load; without the router there is no load view, so
//! the fallback keeps sessions whole and ignores it.

use crate::replica::{ReplicaId, Replicas};
use crate::router::{Route, RouteRequest, Router, RouterError, RouterFuture};

/// Tokens hashed in place of a session when a request has none.
const PREFIX_TOKENS: usize = 64;

/// Rendezvous hashing over a fixed set of replicas (the rule is in the module doc).
#[derive(Debug, Clone)]
pub struct SessionSticky {
    replicas: Vec<ReplicaId>,
}

impl SessionSticky {
    /// Over every replica of `replicas`.
    pub fn new(replicas: &Replicas) -> Self {
        Self {
            replicas: replicas.ids().collect(),
        }
    }

    /// The replica for `request`, among `allowed` (all when `None`).
    pub fn choose(&self, request: &RouteRequest) -> Result<ReplicaId, RouterError> {
        let allowed = |id: &ReplicaId| request.hints.allowed.as_ref().is_none_or(|ids| ids.contains(id));
        let key = match &request.session {
            Some(session) => fnv1a(session.as_bytes()),
            None => {
                let prefix = &request.token_ids[..request.token_ids.len().min(PREFIX_TOKENS)];
                fnv1a(&prefix.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>())
            }
        };
        self.replicas
            .iter()
            .copied()
            .filter(allowed)
            .max_by_key(|id| mix(key ^ id.0.rotate_left(17)))
            .ok_or(RouterError::NoReplica)
    }
}

impl Router for SessionSticky {
    fn route<'a>(&'a self, request: &'a RouteRequest) -> RouterFuture<'a, Route> {
        Box::pin(async move {
            Ok(Route {
                replica: self.choose(request)?,
                booking: None,
                cached_tokens: None,
            })
        })
    }

    fn peek<'a>(&'a self, request: &'a RouteRequest) -> RouterFuture<'a, ReplicaId> {
        Box::pin(async move { self.choose(request) })
    }

    fn prefill_complete<'a>(&'a self, _booking: &'a str) -> RouterFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn release<'a>(&'a self, _booking: &'a str) -> RouterFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// splitmix64's finalizer: spreads nearby keys over the whole range.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::Replica;
    use crate::router::Hints;

    fn replicas(names: &[&str]) -> Replicas {
        Replicas::new(
            names
                .iter()
                .map(|n| Replica::parse(&format!("{n}=http://{n}")).unwrap())
                .collect(),
        )
        .unwrap()
    }

    fn session(s: &str) -> RouteRequest {
        RouteRequest {
            session: Some(s.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_session_always_lands_on_one_replica_and_sessions_spread() {
        let sticky = SessionSticky::new(&replicas(&["a", "b", "c"]));
        let mut counts = std::collections::HashMap::new();
        for i in 0..300 {
            let request = session(&format!("s{i}"));
            let first = sticky.choose(&request).unwrap();
            assert_eq!(sticky.choose(&request).unwrap(), first);
            *counts.entry(first).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|&n| n > 60), "{counts:?}");
    }

    #[test]
    fn removing_a_replica_moves_only_its_sessions() {
        let three = SessionSticky::new(&replicas(&["a", "b", "c"]));
        let two = SessionSticky::new(&replicas(&["a", "b"]));
        let c = ReplicaId::of_name("c");
        for i in 0..200 {
            let request = session(&format!("s{i}"));
            let before = three.choose(&request).unwrap();
            if before != c {
                assert_eq!(two.choose(&request).unwrap(), before);
            }
        }
    }

    #[test]
    fn the_allowed_set_is_kept_and_affinity_left_to_the_router() {
        let sticky = SessionSticky::new(&replicas(&["a", "b"]));
        let (a, b) = (ReplicaId::of_name("a"), ReplicaId::of_name("b"));
        let mut request = session("s");
        let hashed = sticky.choose(&request).unwrap();
        let other = if hashed == a { b } else { a };
        request.hints = Hints {
            affinity: Some(other),
            allowed: None,
        };
        assert_eq!(sticky.choose(&request).unwrap(), hashed, "the session's replica");
        request.hints = Hints {
            affinity: None,
            allowed: Some(vec![other]),
        };
        assert_eq!(sticky.choose(&request).unwrap(), other);
        request.hints.allowed = Some(vec![]);
        assert!(matches!(sticky.choose(&request), Err(RouterError::NoReplica)));
    }

    #[test]
    fn without_a_session_the_prompt_start_decides() {
        let sticky = SessionSticky::new(&replicas(&["a", "b", "c"]));
        let anchor: Vec<u32> = (0..64).collect();
        let mut one = RouteRequest {
            token_ids: anchor.clone(),
            ..Default::default()
        };
        let first = sticky.choose(&one).unwrap();
        one.token_ids.extend([900, 901, 902]);
        assert_eq!(sticky.choose(&one).unwrap(), first, "same anchor, same replica");
    }
}
