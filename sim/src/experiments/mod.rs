//! The experiments `agentrt sim` runs, one module per subcommand: each builds its traces, replays
//! them through [`crate::harness`] under the shared [`crate::options`], and writes its table,
//! JSON and plots. Nothing below the experiments depends on them.

pub mod fleet_sweep;
pub mod knee;
pub mod noisy_neighbour;
pub mod run;
pub mod session_flood;
pub mod table;
