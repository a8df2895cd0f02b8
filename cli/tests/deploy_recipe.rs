//! Checks of `deploy/Dockerfile` and `deploy/compose.yaml` that run without Docker: the build
//! copies paths that exist and every workspace member, the image puts the components where an
//! installed `agentrt` looks, every `agentrt serve` command line parses with the real flags, and
//! the proxy and vLLM name the same socket, KV-event endpoints and port. The image CI builds and
//! runs (`deploy/build-image.sh`, `deploy/Dockerfile.prebuilt`; tests/deploy_image.rs) must run
//! like the Dockerfile's: same entry point, command, user, environment, port and components.
//!
//! The files are read with a few line rules rather than a Docker or YAML parser (neither is in the
//! dependency tree): the rules below state what the files must keep to for them to hold.

use std::path::{Path, PathBuf};

use agentrt_layout::{installed_components_dirs, EMBEDDED_COMPONENTS};
use serde_json::Value;

mod deploy_files;

use deploy_files::*;

/// The lines of service `name` in deploy/compose.yaml.
fn compose_service(name: &str) -> Vec<String> {
    compose_service_of("deploy/compose.yaml", name)
}

/// The `command` of `service` in deploy/compose.yaml.
fn compose_command(service: &str) -> Vec<String> {
    compose_command_of("deploy/compose.yaml", service)
}

#[test]
fn the_build_copies_paths_that_exist_and_every_workspace_member() {
    let instructions = dockerfile();
    let mut copied = Vec::new();
    for i in instructions.iter().filter(|i| i.keyword == "COPY") {
        let (from, sources, _) = copy_parts(&i.rest);
        if from.is_some() {
            continue;
        }
        for source in sources {
            assert!(
                repo().join(&source).exists(),
                "COPY {source}: no such path in the repository"
            );
            if i.stage == "build" {
                copied.push(source);
            }
        }
    }
    for member in workspace_members() {
        assert!(
            copied
                .iter()
                .any(|c| Path::new(&member).starts_with(c.trim_end_matches('/'))),
            "the build stage does not copy workspace member {member}"
        );
    }
}

#[test]
fn the_image_puts_the_binary_and_the_components_where_the_lookup_finds_them() {
    let instructions = dockerfile();
    let last = last_stage(&instructions);
    let copies: Vec<_> = instructions
        .iter()
        .filter(|i| i.stage == last && i.keyword == "COPY")
        .map(|i| copy_parts(&i.rest))
        .collect();
    let binary = copies
        .iter()
        .find(|(_, sources, _)| sources.iter().any(|s| s.ends_with("/release/agentrt")))
        .map(|(_, _, destination)| PathBuf::from(destination))
        .expect("the image copies the agentrt binary");
    let (_, components, destination) = copies
        .iter()
        .find(|(_, sources, _)| sources.iter().any(|s| s.ends_with(".wasm")))
        .expect("the image copies components");
    let bin_dir = binary.parent().expect("an absolute destination");
    let looked_in = installed_components_dirs(bin_dir);
    assert!(
        looked_in.contains(&PathBuf::from(destination.trim_end_matches('/'))),
        "{destination} is none of the folders an agentrt in {} looks in: {looked_in:?}",
        bin_dir.display()
    );
    let names: Vec<&str> = components
        .iter()
        .map(|c| Path::new(c).file_stem().and_then(|s| s.to_str()).expect("a file name"))
        .collect();
    for name in &names {
        assert!(
            repo().join("policies").join(name).is_dir(),
            "the image ships {name}, which is not a policy"
        );
    }
    for name in EMBEDDED_COMPONENTS {
        assert!(names.contains(&name), "the image lacks the built-in component {name}");
    }
}

#[test]
fn every_agentrt_serve_command_line_parses_with_the_real_flags() {
    let instructions = dockerfile();
    let last = last_stage(&instructions);
    let entrypoint = instructions
        .iter()
        .rfind(|i| i.stage == last && i.keyword == "ENTRYPOINT")
        .expect("the image has an entrypoint");
    assert_eq!(json_array(&entrypoint.rest, "ENTRYPOINT"), ["agentrt"]);
    let cmd = instructions
        .iter()
        .rfind(|i| i.stage == last && i.keyword == "CMD")
        .expect("the image has a default command");
    parse_serve(&json_array(&cmd.rest, "CMD"), "the image's CMD");
    parse_serve(&compose_command("agentrt"), "compose.yaml's agentrt");
}

