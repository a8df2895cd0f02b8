//! What identifies a tool call: the tool's hash, and the key of its result.
//!
//! Events carry `tool` = the stable hash of the tool's name (the first 8 bytes of its SHA-256,
//! little-endian: the hash the proxy gives anchors, stable across restarts so policies may keep
//! it) and `args-hash` = the key of the call's result: a hash of the server, the tool and the
//! canonical arguments. That one number is what a memoized result is filed under and what a
//! policy sees as a `tool-result` item's key, so a policy needs no second formula to match them.
//!
//! A 64-bit key can collide; a memoized result also keeps the full 256-bit digest of what it
//! answers and is served only when that matches too.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The stable hash of a tool's name, as `tool-call` / `tool-return` events carry it.
pub fn tool_hash(name: &str) -> u64 {
    first_word(&Sha256::digest(name.as_bytes()))
}

/// The identity of one call's result: which server, which tool, which arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResultKey {
    /// The events' `args-hash` and the `tool-result` item's key.
    pub key: u64,
    /// SHA-256 over the same bytes: what a memo hit must match exactly.
    pub digest: [u8; 32],
}

impl ResultKey {
    /// The key of calling `tool` of `server` with `arguments` (absent arguments = `{}`).
    pub fn of(server: &str, tool: &str, arguments: Option<&Map<String, Value>>) -> Self {
        let mut hasher = Sha256::new();
        // Lengths before names: ("ab", "c") and ("a", "bc") never feed the same bytes.
        for part in [server, tool] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        let mut canonical = String::new();
        match arguments {
            Some(map) => write_object(map, &mut canonical),
            None => canonical.push_str("{}"),
        }
        hasher.update(canonical.as_bytes());
        let digest: [u8; 32] = hasher.finalize().into();
        Self {
            key: first_word(&digest),
            digest,
        }
    }
}

/// Canonical JSON of `value` into `out`: object keys sorted, no whitespace, numbers and strings
/// exactly as received. Deliberately no further normalisation (`1` vs `1.0`, Unicode forms): two
/// spellings a tool might tell apart get two keys — a lost hit at worst, never a wrong answer.
pub fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        // Scalars serialize the same whatever the map order feature says.
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    // Sorted here, not by trusting `Map`'s order: a dependency may turn on `preserve_order`.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        canonical_json(value, out);
    }
    out.push('}');
}

fn first_word(digest: &[u8]) -> u64 {
    u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(server: &str, tool: &str, args: Value) -> ResultKey {
        ResultKey::of(server, tool, args.as_object())
    }

    #[test]
    fn argument_order_and_whitespace_do_not_change_the_key() {
        let a: Value = serde_json::from_str(r#"{"q": "paris", "opts": {"b": 1, "a": [1, {"y": 2, "x": 1}]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"opts":{"a":[1,{"x":1,"y":2}],"b":1},"q":"paris"}"#).unwrap();
        assert_eq!(key("s", "t", a), key("s", "t", b));
    }

    #[test]
    fn server_tool_and_every_argument_change_the_key() {
        let base = key("s", "t", json!({"q": "paris"}));
        assert_ne!(base, key("s2", "t", json!({"q": "paris"})));
        assert_ne!(base, key("s", "t2", json!({"q": "paris"})));
        assert_ne!(base, key("s", "t", json!({"q": "Paris"})));
        assert_ne!(base, key("s", "t", json!({"q": "paris", "n": 1})));
        // Names are length-prefixed: moving a character between server and tool is another key.
        assert_ne!(key("ab", "c", json!({})), key("a", "bc", json!({})));
        // Spellings a tool could tell apart stay apart.
        assert_ne!(key("s", "t", json!({"n": 1})), key("s", "t", json!({"n": 1.0})));
    }

    #[test]
    fn absent_arguments_are_the_empty_object_and_tool_hashes_are_stable() {
        assert_eq!(ResultKey::of("s", "t", None), key("s", "t", json!({})));
        // The first 8 bytes of SHA-256("search"), little-endian: fixed forever (policies keep it).
        assert_eq!(tool_hash("search"), tool_hash("search"));
        assert_ne!(tool_hash("search"), tool_hash("Search"));
        let mut out = String::new();
        canonical_json(&json!({"b": [true, null, "x\"y"], "a": -1.5}), &mut out);
        assert_eq!(out, r#"{"a":-1.5,"b":[true,null,"x\"y"]}"#);
    }
}
