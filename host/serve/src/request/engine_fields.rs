//! Request fields that steer the engine rather than describe the call: the operator's and the
//! policies' to set, not a client's.
//!
//! vLLM takes every field of the body it knows, and some of them act on the engine for everyone:
//! `priority` puts a request ahead of every other tenant's (past fair-share and the admission
//! queue), `kv_transfer_params` tells the engine where to fetch KV from (a remote host of the
//! client's choosing), and `request_id` names the request inside the engine, where ids must be
//! unique. SGLang's request schema has its own such fields: `rid` (its request id),
//! `bootstrap_host`/`bootstrap_port`/`bootstrap_room` (where a disaggregated decode fetches KV
//! from), `extra_key` (a prefix-cache namespace: it would join another tenant's cache salt),
//! `data_parallel_rank` (pins a replica rank), `custom_logit_processor` (a pickled callable the
//! engine runs), `return_hidden_states` (the model's activations, megabytes per token) and
//! `lora_path` (a path on the engine's host). They are guarded whatever `--engine` says: one
//! replica behind a router may be the other engine. A client's value for one of these is refused with a 400 naming the field and the flag
//! that allows it (`--client-engine-field NAME`); a value that changes nothing (`null`, a
//! priority of 0) is dropped instead, so clients that spell out defaults keep working. Inside
//! `vllm_xargs` (and SGLang's `custom_params`), the keys agentrt tags requests with (`agentrt_*`: agent, session, warm-up) are
//! agentrt's alone, whatever the allow-list says.
//!
//! `previous_response_id` is not in this list: a tenant may continue its own stored responses,
//! never another tenant's ([`crate::tenant::responses::StoredResponses::owns`]).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::engine::kind::TAG_FIELDS;

/// A field only the operator may let clients set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EngineField {
    /// vLLM's priority scheduling (lower is served earlier).
    Priority,
    /// Disaggregated prefill: where the engine fetches a request's KV from.
    KvTransferParams,
    /// The engine's id of the request.
    RequestId,
    /// SGLang's id of the request (its `request_id`).
    Rid,
    /// SGLang's disaggregation: the prefill server a decode fetches KV from.
    BootstrapHost,
    /// SGLang's disaggregation: that server's port.
    BootstrapPort,
    /// SGLang's disaggregation: the transfer's room id.
    BootstrapRoom,
    /// SGLang's prefix-cache namespace.
    ExtraKey,
    /// SGLang's data-parallel rank to run on.
    DataParallelRank,
    /// SGLang's custom logit processor: a serialized callable the engine runs.
    CustomLogitProcessor,
    /// SGLang's hidden states in the reply.
    ReturnHiddenStates,
    /// SGLang's LoRA adapter, by path on the engine's host.
    LoraPath,
}

impl EngineField {
    /// Every guarded field, in the order a body is checked (and the error lists them).
    pub const ALL: [EngineField; 12] = [
        EngineField::Priority,
        EngineField::KvTransferParams,
        EngineField::RequestId,
        EngineField::Rid,
        EngineField::BootstrapHost,
        EngineField::BootstrapPort,
        EngineField::BootstrapRoom,
        EngineField::ExtraKey,
        EngineField::DataParallelRank,
        EngineField::CustomLogitProcessor,
        EngineField::ReturnHiddenStates,
        EngineField::LoraPath,
    ];

