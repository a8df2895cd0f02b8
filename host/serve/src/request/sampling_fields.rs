//! The numbers of a request that become the engine's sampling parameters — token limits, `n`,
//! temperature and the rest — checked before anything goes upstream.
//!
//! A client's `max_tokens` of -1, 2^63, 1e308 or `"999"` would otherwise reach vLLM, which
//! coerces some (a string of digits), refuses others only once the request is queued, and
//! treats an enormous limit as "generate until the context is full". The proxy refuses them
//! the way the APIs' own servers do: a 400 naming the field (OpenAI's error carries it as
//! `param`), in the API's error shape. The ranges are those vLLM's `SamplingParams` enforces,
//! narrowed to the API's documented ones where it has them (Anthropic's temperature is 0–1);
//! integers must be JSON integers, and `null` means absent.

use serde_json::{Map, Value};

use crate::identity::agent_api::AgentApi;

/// What one field may hold.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// A JSON integer in `min..=max`.
    Integer { min: i64, max: i64 },
    /// A JSON number in `min..=max`; above `min` when `above_min`.
    Number { min: f64, max: f64, above_min: bool },
    /// `true` or `false`.
    Boolean,
}

/// The largest token limit taken: an engine caps it at its context length anyway.
pub const MAX_TOKEN_LIMIT: i64 = i32::MAX as i64;

const TOKENS: Rule = Rule::Integer {
    min: 1,
    max: MAX_TOKEN_LIMIT,
};
const TOKENS_OR_NONE: Rule = Rule::Integer {
    min: 0,
    max: MAX_TOKEN_LIMIT,
};
const CHOICES: Rule = Rule::Integer { min: 1, max: 128 };
const OPENAI_TEMPERATURE: Rule = Rule::Number {
    min: 0.0,
    max: 2.0,
    above_min: false,
};
const PROBABILITY: Rule = Rule::Number {
    min: 0.0,
    max: 1.0,
    above_min: false,
};
const TOP_P: Rule = Rule::Number {
    min: 0.0,
    max: 1.0,
    above_min: true,
};
const PENALTY: Rule = Rule::Number {
    min: -2.0,
    max: 2.0,
    above_min: false,
};
const REPETITION_PENALTY: Rule = Rule::Number {
    min: 0.0,
    max: 1e4,
    above_min: true,
};
const TOP_K: Rule = Rule::Integer {
    min: -1,
    max: i32::MAX as i64,
};
const SEED: Rule = Rule::Integer {
    min: i64::MIN,
    max: i64::MAX,
};

/// OpenAI chat completions (and vLLM's extensions to it).
const CHAT: &[(&str, Rule)] = &[
    ("max_tokens", TOKENS),
    ("max_completion_tokens", TOKENS),
    ("min_tokens", TOKENS_OR_NONE),
    ("n", CHOICES),
    ("temperature", OPENAI_TEMPERATURE),
    ("top_p", TOP_P),
    ("top_k", TOP_K),
    ("min_p", PROBABILITY),
    ("presence_penalty", PENALTY),
    ("frequency_penalty", PENALTY),
    ("repetition_penalty", REPETITION_PENALTY),
    ("logprobs", Rule::Boolean),
    ("top_logprobs", Rule::Integer { min: 0, max: 20 }),
    ("seed", SEED),
    ("stream", Rule::Boolean),
];

/// OpenAI (legacy) completions.
const COMPLETIONS: &[(&str, Rule)] = &[
    ("max_tokens", TOKENS),
    ("min_tokens", TOKENS_OR_NONE),
    ("n", CHOICES),
    ("best_of", CHOICES),
    ("temperature", OPENAI_TEMPERATURE),
    ("top_p", TOP_P),
    ("top_k", TOP_K),
    ("min_p", PROBABILITY),
    ("presence_penalty", PENALTY),
    ("frequency_penalty", PENALTY),
    ("repetition_penalty", REPETITION_PENALTY),
    ("logprobs", Rule::Integer { min: 0, max: 20 }),
    ("seed", SEED),
    ("stream", Rule::Boolean),
];

/// OpenAI Responses.
const RESPONSES: &[(&str, Rule)] = &[
    ("max_output_tokens", TOKENS),
    ("max_tool_calls", TOKENS),
    ("temperature", OPENAI_TEMPERATURE),
    ("top_p", TOP_P),
    ("top_k", TOP_K),
    ("top_logprobs", Rule::Integer { min: 0, max: 20 }),
    ("stream", Rule::Boolean),
    ("store", Rule::Boolean),
];

/// Anthropic Messages: `max_tokens` is required there.
const MESSAGES: &[(&str, Rule)] = &[
    ("max_tokens", TOKENS),
    (
        "temperature",
        Rule::Number {
            min: 0.0,
            max: 1.0,
            above_min: false,
        },
    ),
    ("top_p", TOP_P),
    (
        "top_k",
        Rule::Integer {
            min: 0,
            max: i32::MAX as i64,
        },
    ),
    ("stream", Rule::Boolean),
];

/// Which API's numbers a body carries: one of the agent APIs, or plain completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    /// One of the agent APIs, each with its own field names and ranges.
    Agent(AgentApi),
    /// Plain completions, `/v1/completions`.
    Completions,
}

