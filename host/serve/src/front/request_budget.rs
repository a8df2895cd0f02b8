//! What one request may cost the proxy to read, beyond its size in bytes.
//!
//! A body's bytes say little about what parsing it costs: 15 MiB of empty Responses input items
//! (`[{},{},…]`, 5.2 M of them) took the proxy to 4.6 GB for 24 s, because every JSON object
//! becomes a map allocation, and the conversation is viewed (and hashed) item by item after.
//! So before a body is parsed its **JSON elements** are counted — objects, arrays and the
//! values inside them, by one pass over the bytes that allocates nothing ([`agentrt_guards::json_shape`])
//! — and a body over `--max-json-elements` is refused; that bounds the parsed tree (a few hundred
//! bytes per element at worst). The same pass reads the body's **nesting depth**, refused past
//! `--max-json-depth`: every walk of the parsed tree recurses once per level, and a 16 KiB body
//! can nest 8,000 levels — enough to overflow a worker's stack and abort the process. After parsing, the **conversation items** (messages, input items) and the
//! **tools** of one request are bounded too (`--max-request-items`, `--max-request-tools`), since
//! the proxy keeps the tools and system messages of every agent (its anchor) for warm-ups.
//!
//! Large bodies are parsed on a blocking thread, one at a time per tenant
//! ([`crate::tenant::Tenant::heavy_parse`]): a tenant's heavy requests then share one core
//! between them, and neither the async workers nor another tenant wait on them.

use agentrt_guards::json_shape::{Bounds, Exceeded};
use serde_json::Value;

/// A body at least this large is parsed off the async workers, one at a time per tenant.
pub const HEAVY_BODY_BYTES: usize = 1 << 20;

/// The per-request bounds (`--max-json-elements`, `--max-json-depth`, `--max-request-items`,
/// `--max-request-tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBudget {
    /// JSON elements (objects, arrays and values) one request body may hold; more get 413
    /// before the body is parsed (`--max-json-elements`).
    pub max_json_elements: usize,
    /// How deep objects and arrays may nest in one request body; deeper gets 400 before the body
    /// is parsed (`--max-json-depth`, at most [`agentrt_guards::json_shape::PARSER_DEPTH_LIMIT`]).
    pub max_json_depth: usize,
    /// Messages (or Responses input items) one request may hold; more get 400
    /// (`--max-request-items`).
    pub max_items: usize,
    /// Tools one request may define; more get 400 (`--max-request-tools`).
    pub max_tools: usize,
}

impl Default for RequestBudget {
    fn default() -> Self {
        Self {
            // A 128k-token prompt sent as token ids is 131,072 elements; a long agent conversation
            // (hundreds of messages with content parts) tens of thousands.
            max_json_elements: 262_144,
            max_json_depth: agentrt_guards::json_shape::DEFAULT_MAX_DEPTH,
            // Messages or input items: an agent session compacts long before this.
            max_items: 16_384,
            // OpenAI's API takes at most 128 functions; agents behind many MCP servers a few hundred.
            max_tools: 1_024,
        }
    }
}

/// Why a request was over its budget: the message, and the reason `/metrics` counts it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// The bound that was passed (`json_elements`, `json_depth`, `request_items` or
    /// `request_tools`): the label the refusal is counted under in `/metrics`.
    pub reason: &'static str,
    /// Whether the refusal is for size (413) rather than form (400).
    pub too_large: bool,
    /// For the client: what was over, the bound, and the flag that sets it.
    pub message: String,
}

impl RequestBudget {
    /// Measure `body`'s JSON elements and nesting depth, stopping at the budget: the parse is
    /// refused above either.
    pub fn check_shape(&self, body: &[u8]) -> Result<(), OverBudget> {
        let bounds = Bounds {
            elements: self.max_json_elements,
            depth: self.max_json_depth,
        };
        match bounds.admit(agentrt_guards::json_shape::measure(body, bounds)) {
            Ok(()) => Ok(()),
            Err(Exceeded::Depth) => Err(OverBudget {
                reason: "json_depth",
                too_large: false,
                message: format!(
                    "the request body nests objects and arrays more than {} levels deep (the proxy's \
                     --max-json-depth); flatten it",
                    self.max_json_depth
                ),
            }),
            Err(Exceeded::Elements) => Err(OverBudget {
                reason: "json_elements",
                too_large: true,
                message: format!(
                    "the request body has more than {} JSON elements (objects, arrays and values; the proxy's \
                     --max-json-elements)",
                    self.max_json_elements
                ),
            }),
        }
    }

    /// Bound the parsed `body`'s conversation (`field`: `messages` or `input`) and tools.
    pub fn check_items(&self, body: &Value, field: &str) -> Result<(), OverBudget> {
        let items = body.get(field).and_then(Value::as_array).map_or(0, Vec::len);
        if items > self.max_items {
            return Err(OverBudget {
                reason: "request_items",
                too_large: false,
                message: format!(
                    "`{field}` has {items} items, over the proxy's limit of {} (--max-request-items)",
                    self.max_items
                ),
            });
        }
        let tools = body.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
        if tools > self.max_tools {
            return Err(OverBudget {
                reason: "request_tools",
                too_large: false,
                message: format!(
                    "`tools` has {tools} tools, over the proxy's limit of {} (--max-request-tools)",
                    self.max_tools
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_flood_of_empty_items_is_refused_before_it_is_parsed() {
        let budget = RequestBudget::default();
        let flood = format!(r#"{{"model":"m","input":[{}{{}}]}}"#, "{},".repeat(300_000));
        let e = budget.check_shape(flood.as_bytes()).unwrap_err();
        assert_eq!((e.reason, e.too_large), ("json_elements", true));
        assert!(e.message.contains("--max-json-elements"), "{}", e.message);
        assert!(budget.check_shape(br#"{"model":"m","input":"hi"}"#).is_ok());
    }

    #[test]
    fn a_body_nested_past_the_depth_limit_is_refused_before_it_is_parsed() {
        let budget = RequestBudget::default();
        let deep = format!(
            r#"{{"model":"m","messages":{}1{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = budget.check_shape(deep.as_bytes()).unwrap_err();
        assert_eq!((e.reason, e.too_large), ("json_depth", false));
        assert!(
            e.message.contains("--max-json-depth") && e.message.contains("64"),
            "{}",
            e.message
        );
        let at_limit = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert!(budget.check_shape(at_limit.as_bytes()).is_ok());
    }

    #[test]
    fn items_and_tools_are_bounded_by_their_flags() {
        let budget = RequestBudget {
            max_json_elements: 1 << 20,
            max_json_depth: agentrt_guards::json_shape::DEFAULT_MAX_DEPTH,
            max_items: 2,
            max_tools: 1,
        };
        let e = budget
            .check_items(&json!({"messages": [1, 2, 3]}), "messages")
            .unwrap_err();
        assert!(
            e.message.contains("--max-request-items") && e.message.contains("3 items"),
            "{}",
            e.message
        );
        let e = budget
            .check_items(&json!({"input": [1], "tools": [1, 2]}), "input")
            .unwrap_err();
        assert_eq!(e.reason, "request_tools");
        assert!(budget
            .check_items(&json!({"messages": [1, 2], "tools": [1]}), "messages")
            .is_ok());
    }
}
