//! The properties the kit checks, each on fresh instances so that one failure does not become
//! the next property's: what the contract (`wit/policy.wit`) asks of every export, on valid and
//! on hostile input.

use agentrt_runtime::types::{Item, SideEffect};
use agentrt_runtime::PolicyError;

use super::inputs::{self, TYPICAL_BATCH, UNKNOWN_AGENTS};
use super::report::{Check, Line, Problem};
use super::slot::{CallError, Host, Slot};

/// Every property, in order. `huge` is the size of the huge batch.
pub fn all(host: &Host, huge: usize) -> Vec<Line> {
    let mut lines = vec![
        Line::checked("init: an unknown key", init_unknown_key(host)),
        Line::checked("init: junk values", init_junk_values(host)),
        Line::checked("observe: every event kind", observe_stream(host)),
        Line::checked("observe-blocks: packed events", observe_blocks(host)),
        Line::checked("empty batches", empty_batches(host)),
        Line::checked("score: one score per item", score_count(host)),
        Line::checked("unknown agents and sessions", unknown_agents(host)),
        Line::checked(format!("score: a huge batch ({huge} items)"), score_huge(host, huge)),
    ];
    let (deterministic, agree) = determinism_and_agreement(host);
    lines.push(Line::checked("determinism", deterministic));
    lines.push(Line::checked("score-packed = score", agree));
    lines.push(Line::checked("predict", predict(host)));
    lines.push(Line::checked("act", act(host)));
    lines.push(Line::checked("snapshot → restore → snapshot", round_trip(host)));
    lines.push(state_carried(host));
    lines.push(answers(host));
    lines.push(Line::checked("restore: corrupted snapshots", corrupted_restore(host)));
    lines
}

/// A fresh instance that observed the kit's stream. A policy whose observe fails cannot be
/// checked on learned state: those properties are skipped (observe's own line fails).
fn fed(host: &Host) -> Result<Slot<'_>, Problem> {
    let slot = fresh(host)?;
    feed(&slot)?;
    Ok(slot)
}

fn feed(slot: &Slot<'_>) -> Result<(), Problem> {
    let needs = |e: CallError| {
        Problem::Skip(match e {
            CallError::Policy(e) => format!("not run: needs observed events ({})", crate::describe::error(&e)),
            CallError::FailedBefore { export, how } => {
                format!("not run: needs observed events; {export} failed above ({how})")
            }
            CallError::Hung(export) => format!("not run: needs observed events; {export} ran out of its fuel above"),
        })
    };
    slot.observe(&inputs::stream()).map_err(needs)?;
    slot.observe_blocks(&inputs::packed_blocks()).map_err(needs)
}

fn fresh(host: &Host) -> Result<Slot<'_>, Problem> {
    host.fresh()
        .map_err(|e| Problem::Fail(format!("does not start: {}", crate::describe::error(&e))))
}

/// Start an instance with the kit's configuration plus `extra` (replacing a key it has).
fn start_with(host: &Host, extra: Vec<(String, String)>) -> Result<(), PolicyError> {
    let mut config = host.config().clone();
    config.init.retain(|(k, _)| !extra.iter().any(|(junk, _)| junk == k));
    config.init.extend(extra);
    host.fresh_with(config).map(drop)
}

const UNKNOWN_KEY: &str = "agentrt-conformance-unknown-key";

/// A key the policy cannot know gives an error or is ignored, never a trap; the contract asks
/// that the error name the key.
fn init_unknown_key(host: &Host) -> Check {
    match start_with(host, vec![(UNKNOWN_KEY.into(), "1".into())]) {
        Ok(()) => Ok(format!("{UNKNOWN_KEY}=1: ignored")),
        Err(PolicyError::Rejected { message, .. }) if message.contains(UNKNOWN_KEY) => {
            Ok(format!("{UNKNOWN_KEY}=1: refused, naming it ({})", one_line(&message)))
        }
        Err(PolicyError::Rejected { message, .. }) => Ok(format!(
            "{UNKNOWN_KEY}=1: refused ({}), but the contract asks that the message name the key",
            one_line(&message)
        )),
        Err(e) => Err(Problem::Fail(format!(
            "{UNKNOWN_KEY}=1: {}",
            crate::describe::error(&e)
        ))),
    }
}