#[test]
fn compose_builds_stages_that_exist_and_the_proxy_gets_the_agentrt_image() {
    let instructions = dockerfile();
    let stages: Vec<&str> = instructions
        .iter()
        .filter(|i| i.keyword == "FROM")
        .map(|i| i.stage.as_str())
        .collect();
    assert_eq!(compose_value(&compose_service("vllm"), "target"), "vllm-cpu");
    assert!(stages.contains(&"vllm-cpu"), "stages: {stages:?}");
    // No target: the agentrt service gets the last stage, which must be the proxy's image.
    assert!(!compose_service("agentrt")
        .iter()
        .any(|l| l.trim_start().starts_with("target:")));
    assert_eq!(last_stage(&instructions), "agentrt");
}

#[test]
fn the_proxy_and_vllm_name_the_same_socket_kv_endpoints_and_port() {
    let vllm_service = compose_service("vllm");
    let vllm = compose_command("vllm");
    let proxy = parse_serve(&compose_command("agentrt"), "compose.yaml's agentrt");

    let socket = compose_value(&vllm_service, "AGENTRT_EVICTION_SOCKET");
    assert_eq!(proxy.eviction_socket.as_deref(), Some(Path::new(&socket)));

    let events: Value = serde_json::from_str(flag_value(&vllm, "--kv-events-config")).expect("JSON");
    assert_eq!(events["enable_kv_cache_events"], true);
    assert_eq!(proxy.kv_events.as_deref(), events["endpoint"].as_str());
    assert_eq!(proxy.kv_events_replay.as_deref(), events["replay_endpoint"].as_str());
    // `agentrt serve` subscribes to the topic `kv`.
    assert_eq!(events["topic"], "kv");

    let upstream = format!("http://{}:{}", flag_value(&vllm, "--host"), flag_value(&vllm, "--port"));
    assert_eq!(proxy.upstream, upstream);
    // The proxy shares vLLM's network namespace: it is published on vLLM's service.
    assert!(compose_service("agentrt")
        .iter()
        .any(|l| l.trim() == "network_mode: \"service:vllm\""));
    let port = proxy.listen.port();
    assert!(
        vllm_service.iter().any(|l| l.trim() == format!("- \"{port}:{port}\"")),
        "vllm's service publishes the proxy's port {port}"
    );
}

/// The last stage's instructions that decide how the image runs, keyword and text, in order.
fn run_settings(instructions: &[Instruction]) -> Vec<(String, String)> {
    let last = last_stage(instructions);
    instructions
        .iter()
        .filter(|i| i.stage == last)
        .filter(|i| {
            ["ENTRYPOINT", "CMD", "USER", "EXPOSE"].contains(&i.keyword.as_str())
                || (i.keyword == "ENV" && i.rest.starts_with("AGENTRT_"))
        })
        .map(|i| (i.keyword.clone(), i.rest.clone()))
        .collect()
}

#[test]
fn the_prebuilt_image_runs_like_the_dockerfiles_and_ships_the_same_components() {
    let registry = dockerfile();
    let prebuilt = instructions_of("deploy/Dockerfile.prebuilt");
    let numeric_user = |settings: Vec<(String, String)>| -> Vec<(String, String)> {
        // deploy/Dockerfile names the user it creates; FROM scratch has no user database at
        // build time, so the prebuilt one gives its ids.
        settings
            .into_iter()
            .map(|(k, v)| match (k.as_str(), v.as_str()) {
                ("USER", "agentrt") => (k, "10001:10001".to_string()),
                _ => (k, v),
            })
            .collect()
    };
    assert_eq!(numeric_user(run_settings(&registry)), run_settings(&prebuilt));
    assert!(
        registry
            .iter()
            .any(|i| i.keyword == "RUN" && i.rest.contains("--uid 10001") && i.rest.contains("--user-group")),
        "deploy/Dockerfile creates user agentrt with uid and gid 10001"
    );

    // The components: the Dockerfile's COPY list and build-image.sh's array.
    let last = last_stage(&registry);
    let mut copied: Vec<String> = registry
        .iter()
        .filter(|i| i.stage == last && i.keyword == "COPY")
        .flat_map(|i| copy_parts(&i.rest).1)
        .filter(|s| s.ends_with(".wasm"))
        .map(|s| Path::new(&s).file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let script = read("deploy/build-image.sh");
    let array = line_value(&script, "components=(", ")").expect("build-image.sh has a line components=(...)");
    let mut staged: Vec<String> = array.split_whitespace().map(str::to_string).collect();
    copied.sort();
    staged.sort();
    assert_eq!(
        copied, staged,
        "deploy/Dockerfile and deploy/build-image.sh ship different components"
    );
}
