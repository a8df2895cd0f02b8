//! Several replicas behind a router (`sim run --replicas N --router …`): N engines, each the
//! usual vLLM-faithful scheduler with its own cache of `--capacity-blocks` and its own instance
//! of the policy, and one router model ([`crate::router_model`]) placing every request.
//!
//! Sessions are driven here, in simulated-time order: a session's next request is due
//! `after_ms` after its previous one finished (on whichever replica), and the router places it
//! when it is due, seeing each replica's cache and load at that moment. Between arrivals the
//! busy replica furthest behind in time takes its next step. A warm-up a replica's policy issues
//! counts, for the `agentrt` router, as the agent's anchor placed there.
//!
//! One simplification: a request due while its replica is mid-step arrives at the step's end, as
//! in the single-engine replay.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::policies::SimPolicy;
use crate::prepare::PreparedTrace;
use crate::router_model::{Arriving, RouterModel, RouterSpec};
use crate::scheduler::{RunResult, Sim, SimConfig};

/// Replay `trace` on `policies.len()` replicas (one policy instance each) behind `router`.
pub fn replay(
    cfg: &SimConfig,
    trace: &PreparedTrace,
    policies: &mut [Box<dyn SimPolicy>],
    router: impl Into<RouterSpec>,
) -> anyhow::Result<RunResult> {
    let router = router.into();
    anyhow::ensure!(!policies.is_empty(), "no replicas");
    anyhow::ensure!(
        cfg.shares.is_none(),
        "cache shares (--share) are not modelled with several replicas"
    );
    let started = Instant::now();
    let mut model = RouterModel::new(router, policies.len(), trace.block_size);
    let mut engines: Vec<Sim> = policies
        .iter_mut()
        .map(|p| Sim::replica(cfg.clone(), trace, p.as_mut()))
        .collect();
    let mut due: BinaryHeap<Reverse<(u64, u32, u32)>> = trace
        .sessions
        .iter()
        .enumerate()
        .map(|(s, session)| {
            let first = &trace.requests[session.requests[0] as usize];
            Reverse((cfg.start_ns(first.after_us), s as u32, 0))
        })
        .collect();
    loop {
        let behind = (0..engines.len())
            .filter(|&i| engines[i].busy())
            .min_by_key(|&i| engines[i].now_ns());
        let next_due = due.peek().map(|Reverse(d)| *d);
        match (next_due, behind) {
            (Some((t, s, index)), behind) if behind.is_none_or(|i| t <= engines[i].now_ns()) => {
                due.pop();
                let replica = place(&mut model, &engines, trace, cfg, s, index, t);
                engines[replica].inject(s, index, t);
            }
            (_, Some(i)) => {
                engines[i].advance_one()?;
                let now = engines[i].now_ns();
                for agent in engines[i].take_warmed() {
                    model.placed(agent, i, now);
                }
                due.extend(engines[i].take_due().into_iter().map(Reverse));
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
    let results = engines
        .into_iter()
        .map(|e| e.finish_replica(started))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut merged = merge(results);
    merged.wall_s = started.elapsed().as_secs_f64();
    tracing::debug!(router = router.kind.name(), hinted = model.hinted, "replicas replayed");
    Ok(merged)
}

/// Ask the router where request `index` of session `s` goes, and record the agent's anchor there.
fn place(
    model: &mut RouterModel,
    engines: &[Sim],
    trace: &PreparedTrace,
    cfg: &SimConfig,
    s: u32,
    index: u32,
    t: u64,
) -> usize {
    let session = &trace.sessions[s as usize];
    let request = &trace.requests[session.requests[index as usize] as usize];
    // A session's next call is due its think time after the previous one finished.
    let idle_ns = (index > 0).then(|| cfg.after_ns(request.after_us));
    let cached: Vec<usize> = engines
        .iter()
        .map(|e| e.cached_prefix_blocks(&request.prompt.hashes))
        .collect();
    let loads: Vec<_> = engines.iter().map(|e| e.load()).collect();
    let replica = model.choose(
        &Arriving {
            session: session.id,
            idle_ns,
            agent: request.agent,
            prompt_tokens: request.prompt.tokens,
            prompt_hashes: &request.prompt.hashes,
            block_size: trace.block_size,
            cached_blocks: &cached,
            loads: &loads,
        },
        t,
    );
    model.placed(request.agent, replica, t);
    model.session_placed(session.id, replica, t);
    replica
}

/// One result from the replicas': sums of counts, each trace request's latencies from the
/// replica that served it, the longest makespan, the mean busy time.
fn merge(results: Vec<RunResult>) -> RunResult {
    let replicas = results.len() as f64;
    let mut it = results.into_iter();
    let mut total = it.next().expect("at least one replica");
    for r in it {
        total.prompt_tokens += r.prompt_tokens;
        total.hit_tokens += r.hit_tokens;
        total.output_tokens += r.output_tokens;
        for (mine, theirs) in total.ttft_us.iter_mut().zip(&r.ttft_us) {
            if mine.is_nan() {
                *mine = *theirs;
            }
        }
        for (mine, theirs) in total.turn_us.iter_mut().zip(&r.turn_us) {
            if mine.is_nan() {
                *mine = *theirs;
            }
        }
        total.makespan_us = total.makespan_us.max(r.makespan_us);
        total.busy_us += r.busy_us;
        total.sessions_ended += r.sessions_ended;
        total.steps += r.steps;
        total.preemptions += r.preemptions;
        total.evictions += r.evictions;
        total.warmups += r.warmups;
        total.warmup_tokens += r.warmup_tokens;
        total.warmups_skipped += r.warmups_skipped;
        total.rejected += r.rejected;
        total.effects_ignored += r.effects_ignored;
        for (mine, theirs) in total.tenants.iter_mut().zip(&r.tenants) {
            mine.prompt_tokens += theirs.prompt_tokens;
            mine.hit_tokens += theirs.hit_tokens;
            mine.requests += theirs.requests;
            mine.turn_us_sum += theirs.turn_us_sum;
        }
        total.admission_order.extend(r.admission_order);
    }
    // Utilisation is per engine: the replicas' mean busy time.
    total.busy_us /= replicas;
    total
}

/// How many replicas, behind which router.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaSetup {
    pub replicas: usize,
    pub router: RouterSpec,
}

/// Every policy of `policies` on `setup`'s replicas behind its router (Bélády, an offline bound
/// for one cache, has no meaning here and is refused). `done` is called after each.
pub fn run_all(
    host: &crate::harness::PolicyHost,
    trace: &PreparedTrace,
    cfg: &SimConfig,
    policies: &[crate::policies::PolicySpec],
    rerank: crate::policies::Rerank,
    setup: ReplicaSetup,
    mut done: impl FnMut(&RunResult),
) -> anyhow::Result<Vec<RunResult>> {
    use crate::policies::PolicySpec;
    let mut results = Vec::new();
    for policy in policies {
        let mut instances: Vec<Box<dyn SimPolicy>> = Vec::new();
        for r in 0..setup.replicas {
            instances.push(match policy {
                PolicySpec::NativeLru => Box::new(crate::policies::NativeLru),
                PolicySpec::ClosedFirst => Box::new(crate::policies::ClosedFirstLru::default()),
                PolicySpec::Wasm { name, component, init } => {
                    Box::new(host.start(&format!("{name}/r{r}"), component, init, trace.block_size, rerank)?)
                }
                PolicySpec::Belady => anyhow::bail!(
                    "belady is an offline bound for one cache; leave it out with --replicas (--policies lru,cachesage)"
                ),
            });
        }
        let mut result = replay(cfg, trace, &mut instances, setup.router)?;
        result.policy = policy.name().to_string();
        done(&result);
        results.push(result);
    }
    Ok(results)
}