/// Junk for each key the user configured (the only keys the kit knows), and an empty key with a
/// 64 KiB value: an error or ignored, never a trap.
fn init_junk_values(host: &Host) -> Check {
    let mut junk: Vec<(String, String)> = host
        .config()
        .init
        .iter()
        .map(|(k, _)| (k.clone(), "\u{0}not a value\u{7f}".to_string()))
        .collect();
    junk.push((String::new(), "x".repeat(64 << 10)));
    let keys: Vec<String> = junk.iter().map(|(k, _)| format!("{k:?}")).collect();
    let what = format!("junk for {}", keys.join(", "));
    match start_with(host, junk) {
        Ok(()) => Ok(format!("{what}: ignored")),
        Err(PolicyError::Rejected { message, .. }) => Ok(format!("{what}: refused ({})", one_line(&message))),
        Err(e) => Err(Problem::Fail(format!("{what}: {}", crate::describe::error(&e)))),
    }
}

fn observe_stream(host: &Host) -> Check {
    let slot = fresh(host)?;
    let events = inputs::stream();
    slot.observe(&events)?;
    Ok(format!(
        "{} events, of every one of the contract's {} kinds",
        events.len(),
        inputs::kinds(&events)
    ))
}

fn observe_blocks(host: &Host) -> Check {
    let slot = fresh(host)?;
    let packed = inputs::packed_blocks();
    slot.observe_blocks(&packed)?;
    Ok(format!("{} block events (stored, touched, removed)", packed.len() / 3))
}

fn empty_batches(host: &Host) -> Check {
    let slot = fresh(host)?;
    slot.observe(&[])?;
    slot.observe_blocks(&[])?;
    // The host checks the count: a score for no item is a contract error.
    slot.score(&[])?;
    slot.score_typed(&[])?;
    Ok("observe, observe-blocks, score-packed and score take an empty batch".into())
}

fn unknown_agents(host: &Host) -> Check {
    let slot = fed(host)?;
    slot.observe(&inputs::unknown_agent_events())?;
    let items = inputs::unknown_agent_items();
    expect_count(&slot.score(&items)?, &items)?;
    Ok(format!(
        "events and items of agents {UNKNOWN_AGENTS:?} and unseen sessions; all blocks cleared"
    ))
}

fn expect_count(scores: &[f32], items: &[Item]) -> Result<(), Problem> {
    // The host refuses a wrong count (`BadOutput`) before this; kept so the property holds alone.
    if scores.len() != items.len() {
        return Err(Problem::Fail(format!(
            "{} scores for {} items",
            scores.len(),
            items.len()
        )));
    }
    Ok(())
}

fn non_finite(scores: &[f32]) -> String {
    match scores.iter().filter(|s| !s.is_finite()).count() {
        0 => String::new(),
        n => format!(" ({n} not finite: ranked last)"),
    }
}

fn score_count(host: &Host) -> Check {
    let slot = fed(host)?;
    let items = inputs::items(TYPICAL_BATCH);
    let scores = slot.score(&items)?;
    expect_count(&scores, &items)?;
    Ok(format!(
        "{} items → {} scores{}",
        items.len(),
        scores.len(),
        non_finite(&scores)
    ))
}

fn score_huge(host: &Host, huge: usize) -> Check {
    let slot = fed(host)?;
    let items = inputs::items(huge);
    let started = std::time::Instant::now();
    let scores = slot.score(&items).map_err(|e| match e {
        CallError::Policy(e @ PolicyError::FuelExhausted { .. }) => Problem::Fail(format!(
            "{}: a ranking this large would fall back to LRU",
            crate::describe::error(&e)
        )),
        other => Problem::from(other),
    })?;
    expect_count(&scores, &items)?;
    Ok(format!(
        "{} scores in {}",
        scores.len(),
        crate::describe::millis(started.elapsed())
    ))
}

