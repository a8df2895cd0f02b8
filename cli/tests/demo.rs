//! `agentrt demo` reads as prose and tables: what each built-in policy observed, scored,
//! forecast and asked for, in sentences — never a type's `Debug` form — and the two policies'
//! choices are the ones the demo is there to show (LRU evicts the tester's anchor just before it is
//! needed, and so does CacheSage while its guard has no evidence that its model wins; its model
//! alone evicts the rarely used auditor's and asks for a warm-up of the tester's).

use std::process::Command;

#[test]
fn the_demo_prints_sentences_and_shows_each_policys_choice() {
    let output = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .arg("demo")
        .output()
        .expect("running agentrt demo");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for debug_form in ["ForecastKind", "SideEffect", "WarmPrefix", "::", "{ ", " }", "Some("] {
        assert!(
            !text.contains(debug_form),
            "a Debug form ({debug_form:?}) in the demo:\n{text}"
        );
    }
    let sections: Vec<&str> = text.split("== ").filter(|s| !s.trim().is_empty()).collect();
    let section = |name: &str| {
        *sections
            .iter()
            .find(|s| s.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} section:\n{text}"))
    };
    assert!(section("lru").contains("So the tester's block goes first."), "{text}");
    let guarded = section("cachesage 0");
    assert!(guarded.contains("So the tester's block goes first."), "{guarded}");
    assert!(guarded.contains("It asks for no side effects."), "{guarded}");
    let model = section("cachesage:guard=false");
    assert!(model.contains("So the auditor's block goes first."), "{model}");
    assert!(model.contains("tester runs next"), "{model}");
    assert!(model.contains("warm up tester's anchor"), "{model}");
}