/// A field refused: which, and why (for the error's message and `param`).
#[derive(Debug, Clone, PartialEq)]
pub struct BadField {
    /// The field's name in the body: the error's `param`.
    pub field: &'static str,
    /// What is wrong with the field, for the client: its value is described, never repeated.
    pub message: String,
}

fn rules(api: Fields) -> &'static [(&'static str, Rule)] {
    match api {
        Fields::Agent(AgentApi::ChatCompletions) => CHAT,
        Fields::Agent(AgentApi::Responses) => RESPONSES,
        Fields::Agent(AgentApi::Messages) => MESSAGES,
        Fields::Completions => COMPLETIONS,
    }
}

/// Whether `api`'s table checks `field` (docs/security.md's table of the engines' fields).
pub fn is_checked(field: &str, api: Fields) -> bool {
    rules(api).iter().any(|(name, _)| *name == field)
}

/// Check `body`'s numeric fields for `api`; the first one out of its range is the error.
pub fn check(body: &Map<String, Value>, api: Fields) -> Result<(), BadField> {
    let rules = rules(api);
    if api == Fields::Agent(AgentApi::Messages) && body.get("max_tokens").is_none_or(Value::is_null) {
        return Err(BadField {
            field: "max_tokens",
            message: "`max_tokens` is required (the Messages API has no default)".into(),
        });
    }
    for (field, rule) in rules {
        let Some(value) = body.get(*field).filter(|v| !v.is_null()) else {
            continue;
        };
        if let Some(why) = refusal(value, *rule) {
            return Err(BadField {
                field,
                message: format!("`{field}` {why}"),
            });
        }
    }
    Ok(())
}

/// Why `value` breaks `rule`, if it does. The value itself is described, not repeated.
fn refusal(value: &Value, rule: Rule) -> Option<String> {
    let kind = || match value {
        Value::String(_) => "a string",
        Value::Bool(_) => "a boolean",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
        Value::Number(n) if n.is_f64() => "a number with a fraction or exponent",
        _ => "a number",
    };
    match rule {
        Rule::Boolean => (!value.is_boolean()).then(|| format!("must be true or false, not {}", kind())),
        Rule::Integer { min, max } => {
            let range = || format!("must be an integer from {min} to {max}");
            match value.as_i64() {
                Some(n) if (min..=max).contains(&n) => None,
                Some(n) => Some(format!("{}, not {n}", range())),
                // A u64 past i64, a float, a string, …
                None if value.is_u64() => Some(format!("{}, not a larger one", range())),
                None => Some(format!("{}, not {}", range(), kind())),
            }
        }
        Rule::Number { min, max, above_min } => {
            let bounds = if above_min {
                format!("above {min} and at most {max}")
            } else {
                format!("from {min} to {max}")
            };
            match value.as_f64() {
                Some(x) if x <= max && (x > min || (!above_min && x == min)) => None,
                Some(x) => Some(format!("must be a number {bounds}, not {x}")),
                None => Some(format!("must be a number {bounds}, not {}", kind())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bad(api: Fields, body: Value) -> Option<BadField> {
        check(body.as_object().unwrap(), api).err()
    }

    const CHAT_API: Fields = Fields::Agent(AgentApi::ChatCompletions);

    #[test]
    fn token_limits_out_of_range_or_of_the_wrong_type_are_refused_naming_the_field() {
        for value in [
            json!(-1),
            json!(0),
            json!(9_223_372_036_854_775_808u64),
            json!(1e308),
            json!("999"),
        ] {
            let e = bad(CHAT_API, json!({"max_tokens": value})).expect("refused");
            assert_eq!(e.field, "max_tokens");
            assert!(
                e.message
                    .starts_with("`max_tokens` must be an integer from 1 to 2147483647"),
                "{}",
                e.message
            );
        }
        let e = bad(Fields::Agent(AgentApi::Responses), json!({"max_output_tokens": -1})).unwrap();
        assert_eq!(e.field, "max_output_tokens");
        assert!(bad(CHAT_API, json!({"max_tokens": 512, "max_completion_tokens": null})).is_none());
    }

    #[test]
    fn each_api_has_its_own_ranges() {
        assert!(bad(CHAT_API, json!({"temperature": 1.5})).is_none());
        let e = bad(
            Fields::Agent(AgentApi::Messages),
            json!({"max_tokens": 64, "temperature": 1.5}),
        )
        .unwrap();
        assert_eq!(e.field, "temperature");
        assert!(bad(CHAT_API, json!({"top_p": 0})).is_some(), "top_p must be above 0");
        assert!(bad(CHAT_API, json!({"n": 129})).is_some());
        assert!(bad(Fields::Completions, json!({"logprobs": 3})).is_none());
        assert!(
            bad(CHAT_API, json!({"logprobs": 3})).is_some(),
            "chat logprobs is a boolean"
        );
        assert!(bad(CHAT_API, json!({"stream": "yes"})).is_some());
    }

    #[test]
    fn the_messages_api_requires_max_tokens() {
        let e = bad(Fields::Agent(AgentApi::Messages), json!({"messages": []})).unwrap();
        assert_eq!(e.field, "max_tokens");
        assert!(e.message.contains("required"));
    }
}
