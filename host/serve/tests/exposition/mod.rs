//! What a `/metrics` exposition promises its scrapers, as lines a golden file can hold: every
//! family's type and HELP text, and every series' name with the names of its labels. Values and
//! label values are left out: they change from run to run; names, labels and help do not.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;

/// `family NAME TYPE HELP` for each `# HELP`/`# TYPE` pair and `series NAME{LABEL,…}` for each
/// sample's name and label names (sorted), of every line in `text` that `keep` accepts by name.
pub fn names(text: &str, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    let mut help = std::collections::HashMap::new();
    let mut found = BTreeSet::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name.to_string(), text.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE NAME KIND");
            if keep(name) {
                let text = help.get(name).map_or("(no HELP)", String::as_str);
                found.insert(format!("family {name} {kind} {text}"));
            }
        } else if !line.starts_with('#') {
            let (name, labels) = series(line);
            if keep(&name) {
                found.insert(format!("series {name}{{{}}}", labels.join(",")));
            }
        }
    }
    found
}

/// A sample line's name and its label names, sorted. Label values are skipped quote to quote,
/// escapes (`\"`, `\\`) included, so a value holding `,` or `}` cannot be taken for a label.
fn series(line: &str) -> (String, Vec<String>) {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = line[..end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[end..];
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        while let Some((key, after)) = rest.split_once("=\"") {
            labels.push(key.trim_start_matches(',').to_string());
            let mut chars = after.char_indices();
            let mut close = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        close = i;
                        break;
                    }
                    _ => {}
                }
            }
            rest = &after[(close + 1).min(after.len())..];
            if rest.starts_with('}') {
                break;
            }
        }
    }
    labels.sort();
    (name, labels)
}

/// `found` against the golden file at `path` (one line each, sorted); with `AGENTRT_BLESS=1` the
/// file is written from `found` instead. A difference names each line gained or lost.
pub fn assert_golden(path: &Path, found: &BTreeSet<String>) {
    if std::env::var("AGENTRT_BLESS").as_deref() == Ok("1") {
        let text: String = found.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(path, text).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (write it with AGENTRT_BLESS=1)", path.display()));
    let golden: BTreeSet<String> = golden.lines().map(str::to_string).collect();
    let lost: Vec<_> = golden.difference(found).collect();
    let gained: Vec<_> = found.difference(&golden).collect();
    assert!(
        lost.is_empty() && gained.is_empty(),
        "/metrics changed its names against {}:\n  lost: {lost:#?}\n  gained: {gained:#?}",
        path.display()
    );
}

#[test]
fn label_names_are_read_past_values_with_commas_quotes_and_braces() {
    let text = "# HELP a_total Things, counted.\n# TYPE a_total counter\n\
                a_total{tenant=\"x,y=\\\"z}\",slot=\"kv\"} 3\nb 1\n";
    let found = names(text, |_| true);
    assert_eq!(
        found,
        BTreeSet::from([
            "family a_total counter Things, counted.".to_string(),
            "series a_total{slot,tenant}".to_string(),
            "series b{}".to_string(),
        ])
    );
}