/// Where two lists of scores first differ, bit for bit (NaN equals NaN of the same bits).
fn first_difference(a: &[f32], b: &[f32]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{} scores vs {}", a.len(), b.len()));
    }
    let differing: Vec<usize> = (0..a.len()).filter(|&i| a[i].to_bits() != b[i].to_bits()).collect();
    let &first = differing.first()?;
    Some(format!(
        "{} of {} scores differ (first: item {first}, {} vs {})",
        differing.len(),
        a.len(),
        a[first],
        b[first]
    ))
}

/// Two fresh instances fed alike (with the same `random-seed`) answer alike; and `score` gives
/// exactly what `score-packed` does, on a third.
fn determinism_and_agreement(host: &Host) -> (Check, Check) {
    let twins = match host.twins(3) {
        Ok(twins) => twins,
        Err(e) => {
            let failed = || Err(Problem::Fail(format!("does not start: {e:#}")));
            return (failed(), failed());
        }
    };
    for slot in &twins {
        if let Err(p) = feed(slot) {
            let skipped = |p: &Problem| match p {
                Problem::Fail(why) | Problem::Skip(why) => Err(Problem::Skip(why.clone())),
            };
            return (skipped(&p), skipped(&p));
        }
    }
    let items = inputs::items(TYPICAL_BATCH);
    let scored = (
        twins[0].score(&items),
        twins[1].score(&items),
        twins[2].score_typed(&items),
    );
    let (a, b, typed) = match scored {
        (Ok(a), Ok(b), typed) => (a, b, typed),
        (Err(e), _, _) | (_, Err(e), _) => {
            let problem = Problem::from(e);
            let skip = match &problem {
                Problem::Fail(why) => format!("not run: {why}"),
                Problem::Skip(why) => why.clone(),
            };
            return (Err(problem), Err(Problem::Skip(skip)));
        }
    };
    let deterministic = compare_twins(&twins[0], &twins[1], &a, &b);
    let agree = match (&deterministic, typed) {
        (Err(_), _) => Err(Problem::Skip(
            "not run: two instances fed alike disagree (above): nothing to compare with".into(),
        )),
        (Ok(_), Err(e)) => Err(Problem::from(e)),
        (Ok(_), Ok(typed)) => match first_difference(&a, &typed) {
            None => Ok(format!("{} items: identical, bit for bit", items.len())),
            Some(diff) => Err(Problem::Fail(format!("score-packed vs score: {diff}"))),
        },
    };
    (deterministic, agree)
}

fn compare_twins(x: &Slot<'_>, y: &Slot<'_>, a: &[f32], b: &[f32]) -> Check {
    if let Some(diff) = first_difference(a, b) {
        return Err(Problem::Fail(format!("scores: {diff}")));
    }
    if x.snapshot()? != y.snapshot()? {
        return Err(Problem::Fail("snapshots differ".into()));
    }
    if x.predict(8)? != y.predict(8)? {
        return Err(Problem::Fail("forecasts differ".into()));
    }
    if x.act()? != y.act()? {
        return Err(Problem::Fail("side effects differ".into()));
    }
    Ok("two fresh instances fed alike: the same scores, snapshot, forecasts and side effects".into())
}

fn probability_ok(p: f32) -> bool {
    (0.0..=1.0).contains(&p)
}

fn predict(host: &Host) -> Check {
    let slot = fed(host)?;
    let mut counts = Vec::new();
    for horizon in [0, 1, 8, 64] {
        let forecasts = slot.predict(horizon)?;
        if let Some(f) = forecasts.iter().find(|f| !probability_ok(f.probability)) {
            return Err(Problem::Fail(format!(
                "horizon {horizon}: a forecast with probability {} (not in [0, 1])",
                f.probability
            )));
        }
        counts.push(format!("{horizon} → {}", forecasts.len()));
    }
    Ok(format!("forecasts by horizon: {}", counts.join(", ")))
}

