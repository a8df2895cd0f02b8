//! What the admin API tells about one tenant, as JSON: its stats (policy, slot counters, policy
//! worker, table sizes) and its policy's forecasts. Both read the tenant's policy handle, which
//! waits for the slot's current call: callers run them on a blocking thread.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use agentrt_runtime::types::{Forecast, ForecastKind};
use agentrt_runtime::Primitive;

use crate::tenant::Tenant;

/// The longest forecast horizon the admin API asks a policy for, in steps. A policy's `predict`
/// may cost more the further it looks; results are bounded anyway, this keeps one request's work
/// small.
pub const MAX_HORIZON: u32 = 64;

/// The tenant's policy, its slot's counters, its worker's queue and its tables' sizes.
pub fn stats(tenant: &Tenant) -> Value {
    let info = tenant.policy.info();
    let slot = tenant.policy.metrics();
    let calls: Map<String, Value> = Primitive::ALL
        .iter()
        .map(|p| (p.name().to_string(), json!(slot.calls(*p))))
        .collect();
    let errors: Map<String, Value> = slot
        .errors_by_kind()
        .map(|(kind, count)| (kind.to_string(), json!(count)))
        .collect();
    let worker = tenant.worker.stats();
    let (anchors, anchor_bytes) = tenant.agents.anchors();
    let names: HashMap<u32, String> = tenant.agents.named_agents().into_iter().collect();
    // The hashes an operator marks public (`[public] anchors`), and whose agent each is.
    let anchor_list: Vec<Value> = tenant
        .agents
        .anchor_hashes()
        .into_iter()
        .map(|(hash, agent)| json!({ "hash": format!("{hash:016x}"), "agent": names.get(&agent) }))
        .collect();
    let slots: Vec<Value> = tenant
        .extra_slots
        .iter()
        .map(|s| {
            let info = s.policy.info();
            json!({ "slot": s.name, "name": info.name, "version": info.version, "failures": s.worker.stats().failed() })
        })
        .collect();
    json!({
        "tenant": tenant.name,
        "policy": { "name": info.name, "version": info.version },
        "extra_slots": slots,
        "slot": {
            "calls": calls,
            "errors": errors,
            "fallbacks": slot.fallbacks(),
            "restarts": slot.restarts(),
            "calls_skipped": slot.calls_skipped(),
            "circuit_open": slot.circuit_open(),
            "circuit_opens": slot.circuit_opens(),
            "checkpoint_failures": slot.checkpoint_failures(),
            "rollbacks": slot.rollbacks(),
            "memory_bytes": slot.memory_bytes(),
            "log_lines_dropped": slot.log_lines_dropped(),
            "swaps": slot.swaps(),
            "last_swap_pause_us": slot.last_swap_pause().map(|d| d.as_micros() as u64),
            "swap_pause_total_us": slot.swap_pause_total().as_micros() as u64,
        },
        "worker": {
            "queued": worker.queued(),
            "events_observed": worker.observed(),
            "events_dropped": worker.dropped(),
            "observe_failures": worker.failed(),
        },
        "tables": {
            "agents": tenant.agents.agents(),
            "live_sessions": tenant.agents.live_sessions(),
            "sessions_seen": tenant.agents.sessions(),
            "anchors": anchors,
            "anchor_bytes": anchor_bytes,
            "anchor_list": anchor_list,
            "prompt_shapes": tenant.continuations.len(),
            "prompt_shape_bytes": tenant.continuations.bytes(),
        },
    })
}

/// `?horizon=N`: 1 to [`MAX_HORIZON`] steps; 1 (the next step) when absent.
pub fn horizon(query: &HashMap<String, String>) -> Result<u32, String> {
    let Some(raw) = query.get("horizon") else {
        return Ok(1);
    };
    match raw.parse::<u32>() {
        Ok(n) if (1..=MAX_HORIZON).contains(&n) => Ok(n),
        _ => Err(format!(
            "horizon must be a whole number of steps from 1 to {MAX_HORIZON}, e.g. ?horizon=4"
        )),
    }
}

/// The policy's forecasts, each with its agent's name when the tenant's table still knows it.
pub fn forecasts(tenant: &Tenant, horizon: u32, forecasts: &[Forecast]) -> Value {
    let names: HashMap<u32, String> = tenant.agents.named_agents().into_iter().collect();
    let forecasts: Vec<Value> = forecasts
        .iter()
        .map(|f| {
            json!({
                "kind": kind_name(f.kind),
                "agent": f.agent,
                "agent_name": names.get(&f.agent),
                "session": f.session,
                "subject": f.subject,
                // An f32 printed as f64 shows noise digits (0.1 → 0.10000000149011612).
                "probability": (f64::from(f.probability) * 1e6).round() / 1e6,
                "steps": f.steps,
            })
        })
        .collect();
    json!({
        "tenant": tenant.name,
        "policy": tenant.policy.info().name,
        "horizon": horizon,
        "forecasts": forecasts,
    })
}

/// The contract's name of a forecast kind (`wit/policy.wit`).
fn kind_name(kind: ForecastKind) -> &'static str {
    match kind {
        ForecastKind::NextAgent => "next-agent",
        ForecastKind::NextTool => "next-tool",
        ForecastKind::SessionEnd => "session-end",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_horizon_is_one_to_the_maximum_and_defaults_to_the_next_step() {
        assert_eq!(horizon(&query(&[])), Ok(1));
        assert_eq!(horizon(&query(&[("horizon", "1")])), Ok(1));
        assert_eq!(horizon(&query(&[("horizon", "64")])), Ok(MAX_HORIZON));
        for bad in ["0", "65", "-1", "4.5", "", "many", "99999999999"] {
            let error = horizon(&query(&[("horizon", bad)])).unwrap_err();
            assert!(error.contains("from 1 to 64"), "{bad:?}: {error}");
        }
    }
}
