//! `agentrt` — the command-line front of the agent runtime layer.
//!
//! - `agentrt policy check FILE.wasm` — load and validate a policy component, print its world.
//! - `agentrt policy new NAME --lang L` — a policy skeleton in Rust, Python, JavaScript, C or Go:
//!   a standalone project with its SDK vendored, or a policy of the checkout in its `policies/`.
//! - `agentrt policy build [DIR]` — build the policy component in DIR, in any of the five
//!   languages ([`policy_build`]).
//! - `agentrt policy test FILE.wasm [--trace T]` — the conformance kit: every export on valid and
//!   hostile input, one line per property ([`policy_test`]).
//! - `agentrt demo` — run the built-in policies on a short synthetic multi-agent trace and print
//!   what they observe, score, predict and act on.
//! - `agentrt sim gen|run|table` — the prefix-cache simulator and the evaluation (crate
//!   `agentrt-sim`).
//! - `agentrt serve --upstream URL` — the OpenAI-compatible proxy in front of vLLM (crate
//!   `agentrt-serve`).
//!
//! `demo`, `sim` and `serve` find policy components by name through one
//! [`ComponentLookup`]: `$AGENTRT_COMPONENTS_DIR`, the folders beside this binary, the components
//! built into it ([`embedded`]), then the source tree's build output.
//!
//! `serve` and `policy build` are cargo features (on by default): `cargo xtask demo` builds the
//! binary without them, a third less to compile, and such a binary says how to get them
//! ([`not_built`]).
//!
//! ## Modules in detail
//!
//! The binary: `describe` (forecasts, side effects and failures in words), `policy check` (the fast
//! validator), `policy test` (`policy_test/`, the conformance kit: `inputs` = what is fed, hostile
//! input included; `slot` = calls through the real host, timed, memory read after each; `checks` =
//! the properties, among them whether a snapshot carries what the policy learned (a warning when
//! not) and the `answers` fingerprint that ports of one policy share; `trace` = the built-in replay
//! of ~600 requests and `--trace` (with `--hints`, beside closed-first), through the simulator's
//! harness, the cache sized from the workload so the policy ranks (0 rankings fails as not run);
//! `report` = one line per property), `policy new` (`policy_new`: skeletons from `sdk/templates` —
//! outside a checkout a standalone project with a README per language and the SDK vendored in
//! `agentrt-sdk/` by `policy_sdk`, whose files `build.rs` embeds; in a checkout's `policies/`, a
//! policy of it; `tests/policy_new.rs` builds each language's in-checkout skeleton with xtask and
//! runs the kit on it), `policy build` (`policy_build`: the one component in a folder, through
//! `agentrt-policy-build`, with `--test` the project's own tests and the kit; it prints the
//! contract the component exports; `tests/policy_build.rs` walks new → build --test in every
//! language outside the repository, then `sim table --policies` with the Python one;
//! `tests/closed_first.rs` holds the five closed-first components to the kit, one fingerprint and
//! the native rule's evictions), `demo`, `sim`, `serve` — thin wrappers over the crates;
//! `allocator` = mimalloc as the process's allocator, transparent huge pages off; `build.rs` +
//! `embedded` = the built-in components (`lru`, `ttl`, `cachesage`, `guard`, `fair-share`,
//! `tool-memo`) embedded when they were built first; one `ComponentLookup` for every command
//! (`--components DIR` keeps the built-in baseline `lru`).

mod allocator;
mod demo;
mod describe;
mod embedded;
mod logging;
#[cfg(not(all(feature = "serve", feature = "policy-build")))]
mod not_built;
#[cfg(feature = "policy-build")]
mod policy_build;
mod policy_check;
mod policy_new;
mod policy_sdk;
mod policy_test;

use agentrt_runtime::ComponentLookup;

