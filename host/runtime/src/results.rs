//! Bounds on what a policy returns, checked before the host copies it.
//!
//! A result crosses the boundary by *lifting*: the host reads the guest's `(pointer, length)` and
//! copies the elements out of its linear memory. The memory cap bounds what a guest can build, but
//! not what the host copies: 1,024 side effects may all point at the same 60 MiB string, which
//! lifts as 60 GiB. `BoundedList` and `BoundedString` (crate-internal) read the length first and
//! refuse anything over their bound before a byte is copied (`Oversize`, which the instance turns
//! into [`PolicyError::ResultTooLarge`](crate::PolicyError::ResultTooLarge)); under it they lift
//! exactly as `Vec<T>` and `String` do.
//!
//! They implement wasmtime's `ComponentType`/`Lift` by delegating to `Vec<T>`/`String` (the
//! `__internal` types are what wasmtime's own derive macros use).

use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime::ValRaw;

use crate::types::{Deny, Forecast, Hedge, Pin, Preload, SetPriority, SideEffect, WarmPrefix};

/// Most side effects one `act` may return.
pub const MAX_SIDE_EFFECTS: usize = 1024;
/// Longest string inside a side effect (a model name, a deny reason), in bytes.
pub const MAX_SIDE_EFFECT_STRING_BYTES: usize = 4096;
/// Most forecasts one `predict` may return.
pub const MAX_FORECASTS: usize = 4096;
/// Most scores one `score-packed` may return: the most items the host scores in one call (a
/// million KV blocks is over 16 TB of KV cache at vLLM's usual 16-token blocks).
pub const MAX_SCORES: usize = 1 << 20;
/// Largest snapshot, in bytes (CacheSage's is ≤ 1 MB at 10,000 agents).
pub const MAX_SNAPSHOT_BYTES: usize = 16 << 20;

/// A result over its bound; `what` names the part (e.g. `side effects`).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {len}, over the limit of {max}")]
pub(crate) struct Oversize {
    pub what: &'static str,
    pub len: usize,
    pub max: usize,
}

/// `list<T>` of at most `MAX` elements.
pub(crate) struct BoundedList<T, const MAX: usize>(pub Vec<T>);

/// `string` of at most `MAX` bytes.
pub(crate) struct BoundedString<const MAX: usize>(pub String);

/// What a bounded value is called in an [`Oversize`] error.
pub(crate) trait Named {
    const WHAT: &'static str;
}

impl Named for SideEffectResult {
    const WHAT: &'static str = "side effects";
}
impl Named for Forecast {
    const WHAT: &'static str = "forecasts";
}
impl Named for f32 {
    const WHAT: &'static str = "scores";
}
impl Named for u8 {
    const WHAT: &'static str = "snapshot bytes";
}

/// The length half of a lowered `(pointer, length)` pair, in flat form or in memory.
fn flat_len(src: &[ValRaw; 2]) -> usize {
    src[1].get_u32() as usize
}

fn memory_len(bytes: &[u8]) -> usize {
    u32::from_le_bytes(bytes[4..8].try_into().expect("a pointer pair is 8 bytes")) as usize
}

fn check(what: &'static str, len: usize, max: usize) -> wasmtime::Result<()> {
    if len > max {
        return Err(wasmtime::Error::new(Oversize { what, len, max }));
    }
    Ok(())
}

// SAFETY: same representation and type check as `Vec<T>`, which does the lifting.
unsafe impl<T: ComponentType, const MAX: usize> ComponentType for BoundedList<T, MAX> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <Vec<T> as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: checks the length, then delegates to `Vec<T>`.
unsafe impl<T: Lift + Named, const MAX: usize> Lift for BoundedList<T, MAX> {
    fn linear_lift_from_flat(cx: &mut LiftContext<'_>, ty: InterfaceType, src: &Self::Lower) -> wasmtime::Result<Self> {
        check(T::WHAT, flat_len(src), MAX)?;
        <Vec<T> as Lift>::linear_lift_from_flat(cx, ty, src).map(Self)
    }

    fn linear_lift_from_memory(cx: &mut LiftContext<'_>, ty: InterfaceType, bytes: &[u8]) -> wasmtime::Result<Self> {
        check(T::WHAT, memory_len(bytes), MAX)?;
        <Vec<T> as Lift>::linear_lift_from_memory(cx, ty, bytes).map(Self)
    }
}

// SAFETY: same representation and type check as `String`, which does the lifting.
unsafe impl<const MAX: usize> ComponentType for BoundedString<MAX> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <String as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: checks the length, then delegates to `String`. The length of a UTF-8 string is its
// bytes; a guest using another encoding gets at most twice that, still bounded.
unsafe impl<const MAX: usize> Lift for BoundedString<MAX> {
    fn linear_lift_from_flat(cx: &mut LiftContext<'_>, ty: InterfaceType, src: &Self::Lower) -> wasmtime::Result<Self> {
        check("string bytes", flat_len(src), MAX)?;
        <String as Lift>::linear_lift_from_flat(cx, ty, src).map(Self)
    }

    fn linear_lift_from_memory(cx: &mut LiftContext<'_>, ty: InterfaceType, bytes: &[u8]) -> wasmtime::Result<Self> {
        check("string bytes", memory_len(bytes), MAX)?;
        <String as Lift>::linear_lift_from_memory(cx, ty, bytes).map(Self)
    }
}

type EffectString = BoundedString<MAX_SIDE_EFFECT_STRING_BYTES>;

/// `side-effect` as `act` returns it, its strings bounded. Type-checked against the WIT at
/// instantiation, like the generated bindings.
#[derive(ComponentType, Lift)]
#[component(variant)]
pub(crate) enum SideEffectResult {
    #[component(name = "warm-prefix")]
    WarmPrefix(WarmPrefix),
    #[component(name = "pin")]
    Pin(Pin),
    #[component(name = "unpin")]
    Unpin(Pin),
    #[component(name = "preload")]
    Preload(PreloadResult),
    #[component(name = "hedge")]
    Hedge(Hedge),
    #[component(name = "set-priority")]
    SetPriority(SetPriority),
    #[component(name = "deny")]
    Deny(DenyResult),
}

#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct PreloadResult {
    model: EffectString,
    probability: f32,
}

#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct DenyResult {
    session: u64,
    reason: EffectString,
}

impl From<SideEffectResult> for SideEffect {
    fn from(effect: SideEffectResult) -> Self {
        match effect {
            SideEffectResult::WarmPrefix(w) => SideEffect::WarmPrefix(w),
            SideEffectResult::Pin(p) => SideEffect::Pin(p),
            SideEffectResult::Unpin(p) => SideEffect::Unpin(p),
            SideEffectResult::Preload(p) => SideEffect::Preload(Preload {
                model: p.model.0,
                probability: p.probability,
            }),
            SideEffectResult::Hedge(h) => SideEffect::Hedge(h),
            SideEffectResult::SetPriority(s) => SideEffect::SetPriority(s),
            SideEffectResult::Deny(d) => SideEffect::Deny(Deny {
                session: d.session,
                reason: d.reason.0,
            }),
        }
    }
}