    /// The field's name in a request body (and in `--client-engine-field`).
    pub fn name(self) -> &'static str {
        match self {
            EngineField::Priority => "priority",
            EngineField::KvTransferParams => "kv_transfer_params",
            EngineField::RequestId => "request_id",
            EngineField::Rid => "rid",
            EngineField::BootstrapHost => "bootstrap_host",
            EngineField::BootstrapPort => "bootstrap_port",
            EngineField::BootstrapRoom => "bootstrap_room",
            EngineField::ExtraKey => "extra_key",
            EngineField::DataParallelRank => "data_parallel_rank",
            EngineField::CustomLogitProcessor => "custom_logit_processor",
            EngineField::ReturnHiddenStates => "return_hidden_states",
            EngineField::LoraPath => "lora_path",
        }
    }

    /// Parse a `--client-engine-field` value.
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|f| f.name()).collect();
            format!(
                "{name:?} is not an engine field agentrt guards; the fields are {}",
                names.join(", ")
            )
        })
    }

    /// Whether `value` would leave the engine as if the field were absent.
    fn changes_nothing(self, value: &Value) -> bool {
        match self {
            EngineField::Priority => value.is_null() || value.as_i64() == Some(0),
            EngineField::ReturnHiddenStates => value.is_null() || value.as_bool() == Some(false),
            _ => value.is_null(),
        }
    }
}

/// What the proxy does with a field of a client's request body (docs/security.md's table of the
/// engines' request fields, which tests/hostile/engine_schemas.rs checks against this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// An [`EngineField`]: refused unless the operator allows it (`--client-engine-field`).
    Refused,
    /// Written by the proxy: `cache_salt` (the tenant's salt), the engine tag fields
    /// ([`TAG_FIELDS`]: agentrt's `agentrt_*` keys, a client's own kept), `stream_options`
    /// (`include_usage` asked for, its chunk dropped unless the client asked).
    SetByAgentrt,
    /// Range-checked before it goes upstream ([`crate::request::sampling_fields`]).
    Checked,
    /// A hint dialect's field (vLLM's `kv_hints`, Dynamo's `nvext`, ThunderAgent's `program_id`):
    /// read as lifecycle hints and taken out of the body ([`crate::hints::dialects`]).
    HintDialect,
    /// Passed to the engine as the client sent it.
    Forwarded,
}

/// The fields the proxy writes into a request body ([`Treatment::SetByAgentrt`]).
const SET_BY_AGENTRT: [&str; 4] = [
    crate::tenant::cache_salt::FIELD,
    TAG_FIELDS[0],
    TAG_FIELDS[1],
    "stream_options",
];

/// What the proxy does with `field` of a request to `api`.
pub fn treatment(field: &str, api: crate::request::sampling_fields::Fields) -> Treatment {
    if EngineField::ALL.iter().any(|f| f.name() == field) {
        Treatment::Refused
    } else if crate::hints::dialects::FIELDS.contains(&field) {
        Treatment::HintDialect
    } else if SET_BY_AGENTRT.contains(&field) {
        Treatment::SetByAgentrt
    } else if crate::request::sampling_fields::is_checked(field, api) {
        Treatment::Checked
    } else {
        Treatment::Forwarded
    }
}

/// The prefix of the keys agentrt tags requests with, in any engine's tag field
/// ([`TAG_FIELDS`]: vLLM's `vllm_xargs`, SGLang's `custom_params`).
pub const RESERVED_XARGS_PREFIX: &str = crate::engine::kind::RESERVED_TAG_PREFIX;

/// Which engine fields clients may set (`--client-engine-field`; none by default).
#[derive(Debug, Clone, Default)]
pub struct ClientEngineFields {
    allowed: BTreeSet<EngineField>,
}

impl ClientEngineFields {
    /// Let clients set `fields` (each given with `--client-engine-field`); the rest stay guarded.
    pub fn allowing(fields: impl IntoIterator<Item = EngineField>) -> Self {
        Self {
            allowed: fields.into_iter().collect(),
        }
    }

