//! The selection service's JSON, as its 1.6.1 source defines it (`services/selection/types.rs`
//! and `input.rs` of `dynamo-kv-router`). Only the fields agentrt sends or reads are here;
//! absent optional fields are left out so the service applies its own defaults, and fields the
//! service adds later are ignored on reading.
//!
//! Routes: `POST /workers` (register a worker: 201 + its record), `POST /select` (query only; with
//! `advisory` no queue admission), `POST /select_and_reserve` (select and book under
//! `selection_id`), `POST /reservations/{id}/prefill_complete`, `DELETE /reservations/{id}`,
//! `POST /overlap_scores`. Errors are `{"error": "..."}` with a 4xx/5xx status.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /workers`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRequest<'a> {
    /// The replica's [`ReplicaId`](crate::ReplicaId).
    pub worker_id: u64,
    /// The partition the worker serves; selections name the same one.
    pub model_name: &'a str,
    /// Where requests go (the service only reports it back).
    pub endpoint: &'a str,
    /// The replica's KV-event publisher (ZMQ); required for the worker to be schedulable.
    pub kv_events_endpoint: &'a str,
    /// The publisher's replay socket, for the service to fill gaps in the event stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_endpoint: Option<&'a str>,
    /// Must equal the engine's block size: the service hashes prompts into blocks of it.
    pub block_size: u32,
    /// The engine's KV-cache capacity in blocks, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_kv_blocks: Option<u64>,
}

/// A worker's record, as `POST /workers` answers.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkerRecord {
    /// The id it was registered under.
    pub worker_id: u64,
    /// `incomplete`, `schedulable`, `draining`, `unschedulable`.
    pub lifecycle: String,
    /// Why it is not schedulable (e.g. a missing field); empty when it is.
    #[serde(default)]
    pub not_schedulable_reasons: Vec<String>,
}

/// `session_context` of a selection.
#[derive(Debug, Clone, Serialize)]
pub struct SessionContext<'a> {
    /// The request's session, as [`RouteRequest::session`](crate::RouteRequest::session).
    pub session_id: &'a str,
}

/// `affinity_target`: prefer this worker (any data-parallel rank) while it is eligible.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AffinityTarget {
    /// The worker to prefer.
    pub worker_id: u64,
}

/// The body of `POST /select` and `POST /select_and_reserve` (the latter ignores `advisory`).
#[derive(Debug, Clone, Serialize)]
pub struct SelectRequest<'a> {
    /// The partition to choose among (the workers registered under it).
    pub model_name: &'a str,
    /// The booking's id, for `/select_and_reserve`
    /// ([`RouteRequest::booking_id`](crate::RouteRequest::booking_id)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selection_id: Option<&'a str>,
    /// The prompt's token ids, which the service hashes into blocks.
    pub token_ids: &'a [u32],
    /// The prompt's `cache_salt`, which the engine's block hashes start from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<&'a str>,
    /// The answer length expected, counted in the worker's load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_output_tokens: Option<u32>,
    /// The request's session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_context: Option<SessionContext<'a>>,
    /// The worker to prefer ([`Hints::affinity`](crate::Hints::affinity)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity_target: Option<AffinityTarget>,
    /// The only workers to choose from ([`Hints::allowed`](crate::Hints::allowed)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_worker_ids: Option<Vec<u64>>,
    /// Ask without queue admission: where the request would go (a peek).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub advisory: bool,
}

/// How much of the prompt the chosen worker holds, in tokens.
#[derive(Debug, Clone, Deserialize)]
pub struct Overlap {
    /// Prompt tokens the chosen worker has cached, from the start of the prompt.
    pub longest_matched: u32,
}

/// The answer of `/select` and `/select_and_reserve`.
#[derive(Debug, Clone, Deserialize)]
pub struct SelectResponse {
    /// The chosen worker.
    pub worker_id: u64,
    /// The request's `selection_id`, echoed.
    #[serde(default)]
    pub selection_id: Option<String>,
    /// How much of the prompt the chosen worker holds.
    pub overlap: Overlap,
}

/// `POST /overlap_scores`: how many of the prompt's blocks each worker holds.
#[derive(Debug, Clone, Serialize)]
pub struct OverlapRequest<'a> {
    /// The partition whose workers to compare.
    pub model_name: &'a str,
    /// The prompt's token ids.
    pub token_ids: &'a [u32],
    /// The prompt's `cache_salt`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<&'a str>,
}

/// One worker's part of an [`OverlapResponse`].
#[derive(Debug, Clone, Deserialize)]
pub struct WorkerOverlap {
    /// The worker.
    pub worker_id: u64,
    /// Blocks of the prompt it holds in device (GPU) memory.
    pub device_blocks: usize,
}

/// The answer of `POST /overlap_scores`.
#[derive(Debug, Clone, Deserialize)]
pub struct OverlapResponse {
    /// Tokens per block the prompt was hashed in.
    pub block_size: u32,
    /// Blocks in the prompt.
    pub num_blocks: usize,
    /// Each worker's overlap.
    pub workers: Vec<WorkerOverlap>,
}

impl OverlapResponse {
    /// Worker id → blocks of the prompt it holds.
    pub fn by_worker(&self) -> BTreeMap<u64, usize> {
        self.workers.iter().map(|w| (w.worker_id, w.device_blocks)).collect()
    }
}

/// Every error the service sends.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    /// The service's message.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_select_request_carries_only_what_is_set() {
        let body = SelectRequest {
            model_name: "tiny",
            selection_id: Some("r1"),
            token_ids: &[1, 2, 3],
            cache_salt: None,
            expected_output_tokens: Some(16),
            session_context: Some(SessionContext { session_id: "s" }),
            affinity_target: Some(AffinityTarget { worker_id: 7 }),
            allowed_worker_ids: None,
            advisory: false,
        };
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "model_name": "tiny", "selection_id": "r1", "token_ids": [1, 2, 3],
                "expected_output_tokens": 16, "session_context": {"session_id": "s"},
                "affinity_target": {"worker_id": 7}
            })
        );
    }

    #[test]
    fn a_select_answer_as_1_6_1_sends_it_reads() {
        // Captured from `python -m dynamo.select_service` (ai-dynamo-runtime 1.6.1).
        let answer = r#"{"selection_id":"r1","sequence_hashes":[5756925433886871916],"isl_tokens":100,
            "track_prefill_tokens":true,"model_name":"tiny","routing_group":"default","worker_id":2,
            "dp_rank":0,"endpoint":"http://127.0.0.1:9002","block_size":32,
            "overlap":{"longest_matched":64,"gpu":64,"dp":{"0":0},"cpu":0,"disk":0},
            "effective_prefill_tokens":36,"potential_decode_blocks":4}"#;
        let parsed: SelectResponse = serde_json::from_str(answer).unwrap();
        assert_eq!(parsed.worker_id, 2);
        assert_eq!(parsed.selection_id.as_deref(), Some("r1"));
        assert_eq!(parsed.overlap.longest_matched, 64);
    }
}
