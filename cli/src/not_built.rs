//! A command this binary was built without (its cargo feature off: `cargo xtask demo` builds an
//! `agentrt` for the demo and the simulator alone). The command still parses — whatever follows it
//! is taken as it comes — so that running it says what is missing and how to build a binary that
//! has it, instead of clap's "unrecognized subcommand".

use std::ffi::OsString;

use clap::Args;

/// The arguments of a command that is not in this build.
#[derive(Args)]
pub struct NotBuilt {
    /// Whatever was given to the command (it is not in this build).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<OsString>,
}

/// The error for running `command`, which cargo feature `feature` brings.
pub fn error(command: &str, feature: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "this agentrt was built without `{command}` (cargo feature `{feature}`: `cargo xtask demo` \
         builds one for the demo and the simulator alone); build the whole binary with \
         `cargo build --release -p agentrt` (or use `cargo xtask dist`'s)"
    )
}
