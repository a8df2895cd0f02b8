//! docs/security.md's table of the engines' request fields, checked against the engines' own
//! request classes (vLLM's and SGLang's `ChatCompletionRequest` and `CompletionRequest`) where
//! their Python code is installed, and against the proxy's classification of each field
//! ([`agentrt_serve::request::engine_fields::treatment`]). A field an engine adds (an upgrade)
//! fails the test until the table says what the proxy does with it; so does a table row whose
//! treatment is not what the code does.
//!
//! The fields are read from the engines' source with Python's ast
//! (`fixtures/engine_request_fields.py`): importing vLLM takes 15–40 s, and SGLang's protocol
//! module needs the `openai` package. An engine whose venv is missing is skipped, saying so
//! (`AGENTRT_VLLM_VENV`, `AGENTRT_SGLANG_VENV`; default `~/.cache/agentrt/venv-vllm`, `-sglang`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentrt_serve::identity::agent_api::AgentApi;
use agentrt_serve::request::engine_fields::{treatment, Treatment};
use agentrt_serve::request::sampling_fields::Fields;

/// The engines: their name in the table's header, the venv variable, the venv's default name.
const ENGINES: [(&str, &str, &str, &str); 2] = [
    ("vLLM", "vllm", "AGENTRT_VLLM_VENV", "venv-vllm"),
    ("SGLang", "sglang", "AGENTRT_SGLANG_VENV", "venv-sglang"),
];

/// The API a request class serves (its sampling numbers are checked by that API's table).
fn api_of(class: &str) -> Fields {
    match class {
        "ChatCompletionRequest" => Fields::Agent(AgentApi::ChatCompletions),
        "CompletionRequest" => Fields::Completions,
        other => panic!("unknown request class {other}"),
    }
}

/// The short name the table's engine columns use for a class.
fn short(class: &str) -> &'static str {
    match class {
        "ChatCompletionRequest" => "chat",
        _ => "completions",
    }
}

/// A row of the table: the classes of each engine that have the field, and the treatment text.
struct Row {
    classes: BTreeMap<String, String>,
    treatment: String,
}

/// The table under "## The engines' request fields": field → row.
fn table() -> BTreeMap<String, Row> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md");
    let text = std::fs::read_to_string(&docs).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("The engines' request fields"))
        .expect("docs/security.md has a section \"The engines' request fields\"");
    let mut lines = section.lines().filter(|l| l.starts_with('|'));
    let header: Vec<String> = cells(lines.next().expect("the table's header"));
    lines
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells = cells(l);
            let field = cells[0].trim_matches('`').to_string();
            let classes = header[1..header.len() - 1]
                .iter()
                .cloned()
                .zip(cells[1..cells.len() - 1].iter().cloned())
                .collect();
            let treatment = cells.last().unwrap().clone();
            (field, Row { classes, treatment })
        })
        .collect()
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The table's words for a treatment.
fn words(t: Treatment) -> &'static str {
    match t {
        Treatment::Refused => "refused unless `--client-engine-field`",
        Treatment::SetByAgentrt => "set by agentrt",
        Treatment::Checked => "checked",
        Treatment::HintDialect => "read as hints, taken out",
        Treatment::Forwarded => "forwarded",
    }
}

/// `engine`'s request classes → their fields, or why they cannot be read here.
fn engine_fields(engine: &str, variable: &str, default: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
    let venv = std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/agentrt")
            .join(default)
    });
    let python = venv.join("bin/python");
    if !python.is_file() {
        return Err(format!(
            "skipped: no {engine} venv at {} (set {variable})",
            venv.display()
        ));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/engine_request_fields.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(engine)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reading {engine}'s request classes failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn every_field_of_both_engines_requests_is_in_the_table_with_the_proxys_treatment() {
    let table = table();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (column, engine, variable, default) in ENGINES {
        let classes = match engine_fields(engine, variable, default) {
            Ok(classes) => classes,
            Err(reason) => {
                eprintln!("{column}: {reason}");
                continue;
            }
        };
        // field → the classes of this engine that have it ("chat, completions").
        let mut has: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (class, fields) in &classes {
            for field in fields {
                has.entry(field).or_default().push(short(class));
                let expected = words(treatment(field, api_of(class)));
                match table.get(field.as_str()) {
                    None => problems.push(format!("`{field}` ({column} {class}) is missing from the table")),
                    Some(row) if row.treatment != expected => problems.push(format!(
                        "`{field}`: the table says \"{}\", the proxy does \"{expected}\"",
                        row.treatment
                    )),
                    Some(_) => checked += 1,
                }
            }
        }
        // The engine's column names exactly the classes that have each field.
        for (field, row) in &table {
            let listed = row.classes.get(column).map_or("", String::as_str);
            let actual = has.get(field.as_str()).map_or("—".to_string(), |c| c.join(", "));
            if listed != actual {
                problems.push(format!(
                    "`{field}`: the {column} column says \"{listed}\", {column} has \"{actual}\""
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/security.md's engine field table:\n{}",
        problems.join("\n")
    );
    eprintln!("{checked} fields of the engines' request classes checked against the table");
}
