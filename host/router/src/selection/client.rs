//! The client of Dynamo's selection service: registers the replicas, asks where each request
//! goes, and reports its booking's progress. Every call runs under the client's timeout; every
//! failure is a [`RouterError`] naming the service's URL and the route.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::wire;
use crate::replica::{ReplicaId, Replicas};
use crate::router::{Hints, Route, RouteRequest, Router, RouterError, RouterFuture};

/// A selection service at `url` for one model's replicas.
#[derive(Debug, Clone)]
pub struct SelectionClient {
    url: String,
    model: String,
    http: reqwest::Client,
    timeout: Duration,
    replicas: Replicas,
}

impl SelectionClient {
    /// `model` is the service's partition (`model_name`) the replicas are registered under.
    pub fn new(url: &str, model: &str, replicas: Replicas, timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .build()
            .expect("a plain HTTP client builds");
        Self {
            url: url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            http,
            timeout,
            replicas,
        }
    }

    /// The service's base URL, without a trailing `/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Register every replica as a worker: its id, URL, KV-event endpoint and the engine's block
    /// size. Each must come back schedulable; an error names the replica and the service's reasons.
    pub async fn register(&self, block_size: u32, total_kv_blocks: Option<u64>) -> Result<(), RouterError> {
        for replica in self.replicas.all() {
            let kv_events = replica.kv_events.as_deref().ok_or_else(|| RouterError::Status {
                url: self.url.clone(),
                route: "POST /workers".into(),
                status: 0,
                message: format!(
                    "replica {} has no KV-event endpoint, so the router cannot see its cache \
                     (give --replica-kv-events {}=ENDPOINT)",
                    replica.name, replica.name
                ),
            })?;
            let body = wire::WorkerRequest {
                worker_id: replica.id.0,
                model_name: &self.model,
                endpoint: &replica.url,
                kv_events_endpoint: kv_events,
                replay_endpoint: None,
                block_size,
                total_kv_blocks,
            };
            let record: wire::WorkerRecord = self.call(Method::POST, "/workers", Some(&body)).await?;
            if record.lifecycle != "schedulable" {
                return Err(RouterError::Status {
                    url: self.url.clone(),
                    route: "POST /workers".into(),
                    status: 201,
                    message: format!(
                        "replica {} (worker {}) is {}: {}",
                        replica.name,
                        record.worker_id,
                        record.lifecycle,
                        record.not_schedulable_reasons.join("; ")
                    ),
                });
            }
        }
        Ok(())
    }

    /// Blocks of the prompt each replica holds, as the router sees them.
    pub async fn overlap(
        &self,
        token_ids: &[u32],
        cache_salt: Option<&str>,
    ) -> Result<BTreeMap<ReplicaId, usize>, RouterError> {
        let body = wire::OverlapRequest {
            model_name: &self.model,
            token_ids,
            cache_salt,
        };
        let answer: wire::OverlapResponse = self.call(Method::POST, "/overlap_scores", Some(&body)).await?;
        Ok(answer
            .by_worker()
            .into_iter()
            .map(|(id, n)| (ReplicaId(id), n))
            .collect())
    }

    fn select_body<'a>(&'a self, request: &'a RouteRequest, booking: bool, advisory: bool) -> wire::SelectRequest<'a> {
        let Hints { affinity, allowed } = &request.hints;
        wire::SelectRequest {
            model_name: &self.model,
            selection_id: booking.then_some(request.booking_id.as_str()),
            token_ids: &request.token_ids,
            cache_salt: request.cache_salt.as_deref(),
            expected_output_tokens: request.expected_output_tokens,
            session_context: request
                .session
                .as_deref()
                .map(|session_id| wire::SessionContext { session_id }),
            affinity_target: affinity.map(|id| wire::AffinityTarget { worker_id: id.0 }),
            allowed_worker_ids: allowed.as_ref().map(|ids| ids.iter().map(|id| id.0).collect()),
            advisory,
        }
    }

    fn known(&self, worker_id: u64) -> Result<ReplicaId, RouterError> {
        let id = ReplicaId(worker_id);
        match self.replicas.get(id) {
            Some(_) => Ok(id),
            None => Err(RouterError::UnknownReplica(id)),
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, RouterError> {
        let route = format!("{method} {path}");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .timeout(self.timeout);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(body).expect("wire types serialize"));
        }
        let failed = |e: reqwest::Error, route: &str| {
            if e.is_timeout() {
                RouterError::Timeout {
                    url: self.url.clone(),
                    route: route.to_string(),
                    after: self.timeout,
                }
            } else {
                RouterError::Unreachable {
                    url: self.url.clone(),
                    route: route.to_string(),
                    detail: error_chain(&e),
                }
            }
        };
        let response = request.send().await.map_err(|e| failed(e, &route))?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| failed(e, &route))?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_slice::<wire::ErrorBody>(&bytes)
                .map(|b| b.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned());
            return Err(RouterError::Status {
                url: self.url.clone(),
                route,
                status,
                message,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| RouterError::BadAnswer {
            url: self.url.clone(),
            route,
            detail: e.to_string(),
        })
    }
}

/// A reqwest error with its causes ("connection refused" sits a few sources down).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Router for SelectionClient {
    fn route<'a>(&'a self, request: &'a RouteRequest) -> RouterFuture<'a, Route> {
        Box::pin(async move {
            let body = self.select_body(request, true, false);
            let answer: wire::SelectResponse = self.call(Method::POST, "/select_and_reserve", Some(&body)).await?;
            Ok(Route {
                replica: self.known(answer.worker_id)?,
                booking: answer.selection_id.or_else(|| Some(request.booking_id.clone())),
                cached_tokens: Some(answer.overlap.longest_matched),
            })
        })
    }

    fn peek<'a>(&'a self, request: &'a RouteRequest) -> RouterFuture<'a, ReplicaId> {
        Box::pin(async move {
            let body = self.select_body(request, false, true);
            let answer: wire::SelectResponse = self.call(Method::POST, "/select", Some(&body)).await?;
            self.known(answer.worker_id)
        })
    }

    fn prefill_complete<'a>(&'a self, booking: &'a str) -> RouterFuture<'a, ()> {
        Box::pin(async move {
            let path = format!("/reservations/{booking}/prefill_complete");
            let _: serde_json::Value = self.call(Method::POST, &path, None::<&()>).await?;
            Ok(())
        })
    }

    fn release<'a>(&'a self, booking: &'a str) -> RouterFuture<'a, ()> {
        Box::pin(async move {
            let path = format!("/reservations/{booking}");
            let _: serde_json::Value = self.call(Method::DELETE, &path, None::<&()>).await?;
            Ok(())
        })
    }
}
