//! Telling policies, and carrying out what they answer: side effects off the critical path.

pub mod warmup;