    /// Check `body`'s engine fields: drop those that change nothing, refuse (naming the field
    /// and the flag) those a client may not set, keep the allowed ones.
    pub fn check(&self, body: &mut Map<String, Value>) -> Result<(), String> {
        for field in EngineField::ALL {
            let Some(value) = body.get(field.name()) else {
                continue;
            };
            if self.allowed.contains(&field) {
                continue;
            }
            if field.changes_nothing(value) {
                body.remove(field.name());
                continue;
            }
            return Err(format!(
                "`{}` steers the engine for every tenant and is set by the proxy's operator and \
                 policies, not by clients (the operator can allow it: --client-engine-field {})",
                field.name(),
                field.name()
            ));
        }
        for field in TAG_FIELDS {
            if let Some(Value::Object(tags)) = body.get(field) {
                if let Some(key) = tags.keys().find(|k| k.starts_with(RESERVED_XARGS_PREFIX)) {
                    return Err(format!(
                        "`{field}.{key}`: keys starting with `{RESERVED_XARGS_PREFIX}` are the proxy's own tags \
                         (agent, session, warm-up); a client cannot set them"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(allowed: &[EngineField], body: Value) -> Result<Value, String> {
        let mut map = body.as_object().unwrap().clone();
        ClientEngineFields::allowing(allowed.iter().copied())
            .check(&mut map)
            .map(|()| Value::Object(map))
    }

    #[test]
    fn engine_fields_are_refused_by_default_naming_the_field_and_the_flag() {
        for (field, value) in [
            ("priority", json!(-100)),
            (
                "kv_transfer_params",
                json!({"remote_host": "10.0.0.9", "remote_port": 5600}),
            ),
            ("request_id", json!("someone-elses-id")),
        ] {
            let e = check(&[], json!({"model": "m", field: value})).unwrap_err();
            assert!(
                e.starts_with(&format!("`{field}`")) && e.contains(&format!("--client-engine-field {field}")),
                "{e}"
            );
        }
    }

    #[test]
    fn sglangs_steering_fields_are_refused_too_and_their_defaults_dropped() {
        for (field, value) in [
            ("rid", json!("someone-elses-id")),
            ("bootstrap_host", json!("attacker.example")),
            ("bootstrap_port", json!(8998)),
            ("bootstrap_room", json!(7)),
            ("extra_key", json!("other-tenant-salt")),
            ("data_parallel_rank", json!(0)),
            (
                "custom_logit_processor",
                json!("gASVKAAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjAJpZJSFlFKULg=="),
            ),
            ("return_hidden_states", json!(true)),
            ("lora_path", json!("/etc/passwd")),
        ] {
            let e = check(&[], json!({"model": "m", field: value})).unwrap_err();
            assert!(e.contains(&format!("--client-engine-field {field}")), "{field}: {e}");
        }
        let body = check(&[], json!({"model": "m", "return_hidden_states": false, "rid": null})).unwrap();
        assert_eq!(body, json!({"model": "m"}));
        let body = check(
            &[EngineField::LoraPath],
            json!({"model": "m", "lora_path": "adapters/a"}),
        )
        .unwrap();
        assert_eq!(body["lora_path"], "adapters/a");
    }

    #[test]
    fn a_default_value_is_dropped_and_an_allowed_field_kept() {
        let body = check(&[], json!({"model": "m", "priority": 0, "kv_transfer_params": null})).unwrap();
        assert_eq!(body, json!({"model": "m"}));
        let body = check(&[EngineField::Priority], json!({"model": "m", "priority": -5})).unwrap();
        assert_eq!(body["priority"], -5);
        assert!(check(&[EngineField::Priority], json!({"request_id": "x"})).is_err());
    }

    #[test]
    fn the_proxys_own_xargs_are_never_a_clients() {
        let e = check(&EngineField::ALL, json!({"vllm_xargs": {"agentrt_warmup": true}})).unwrap_err();
        assert!(e.contains("vllm_xargs.agentrt_warmup"), "{e}");
        let body = check(&[], json!({"vllm_xargs": {"kv_cache_report_mode": "full"}})).unwrap();
        assert_eq!(body["vllm_xargs"]["kv_cache_report_mode"], "full");
    }

    #[test]
    fn the_flag_names_parse_and_an_unknown_one_lists_them() {
        assert_eq!(EngineField::parse("priority"), Ok(EngineField::Priority));
        let e = EngineField::parse("temperature").unwrap_err();
        assert!(e.contains("priority, kv_transfer_params, request_id"), "{e}");
    }
}