fn act(host: &Host) -> Check {
    let slot = fed(host)?;
    let effects = slot.act()?;
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for effect in &effects {
        let (kind, probability) = match effect {
            SideEffect::WarmPrefix(w) => ("warm-prefix", Some(w.probability)),
            SideEffect::Pin(_) => ("pin", None),
            SideEffect::Unpin(_) => ("unpin", None),
            SideEffect::Preload(p) => ("preload", Some(p.probability)),
            SideEffect::Hedge(h) => ("hedge", Some(h.probability)),
            SideEffect::SetPriority(_) => ("set-priority", None),
            SideEffect::Deny(_) => ("deny", None),
        };
        if let Some(p) = probability.filter(|p| !probability_ok(*p)) {
            return Err(Problem::Fail(format!("a {kind} with probability {p} (not in [0, 1])")));
        }
        *kinds.entry(kind).or_default() += 1;
    }
    if kinds.is_empty() {
        return Ok("no side effects".into());
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    Ok(kinds.join(", "))
}

fn round_trip(host: &Host) -> Check {
    let learned = fed(host)?;
    let state = learned.snapshot()?;
    let other = fresh(host)?;
    other.restore(&state)?;
    let again = other.snapshot()?;
    if again != state {
        let at = state
            .iter()
            .zip(&again)
            .position(|(a, b)| a != b)
            .unwrap_or(state.len().min(again.len()));
        return Err(Problem::Fail(format!(
            "{} bytes in, {} bytes out of a fresh instance; first difference at byte {at}",
            state.len(),
            again.len()
        )));
    }
    Ok(format!(
        "{} bytes, the same from a fresh instance that restored them",
        state.len()
    ))
}

const ANSWERS: &str = "answers";

/// A fingerprint of what the policy answers after the kit's stream — the scores of a typical
/// batch, its snapshot, forecasts and side effects — so that two components can be compared: a
/// policy ported to another language answers the kit alike when its fingerprint is the same.
/// The batch leaves out `session` items: only the current line has words for them, and a port
/// built on an older line (every SDK but Rust's, today) would score them 0 through the host.
fn answers(host: &Host) -> Line {
    let fingerprint = || -> Result<u64, Problem> {
        let slot = fed(host)?;
        let mut hash = Fnv::default();
        let items: Vec<_> = inputs::items(TYPICAL_BATCH)
            .into_iter()
            .filter(|i| i.kind != agentrt_runtime::types::ItemKind::Session)
            .collect();
        for score in slot.score(&items)? {
            hash.add(&score.to_bits().to_le_bytes());
        }
        hash.add(&slot.snapshot()?);
        for f in slot.predict(8)? {
            let probability = u64::from(f.probability.to_bits());
            hash.add_u64s(&[
                f.kind as u64,
                f.session,
                f.agent.into(),
                f.subject,
                f.steps.into(),
                probability,
            ]);
        }
        for effect in slot.act()? {
            hash.add_effect(&effect);
        }
        Ok(hash.0)
    };
    match fingerprint() {
        Ok(hash) => Line::info(
            ANSWERS,
            format!(
                "fingerprint {hash:016x} (scores of the {TYPICAL_BATCH} items less the sessions, snapshot, forecasts \
                 and side effects after the stream): a port of this policy answers the kit alike when it has the same"
            ),
        ),
        Err(problem) => Line::checked(ANSWERS, Err(problem)),
    }
}

/// FNV-1a, 64 bits: a fingerprint that is the same on every machine and in every version.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn add_u64s(&mut self, words: &[u64]) {
        for w in words {
            self.add(&w.to_le_bytes());
        }
    }

    /// A side effect, every field exactly (its kind first).
    fn add_effect(&mut self, effect: &SideEffect) {
        let p = |probability: f32| u64::from(probability.to_bits());
        match effect {
            SideEffect::WarmPrefix(w) => self.add_u64s(&[0, w.agent.into(), w.anchor_hash, p(w.probability)]),
            SideEffect::Pin(x) => self.add_u64s(&[1, x.agent.into(), x.session, x.ttl_ms.into()]),
            SideEffect::Unpin(x) => self.add_u64s(&[2, x.agent.into(), x.session, x.ttl_ms.into()]),
            SideEffect::Preload(x) => {
                self.add_u64s(&[3, p(x.probability)]);
                self.add(x.model.as_bytes());
            }
            SideEffect::Hedge(h) => self.add_u64s(&[4, h.session, h.agent.into(), p(h.probability)]),
            SideEffect::SetPriority(x) => self.add_u64s(&[5, x.session, x.priority as u64]),
            SideEffect::Deny(d) => {
                self.add_u64s(&[6, d.session]);
                self.add(d.reason.as_bytes());
            }
        }
    }
}

