//! The replicas agentrt forwards to, each named by the operator and known to the router by an id
//! derived from that name (so the id survives restarts and reordered flags).

use std::fmt;

/// A replica's id as the router knows it (Dynamo's `worker_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaId(pub u64);

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl ReplicaId {
    /// FNV-1a 64 of the name, cut to 53 bits: JSON readers that hold numbers as doubles (Python's
    /// are exact, JavaScript's are not) still read it exactly.
    pub fn of_name(name: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        Self(hash & ((1 << 53) - 1))
    }
}

/// One upstream engine (a vLLM server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The id the router knows it by, derived from [`Self::name`] ([`ReplicaId::of_name`]).
    pub id: ReplicaId,
    /// The operator's name for it (`NAME` in `--replica NAME=URL`): letters, digits, `-`, `_`.
    pub name: String,
    /// Base URL of its OpenAI-compatible server, e.g. `http://10.0.0.7:8000`.
    pub url: String,
    /// Where it publishes KV events (vLLM's `--kv-events-config` endpoint), for the router to
    /// subscribe to. `None`: the router cannot see its cache.
    pub kv_events: Option<String>,
}

impl Replica {
    /// `NAME=URL`, as `--replica` takes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, url) = text
            .split_once('=')
            .ok_or_else(|| format!("replica {text:?}: expected NAME=URL, e.g. a=http://127.0.0.1:8000"))?;
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(format!(
                "replica {text:?}: the name must be letters, digits, '-' or '_'"
            ));
        }
        let url = url.trim().trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("replica {name}: {url:?} is not an http(s) URL"));
        }
        Ok(Self {
            id: ReplicaId::of_name(name),
            name: name.to_string(),
            url: url.to_string(),
            kv_events: None,
        })
    }
}

/// The replicas, in the order given; names and ids are unique.
#[derive(Debug, Clone, Default)]
pub struct Replicas(Vec<Replica>);

impl Replicas {
    /// The replicas, in the order given; refused when there are none or a name or an id is
    /// repeated.
    pub fn new(replicas: Vec<Replica>) -> Result<Self, String> {
        if replicas.is_empty() {
            return Err("no replicas: give at least one --replica NAME=URL".into());
        }
        for (i, r) in replicas.iter().enumerate() {
            if let Some(other) = replicas[..i].iter().find(|o| o.name == r.name || o.id == r.id) {
                return Err(format!(
                    "replica {:?} is given twice (or its id collides with {:?})",
                    r.name, other.name
                ));
            }
        }
        Ok(Self(replicas))
    }

    /// Attach `NAME=ENDPOINT` (`--replica-kv-events`) to its replica.
    pub fn set_kv_events(&mut self, text: &str) -> Result<(), String> {
        let (name, endpoint) = text
            .split_once('=')
            .ok_or_else(|| format!("KV events {text:?}: expected NAME=ENDPOINT, e.g. a=tcp://127.0.0.1:5557"))?;
        let replica =
            self.0.iter_mut().find(|r| r.name == name.trim()).ok_or_else(|| {
                format!("KV events for {name:?}: no replica of that name (--replica {name}=URL first)")
            })?;
        replica.kv_events = Some(endpoint.trim().to_string());
        Ok(())
    }

    /// Every replica, in the order given.
    pub fn all(&self) -> &[Replica] {
        &self.0
    }

    /// The replica with router id `id`, if any.
    pub fn get(&self, id: ReplicaId) -> Option<&Replica> {
        self.0.iter().find(|r| r.id == id)
    }

    /// The replica the operator named `name`, if any.
    pub fn by_name(&self, name: &str) -> Option<&Replica> {
        self.0.iter().find(|r| r.name == name)
    }

    /// The replicas' router ids, in the order given.
    pub fn ids(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.0.iter().map(|r| r.id)
    }

    /// How many replicas there are (at least one, unless built by `Default`).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True only for `Replicas::default()`: [`Replicas::new`] refuses an empty list.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_name_and_url_and_derives_a_stable_id() {
        let r = Replica::parse("gpu-0=http://127.0.0.1:8000/").unwrap();
        assert_eq!(r.name, "gpu-0");
        assert_eq!(r.url, "http://127.0.0.1:8000");
        assert_eq!(r.id, ReplicaId::of_name("gpu-0"));
        assert!(r.id.0 < 1 << 53);
        assert_ne!(ReplicaId::of_name("a"), ReplicaId::of_name("b"));
    }

    #[test]
    fn bad_replicas_are_refused_by_name() {
        assert!(Replica::parse("http://x").unwrap_err().contains("NAME=URL"));
        assert!(Replica::parse("a=ftp://x").unwrap_err().contains("not an http"));
        assert!(Replica::parse("a b=http://x").unwrap_err().contains("name must be"));
        let twice = vec![
            Replica::parse("a=http://x").unwrap(),
            Replica::parse("a=http://y").unwrap(),
        ];
        assert!(Replicas::new(twice).unwrap_err().contains("given twice"));
        assert!(Replicas::new(vec![]).unwrap_err().contains("no replicas"));
    }

    #[test]
    fn kv_events_attach_to_the_named_replica_only() {
        let mut rs = Replicas::new(vec![Replica::parse("a=http://x").unwrap()]).unwrap();
        rs.set_kv_events("a=tcp://127.0.0.1:5557").unwrap();
        assert_eq!(
            rs.by_name("a").unwrap().kv_events.as_deref(),
            Some("tcp://127.0.0.1:5557")
        );
        assert!(rs.set_kv_events("z=tcp://x").unwrap_err().contains("no replica"));
    }
}
