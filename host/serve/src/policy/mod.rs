//! Telling policies, and carrying out what they answer: every slot of a tenant hears the same
//! events ([`feed`]), their side effects are merged and carried out off the critical path
//! ([`effects`]), and a warm-up is a real request to the engine ([`warmup`]).

pub mod effects;
pub mod feed;
pub mod warmup;