const CARRIED: &str = "snapshot: carries what it learned";

/// What a policy learned reaches the next instance through its snapshot: restored from it, a
/// fresh instance scores as the one that learned. The contract does not ask it (a policy may
/// choose to start over), so a policy whose scores changed with what it observed but whose
/// snapshot does not carry that is warned, not failed: on a hot swap or a restart it starts over.
fn state_carried(host: &Host) -> Line {
    match compare_restored(host) {
        Ok(Ok(held)) => Line::checked(CARRIED, Ok(held)),
        Ok(Err(warning)) => Line::warning(CARRIED, warning),
        Err(problem) => Line::checked(CARRIED, Err(problem)),
    }
}

/// `Ok(Ok(what held))`, `Ok(Err(the warning))`, or why it could not be compared.
fn compare_restored(host: &Host) -> Result<Result<String, String>, Problem> {
    let items = inputs::items(TYPICAL_BATCH);
    let learned = fed(host)?;
    let state = learned.snapshot()?;
    let taught = learned.score(&items)?;
    let untaught = fresh(host)?.score(&items)?;
    if first_difference(&taught, &untaught).is_none() {
        return Ok(Ok(
            "its scores do not depend on what it observed: nothing to carry".into()
        ));
    }
    let restored = fresh(host)?;
    restored.restore(&state)?;
    let Some(diff) = first_difference(&taught, &restored.score(&items)?) else {
        return Ok(Ok(format!(
            "a fresh instance restored from its {} bytes scores as the one that learned",
            state.len()
        )));
    };
    Ok(Err(if state.is_empty() {
        format!(
            "it learned from the events (against a fresh instance's, {diff}) but its snapshot is empty: a \
             hot swap or a restart loses what it learned — write it in snapshot and read it in restore"
        )
    } else {
        format!(
            "restored from its {} bytes, a fresh instance scores otherwise than the one that learned — {diff}: \
             the snapshot leaves out part of what it learned, which a hot swap or a restart loses",
            state.len()
        )
    }))
}

/// Every corruption is refused with an error — not taken for state, not a trap — and the slot
/// answers after each.
fn corrupted_restore(host: &Host) -> Check {
    let slot = fed(host)?;
    let own = slot.snapshot()?;
    let probe = inputs::items(64);
    let mut refusals = Vec::new();
    for (what, bytes) in inputs::corrupted_snapshots(&own) {
        match slot.restore(&bytes) {
            Err(CallError::Policy(PolicyError::Rejected { message, .. })) => refusals.push(one_line(&message)),
            Ok(()) => return Err(Problem::Fail(format!("{what}: accepted as its state"))),
            Err(e) => {
                return Err(match Problem::from(e) {
                    Problem::Fail(why) => Problem::Fail(format!("{what}: {why}")),
                    skip => skip,
                })
            }
        }
        let scores = slot.score(&probe).map_err(|e| match e {
            CallError::Policy(e) => Problem::Fail(format!("after {what}: no answer ({})", crate::describe::error(&e))),
            before => Problem::from(before),
        })?;
        expect_count(&scores, &probe)?;
    }
    Ok(format!(
        "{} refused with an error, still answering after each (e.g. \"{}\")",
        refusals.len(),
        refusals.first().map_or("", String::as_str)
    ))
}

fn one_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_compared_bit_for_bit() {
        assert_eq!(first_difference(&[1.0, f32::NAN], &[1.0, f32::NAN]), None);
        assert_eq!(
            first_difference(&[1.0, 2.0, 3.0], &[1.0, 2.5, 3.5]).as_deref(),
            Some("2 of 3 scores differ (first: item 1, 2 vs 2.5)")
        );
        assert!(first_difference(&[0.0], &[-0.0]).is_some(), "bit for bit: -0 is not 0");
        assert_eq!(first_difference(&[1.0], &[]).as_deref(), Some("1 scores vs 0"));
    }
}
