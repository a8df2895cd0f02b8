//! What one request may cost the proxy to read, beyond its size in bytes.
//!
//! A body's bytes say little about what parsing it costs: 15 MiB of empty Responses input items
//! (`[{},{},…]`, 5.2 M of them) took the proxy to 4.6 GB for 24 s, because every JSON object
//! becomes a map allocation, and the conversation is viewed (and hashed) item by item after.
//! So before a body is parsed its **JSON elements** are counted — objects, arrays and the
//! values inside them, by one pass over the bytes that allocates nothing — and a body over
//! `--max-json-elements` is refused; that bounds the parsed tree (a few hundred bytes per
//! element at worst). After parsing, the **conversation items** (messages, input items) and the
//! **tools** of one request are bounded too (`--max-request-items`, `--max-request-tools`), since
//! the proxy keeps the tools and system messages of every agent (its anchor) for warm-ups.
//!
//! Large bodies are parsed on a blocking thread, one at a time per tenant
//! ([`crate::tenant::Tenant::heavy_parse`]): a tenant's heavy requests then share one core
//! between them, and neither the async workers nor another tenant wait on them.

use serde_json::Value;

/// A body at least this large is parsed off the async workers, one at a time per tenant.
pub const HEAVY_BODY_BYTES: usize = 1 << 20;

/// The per-request bounds (`--max-json-elements`, `--max-request-items`, `--max-request-tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBudget {
    /// JSON elements (objects, arrays and values) one request body may hold; more get 413
    /// before the body is parsed (`--max-json-elements`).
    pub max_json_elements: usize,
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
    /// The bound that was passed (`json_elements`, `request_items` or `request_tools`): the
    /// label the refusal is counted under in `/metrics`.
    pub reason: &'static str,
    /// For the client: what was over, the bound, and the flag that sets it.
    pub message: String,
}

impl RequestBudget {
    /// Count `body`'s JSON elements, stopping at the budget: the parse is refused above it.
    pub fn check_elements(&self, body: &[u8]) -> Result<(), OverBudget> {
        if count_elements(body, self.max_json_elements) > self.max_json_elements {
            return Err(OverBudget {
                reason: "json_elements",
                message: format!(
                    "the request body has more than {} JSON elements (objects, arrays and values; the proxy's \
                     --max-json-elements)",
                    self.max_json_elements
                ),
            });
        }
        Ok(())
    }

    /// Bound the parsed `body`'s conversation (`field`: `messages` or `input`) and tools.
    pub fn check_items(&self, body: &Value, field: &str) -> Result<(), OverBudget> {
        let items = body.get(field).and_then(Value::as_array).map_or(0, Vec::len);
        if items > self.max_items {
            return Err(OverBudget {
                reason: "request_items",
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
                message: format!(
                    "`tools` has {tools} tools, over the proxy's limit of {} (--max-request-tools)",
                    self.max_tools
                ),
            });
        }
        Ok(())
    }
}

/// The JSON elements in `bytes` — one per opening bracket and per comma outside strings, plus the
/// first value — counted up to just past `stop` (the caller only needs to know it is over). Not a
/// validator: the parser that follows refuses what is not JSON.
pub fn count_elements(bytes: &[u8], stop: usize) -> usize {
    let mut elements = usize::from(!bytes.iter().all(u8::is_ascii_whitespace));
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' | b',' => {
                elements += 1;
                if elements > stop {
                    return elements;
                }
            }
            _ => {}
        }
    }
    elements
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn elements_are_brackets_and_commas_outside_strings() {
        assert_eq!(count_elements(b"", 100), 0);
        assert_eq!(count_elements(b"7", 100), 1);
        assert_eq!(count_elements(br#"{"a": [1, 2, 3]}"#, 100), 5);
        // Brackets, commas and escaped quotes inside strings are text.
        assert_eq!(count_elements(br#"{"a": "[,{\",]"}"#, 100), 2);
        let flood = format!("[{}{{}}]", "{},".repeat(1000));
        assert_eq!(count_elements(flood.as_bytes(), 100), 101, "stops just past the budget");
    }

    #[test]
    fn a_flood_of_empty_items_is_refused_before_it_is_parsed() {
        let budget = RequestBudget::default();
        let flood = format!(r#"{{"model":"m","input":[{}{{}}]}}"#, "{},".repeat(300_000));
        let e = budget.check_elements(flood.as_bytes()).unwrap_err();
        assert_eq!(e.reason, "json_elements");
        assert!(e.message.contains("--max-json-elements"), "{}", e.message);
        assert!(budget.check_elements(br#"{"model":"m","input":"hi"}"#).is_ok());
    }

    #[test]
    fn items_and_tools_are_bounded_by_their_flags() {
        let budget = RequestBudget {
            max_json_elements: 1 << 20,
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
