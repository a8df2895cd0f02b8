//! Reading the deployment files without Docker, for the tests that check them
//! (`deploy_recipe.rs`, `deploy_gpu.rs`): Dockerfile instructions by stage, compose services by
//! a few line rules (neither a Docker nor a YAML parser is in the dependency tree; the rules
//! state what the files must keep to), and `agentrt serve` command lines parsed with the real
//! flags.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::Value;

/// `agentrt serve` as the binary parses it (cli/src/main.rs).
#[derive(Parser)]
#[command(name = "agentrt")]
pub enum Agentrt {
    Serve(Box<agentrt_serve::ServeArgs>),
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(1)
        .expect("cli lies one folder below the repository root")
        .to_path_buf()
}

pub fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// One Dockerfile instruction: its keyword and the rest, continuation lines joined.
pub struct Instruction {
    pub keyword: String,
    pub rest: String,
    /// The stage it belongs to (the name after `AS` of the last `FROM`).
    pub stage: String,
}

pub fn dockerfile() -> Vec<Instruction> {
    instructions_of("deploy/Dockerfile")
}

pub fn instructions_of(dockerfile: &str) -> Vec<Instruction> {
    let mut instructions = Vec::new();
    let mut stage = String::new();
    let mut pending = String::new();
    for line in read(dockerfile).lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let text = std::mem::take(&mut pending);
        let (keyword, rest) = text.split_once(' ').unwrap_or((&text, ""));
        let keyword = keyword.to_ascii_uppercase();
        if keyword == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => stage = name.to_string(),
                _ => panic!("every stage is named: FROM {rest}"),
            }
        }
        instructions.push(Instruction {
            keyword,
            rest: rest.trim().to_string(),
            stage: stage.clone(),
        });
    }
    instructions
}

/// A `COPY`'s `--from` stage (if any), sources and destination.
pub fn copy_parts(rest: &str) -> (Option<String>, Vec<String>, String) {
    let mut from = None;
    let mut paths = Vec::new();
    for word in rest.split_whitespace() {
        match word.strip_prefix("--from=") {
            Some(stage) => from = Some(stage.to_string()),
            // Ownership does not change what is copied where.
            None if word.starts_with("--chown=") => {}
            None if word.starts_with("--") => panic!("COPY flag {word} is not understood by this test"),
            None => paths.push(word.to_string()),
        }
    }
    let destination = paths.pop().expect("COPY has a destination");
    (from, paths, destination)
}

pub fn json_array(text: &str, what: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not a JSON array of strings ({e}): {text}"))
}

pub fn last_stage(instructions: &[Instruction]) -> &str {
    &instructions.last().expect("a Dockerfile").stage
}

/// The workspace members listed in Cargo.toml.
pub fn workspace_members() -> Vec<String> {
    let manifest = read("Cargo.toml");
    let start = manifest.find("members = [").expect("a members list");
    let list = &manifest[start..start + manifest[start..].find(']').expect("the list ends")];
    list.lines()
        .skip(1)
        .filter_map(|l| l.trim().strip_suffix(',').map(|m| m.trim_matches('"').to_string()))
        .collect()
}

/// The lines of service `name` in the compose file `file` (two-space indented service keys).
pub fn compose_service_of(file: &str, name: &str) -> Vec<String> {
    let compose = read(file);
    let header = format!("  {name}:");
    let mut lines = compose.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "{file} has no service {name}");
    lines
        .take_while(|l| l.is_empty() || l.starts_with("   ") || l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The value of `key` in a service: a scalar on its line, or a flow sequence (`[...]`) of
/// double-quoted strings, which is JSON, over one or more lines.
pub fn compose_value(service: &[String], key: &str) -> String {
    let prefix = format!("{key}:");
    let at = service
        .iter()
        .position(|l| l.trim_start().starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {key}"));
    let first = service[at].trim_start()[prefix.len()..].trim().to_string();
    if !first.starts_with('[') {
        return first.trim_matches('"').to_string();
    }
    let mut text = first;
    for line in &service[at + 1..] {
        if serde_json::from_str::<Value>(&text).is_ok() {
            break;
        }
        text.push_str(line.trim());
    }
    text
}

/// The `command` of `service` in the compose file `file`.
pub fn compose_command_of(file: &str, service: &str) -> Vec<String> {
    json_array(
        &compose_value(&compose_service_of(file, service), "command"),
        &format!("{file}: {service}'s command"),
    )
}

pub fn parse_serve(args: &[String], what: &str) -> agentrt_serve::ServeArgs {
    let argv = std::iter::once("agentrt".to_string()).chain(args.iter().cloned());
    match Agentrt::try_parse_from(argv) {
        Ok(Agentrt::Serve(args)) => *args,
        Err(e) => panic!("{what}: `agentrt {}` does not parse:\n{e}", args.join(" ")),
    }
}

/// The value after `flag` in an argument list.
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    &args[at + 1]
}

/// The text between `start` and `end` on the first line of `text` that starts with `start`.
pub fn line_value<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(start))
        .and_then(|l| l.strip_suffix(end))
}