#[cfg(feature = "serve")]
use clap::CommandFactory;
use clap::{Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Parser)]
#[command(
    name = "agentrt",
    version,
    about = "A policy-driven runtime layer for agentic LLM serving"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with policy components.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Run the built-in policies on a short synthetic multi-agent trace.
    Demo(demo::DemoArgs),
    /// The vLLM-faithful prefix-cache simulator: generate workloads, replay traces, run the table.
    Sim(Box<agentrt_sim::cli::SimArgs>),
    /// The OpenAI-compatible proxy: agent identity, request events and warm-ups in front of vLLM.
    // Boxed: its flags make it several times larger than the other commands.
    #[cfg(feature = "serve")]
    Serve(Box<agentrt_serve::ServeArgs>),
    /// The OpenAI-compatible proxy — not in this build (see `not_built`).
    #[cfg(not(feature = "serve"))]
    Serve(not_built::NotBuilt),
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Load and validate a component; print the world it implements and its exports.
    Check(policy_check::CheckArgs),
    /// Write a working skeleton of a policy in Rust, Python, JavaScript, C or Go into ./NAME: a
    /// project of its own with the SDK vendored in it (in a checkout's policies/: a policy of it).
    New(policy_new::NewArgs),
    /// Build the policy component in DIR (Rust, Python, JavaScript, C or Go, told by its files),
    /// installing the language's toolchain on first use.
    #[cfg(feature = "policy-build")]
    Build(policy_build::BuildArgs),
    /// Build the policy component in DIR — not in this build (see `not_built`).
    #[cfg(not(feature = "policy-build"))]
    Build(not_built::NotBuilt),
    /// The conformance kit: call every export with valid and hostile input and check what the
    /// contract asks; one line per property, exit status 1 when any fails.
    Test(policy_test::TestArgs),
}

fn main() -> std::process::ExitCode {
    allocator::no_transparent_huge_pages();
    // `serve --config FILE`: the file's `[serve]` table gives the flags the command line does not.
    #[cfg(feature = "serve")]
    let argv =
        match agentrt_serve::config_flags::with_file_flags(&Cli::command(), "serve", std::env::args_os().collect()) {
            Ok(argv) => argv,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    #[cfg(not(feature = "serve"))]
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = Cli::parse_from(argv);
    // `policy test` feeds hostile input on purpose and reports each failure in its own lines:
    // the host's line per discarded instance would only repeat them. A policy's own log stays.
    // `serve` also says what an operator must know while it runs — a reload and what it changed,
    // the engine plugin connecting, the eviction socket listening — at `info`, from its own crates.
    let default_filter = match &cli.command {
        Command::Policy {
            command: PolicyCommand::Test(_),
        } => "warn,agentrt_runtime::handle=error",
        #[cfg(feature = "serve")]
        Command::Serve(_) => "warn,agentrt_serve=info,agentrt_eviction=info",
        _ => "warn",
    };
    let agentrt_log = std::env::var("AGENTRT_LOG").ok();
    let log = logging::layer(default_filter, agentrt_log.as_deref());
    let stack = tracing_subscriber::registry().with(log);
    // `serve` exports its spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; the guard
    // flushes the last batch when `main` returns. The exporter's layer only when there is one
    // (`logging` says why).
    #[cfg(feature = "serve")]
    let _telemetry = match &cli.command {
        Command::Serve(_) => match agentrt_serve::telemetry::from_environment() {
            Ok(Some((otlp, guard))) => {
                stack.with(otlp).init();
                Some(guard)
            }
            Ok(None) => {
                stack.init();
                None
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        },
        _ => {
            stack.init();
            None
        }
    };
    #[cfg(not(feature = "serve"))]
    stack.init();
    let components = ComponentLookup::from_environment(embedded::EMBEDDED);
    let result = match cli.command {
        Command::Policy {
            command: PolicyCommand::Check(args),
        } => policy_check::run(args),
        Command::Policy {
            command: PolicyCommand::New(args),
        } => policy_new::run(args),
        #[cfg(feature = "policy-build")]
        Command::Policy {
            command: PolicyCommand::Build(args),
        } => policy_build::run(args),
        #[cfg(not(feature = "policy-build"))]
        Command::Policy {
            command: PolicyCommand::Build(_),
        } => Err(not_built::error("policy build", "policy-build")),
        Command::Policy {
            command: PolicyCommand::Test(args),
        } => policy_test::run(args),
        Command::Demo(args) => demo::run(args, &components),
        Command::Sim(args) => agentrt_sim::cli::run(*args, &components),
        #[cfg(feature = "serve")]
        Command::Serve(args) => agentrt_serve::run(*args, &components),
        #[cfg(not(feature = "serve"))]
        Command::Serve(_) => Err(not_built::error("serve", "serve")),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag and argument of every command, `NAME → path of subcommands`, that has no help
    /// text: a person reading `--help` must learn what each one does without the source.
    fn undocumented(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" || arg.is_hide_set() {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!(
                    "{path} {}",
                    arg.get_long().map_or(id.to_string(), |l| format!("--{l}"))
                ));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_about().is_none() && sub.get_long_about().is_none() && sub.get_name() != "help" {
                out.push(format!("{path} {} (the command itself)", sub.get_name()));
            }
            undocumented(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_flag_and_command_has_help_text() {
        let mut missing = Vec::new();
        undocumented(&super::Cli::command(), "agentrt", &mut missing);
        assert!(missing.is_empty(), "no help text:\n{}", missing.join("\n"));
    }
}
