//! Which tools' results may ever be served from memory: a rule of the host, not of a policy.
//!
//! A policy decides how long a result stays good and which to drop over budget; it never decides
//! that a tool with side effects may be skipped — a tenant may upload any policy, and a memo hit
//! on a tool that writes would silently drop the write. So a tool qualifies only when
//!
//! - the operator denied it nowhere (`--mcp-memo-deny SERVER/TOOL`: always wins), and
//! - its server marks it read-only (MCP annotation `readOnlyHint: true`), or the operator allows it
//!   by name (`--mcp-memo-allow SERVER/TOOL`: for read-only tools their server does not annotate).
//!
//! `idempotentHint` alone does not qualify: it says a repeated call adds no effect, not that a
//! call has none. `set(x, 5)`, `set(x, 7)`, then `set(x, 5)` answered from memory leaves x = 7.
//! An operator who knows better allows the tool by name.

use std::collections::BTreeSet;

use rmcp::model::Tool;

/// The operator's allow and deny lists, as `SERVER/TOOL` names.
#[derive(Clone, Debug, Default)]
pub struct MemoRules {
    /// `--mcp-memo-allow`: memoizable although their server does not mark them read-only.
    pub allow: BTreeSet<String>,
    /// `--mcp-memo-deny`: never memoized; wins over everything.
    pub deny: BTreeSet<String>,
}

/// Whether a tool's results may be memoized, and why (for logs and `docs/mcp.md`'s table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eligibility {
    /// The server marks it read-only.
    ReadOnly,
    /// The operator allows it by name.
    OperatorAllowed,
    /// The operator denies it by name.
    OperatorDenied,
    /// Its annotations do not say read-only (absent, false, or only idempotent).
    MayHaveSideEffects,
}

impl Eligibility {
    /// True when the tool's results may be kept and served from memory.
    pub fn memoizable(self) -> bool {
        matches!(self, Self::ReadOnly | Self::OperatorAllowed)
    }
}

impl MemoRules {
    /// Parse one `SERVER/TOOL` entry of `flag`, naming the flag when it is malformed.
    pub fn parse_entry(raw: &str, flag: &str) -> Result<String, String> {
        match raw.split_once('/') {
            Some((server, tool)) if !server.is_empty() && !tool.is_empty() => Ok(raw.to_string()),
            _ => Err(format!("{flag} {raw:?}: expected SERVER/TOOL (e.g. search/web_search)")),
        }
    }

    /// The rule for `tool` as `server` lists it.
    pub fn eligibility(&self, server: &str, tool: &Tool) -> Eligibility {
        let name = format!("{server}/{}", tool.name);
        if self.deny.contains(&name) {
            return Eligibility::OperatorDenied;
        }
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        if read_only {
            Eligibility::ReadOnly
        } else if self.allow.contains(&name) {
            Eligibility::OperatorAllowed
        } else {
            Eligibility::MayHaveSideEffects
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(annotations: serde_json::Value) -> Tool {
        serde_json::from_value(json!({
            "name": "t", "inputSchema": {"type": "object"}, "annotations": annotations
        }))
        .unwrap()
    }

    #[test]
    fn only_read_only_or_operator_allowed_tools_qualify_and_deny_wins() {
        let rules = MemoRules::default();
        assert_eq!(
            rules.eligibility("s", &tool(json!({"readOnlyHint": true}))),
            Eligibility::ReadOnly
        );
        for side_effects in [
            json!({}),
            json!({"readOnlyHint": false}),
            json!({"idempotentHint": true}),
            json!({"readOnlyHint": false, "idempotentHint": true, "destructiveHint": false}),
        ] {
            assert_eq!(
                rules.eligibility("s", &tool(side_effects.clone())),
                Eligibility::MayHaveSideEffects,
                "{side_effects}"
            );
        }
        let rules = MemoRules {
            allow: ["s/t".to_string()].into(),
            deny: BTreeSet::new(),
        };
        assert_eq!(rules.eligibility("s", &tool(json!({}))), Eligibility::OperatorAllowed);
        assert_eq!(
            rules.eligibility("other", &tool(json!({}))),
            Eligibility::MayHaveSideEffects
        );
        let rules = MemoRules {
            allow: ["s/t".to_string()].into(),
            deny: ["s/t".to_string()].into(),
        };
        assert_eq!(
            rules.eligibility("s", &tool(json!({"readOnlyHint": true}))),
            Eligibility::OperatorDenied
        );
        assert!(!Eligibility::OperatorDenied.memoizable());
    }

    #[test]
    fn malformed_entries_name_the_flag() {
        assert_eq!(MemoRules::parse_entry("a/b", "--mcp-memo-allow").unwrap(), "a/b");
        let error = MemoRules::parse_entry("nope", "--mcp-memo-allow").unwrap_err();
        assert!(
            error.contains("--mcp-memo-allow") && error.contains("SERVER/TOOL"),
            "{error}"
        );
        assert!(MemoRules::parse_entry("/b", "--mcp-memo-deny").is_err());
    }
}
