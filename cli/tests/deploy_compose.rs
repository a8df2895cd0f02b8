//! Both compose files — `deploy/compose.yaml` (CPU, the tiny model) and `deploy/gpu/compose.yaml`
//! (one GPU node: vLLM's CUDA image with the plugin's wheel, agentrt, Prometheus, Grafana) — as far
//! as a machine without a Docker engine can check them: `docker-compose config` validates each
//! against the compose schema (services, healthchecks, volumes, GPU reservation; run when
//! docker-compose is installed, `deploy/setup-compose.sh`, and required on CI with
//! `AGENTRT_REQUIRE_COMPOSE=1`); the line rules of `deploy_files` check that vLLM gets the flags
//! the dashboard needs, that the proxy and vLLM agree on the socket, the KV events and the port,
//! that every service has a healthcheck, and that Prometheus and Grafana are pointed at the proxy
//! and the dashboard. Nothing here starts a container or pulls an image.

mod deploy_files;

use std::path::Path;
use std::process::Command;

use deploy_files::*;
use serde_json::Value;

const CPU: &str = "deploy/compose.yaml";
const GPU: &str = "deploy/gpu/compose.yaml";

/// The secrets the GPU file requires from the environment, as an operator sets them.
const GPU_ENV: [(&str, &str); 3] = [
    ("AGENTRT_ADMIN_TOKEN", "admin-token-for-the-check"),
    ("AGENTRT_METRICS_TOKEN", "metrics-token-for-the-check"),
    ("GRAFANA_ADMIN_PASSWORD", "grafana-password-for-the-check"),
];

fn docker_compose_config(file: &str, env: &[(&str, &str)]) -> Option<std::process::Output> {
    let mut command = Command::new("docker-compose");
    command.args(["-f", file, "config", "-q"]).current_dir(repo());
    for (k, v) in env {
        command.env(k, v);
    }
    match command.output() {
        Ok(out) => Some(out),
        Err(e) if std::env::var("AGENTRT_REQUIRE_COMPOSE").as_deref() == Ok("1") => {
            panic!("docker-compose did not start ({e}); run deploy/setup-compose.sh")
        }
        Err(e) => {
            eprintln!(
                "SKIPPED the compose schema check: docker-compose did not start ({e}); run deploy/setup-compose.sh"
            );
            None
        }
    }
}

#[test]
fn docker_compose_validates_both_files_and_the_gpu_one_asks_for_its_secrets() {
    for (file, env) in [(CPU, &[][..]), (GPU, &GPU_ENV[..])] {
        let Some(out) = docker_compose_config(file, env) else {
            return;
        };
        assert!(
            out.status.success(),
            "{file} is not a valid compose file:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Without its secrets the GPU file refuses to start, naming the one missing.
    let out = docker_compose_config(GPU, &[]).expect("ran above");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("set AGENTRT_ADMIN_TOKEN"),
        "{said}"
    );
}

/// vLLM's command and environment, the proxy's parsed flags, in `file`.
fn pair(file: &str) -> (Vec<String>, Vec<String>, agentrt_serve::ServeArgs) {
    let service = compose_service_of(file, "vllm");
    let command = compose_command_of(file, "vllm");
    let proxy = parse_serve(&compose_command_of(file, "agentrt"), &format!("{file}'s agentrt"));
    (service, command, proxy)
}

#[test]
fn vllm_gets_the_flags_the_dashboard_needs_and_agrees_with_the_proxy() {
    for file in [CPU, GPU] {
        let (service, vllm, proxy) = pair(file);
        for flag in ["--enable-prefix-caching", "--enable-prompt-tokens-details"] {
            assert!(vllm.iter().any(|a| a == flag), "{file}: vLLM without {flag}");
        }
        let socket = compose_value(&service, "AGENTRT_EVICTION_SOCKET");
        assert_eq!(proxy.eviction_socket.as_deref(), Some(Path::new(&socket)), "{file}");
        let events: Value = serde_json::from_str(flag_value(&vllm, "--kv-events-config")).expect("JSON");
        assert_eq!(proxy.kv_events.as_deref(), events["endpoint"].as_str(), "{file}");
        assert_eq!(
            proxy.kv_events_replay.as_deref(),
            events["replay_endpoint"].as_str(),
            "{file}"
        );
        assert_eq!(
            events["topic"], "kv",
            "{file}: agentrt serve subscribes to the topic kv"
        );
        let upstream = format!("http://{}:{}", flag_value(&vllm, "--host"), flag_value(&vllm, "--port"));
        assert_eq!(proxy.upstream, upstream, "{file}");
        let port = proxy.listen.port();
        assert!(
            service.iter().any(|l| l.trim() == format!("- \"{port}:{port}\"")),
            "{file}: vllm's service publishes the proxy's port {port}"
        );
        let volume = |lines: &[String]| lines.iter().any(|l| l.trim() == "- agentrt-run:/run/agentrt");
        assert!(
            volume(&service) && volume(&compose_service_of(file, "agentrt")),
            "{file}: the shared socket volume"
        );
    }
}

#[test]
fn every_service_has_a_healthcheck() {
    for (file, services) in [
        (CPU, &["vllm", "agentrt"][..]),
        (GPU, &["vllm", "agentrt", "prometheus", "grafana"][..]),
    ] {
        for name in services {
            let service = compose_service_of(file, name);
            let test = json_array(
                &compose_value(&service, "test"),
                &format!("{file}: {name}'s healthcheck"),
            );
            assert_eq!(test[0], "CMD", "{file}: {name}");
        }
        // The proxy's checks /healthz on the port it listens on.
        let (_, _, proxy) = pair(file);
        let agentrt = compose_value(&compose_service_of(file, "agentrt"), "test");
        assert!(
            agentrt.contains(&format!("/dev/tcp/127.0.0.1/{}", proxy.listen.port())) && agentrt.contains("/healthz"),
            "{file}: {agentrt}"
        );
    }
}

#[test]
fn the_gpu_image_installs_the_wheel_dist_builds_on_a_vllm_the_plugin_knows() {
    let instructions = instructions_of("deploy/gpu/Dockerfile.vllm");
    let from = instructions
        .iter()
        .find(|i| i.keyword == "FROM")
        .expect("a FROM")
        .rest
        .clone();
    let tag = from
        .split_whitespace()
        .next()
        .and_then(|image| image.strip_prefix("vllm/vllm-openai:v"))
        .unwrap_or_else(|| panic!("not the official vLLM image: FROM {from}"));
    let patch = read("adapters/vllm/agentrt_vllm/patch.py");
    let supported = line_value(&patch, "SUPPORTED_VERSIONS = ", ")").expect("patch.py names its supported versions");
    assert!(
        supported.contains(&format!("\"{tag}\"")),
        "vLLM {tag} is not one of {supported}"
    );

    // The wheel's file name as pip names it from adapters/vllm/pyproject.toml.
    let pyproject = read("adapters/vllm/pyproject.toml");
    let name = line_value(&pyproject, "name = \"", "\"").expect("the plugin's name");
    let prefix = format!("target/dist/{}-", name.replace('-', "_"));
    let (_, sources, _) = copy_parts(
        &instructions
            .iter()
            .find(|i| i.keyword == "COPY")
            .expect("the image copies the wheel")
            .rest,
    );
    assert_eq!(sources, [format!("{prefix}*.whl")]);
    let ignore = read("deploy/gpu/Dockerfile.vllm.dockerignore");
    assert!(
        ignore.lines().any(|l| l == format!("!{prefix}*.whl")),
        "the build context lets the wheel in"
    );
    let dist = read("xtask/src/dist.rs");
    assert!(
        dist.contains("\"adapters/vllm\""),
        "cargo xtask dist builds the wheel from adapters/vllm"
    );
    let compose = compose_service_of(GPU, "vllm");
    assert_eq!(compose_value(&compose, "dockerfile"), "deploy/gpu/Dockerfile.vllm");
    assert!(
        compose.iter().any(|l| l.trim() == "- driver: nvidia"),
        "the GPU reservation"
    );
}

#[test]
fn prometheus_scrapes_the_proxy_with_its_token_and_grafana_shows_the_dashboard() {
    let (_, _, proxy) = pair(GPU);
    let prometheus = read("deploy/gpu/prometheus.yml");
    assert!(
        prometheus.contains(&format!("targets: [\"vllm:{}\"]", proxy.listen.port())),
        "Prometheus scrapes the proxy (in vLLM's network namespace) on its port:\n{prometheus}"
    );
    let token_file = prometheus
        .lines()
        .find_map(|l| l.trim().strip_prefix("credentials_file: "))
        .expect("a bearer token file");
    let entrypoint = compose_value(&compose_service_of(GPU, "prometheus"), "entrypoint");
    assert!(
        entrypoint.contains(&format!("$$AGENTRT_METRICS_TOKEN\\\" > {token_file}")),
        "the container writes the proxy's metrics token where prometheus.yml reads it: {entrypoint}"
    );
    let agentrt = compose_service_of(GPU, "agentrt");
    assert!(agentrt
        .iter()
        .any(|l| l.trim_start().starts_with("AGENTRT_METRICS_TOKEN:")));
    let grafana = compose_service_of(GPU, "grafana");
    for mount in [
        "- ../grafana/agentrt.json:/var/lib/grafana/dashboards/agentrt.json:ro",
        "- ./grafana/datasource.yaml:/etc/grafana/provisioning/datasources/agentrt.yaml:ro",
        "- ./grafana/dashboards.yaml:/etc/grafana/provisioning/dashboards/agentrt.yaml:ro",
    ] {
        assert!(grafana.iter().any(|l| l.trim() == mount), "grafana lacks {mount}");
    }
    let provider = read("deploy/gpu/grafana/dashboards.yaml");
    assert!(provider.contains("path: /var/lib/grafana/dashboards"));
    let source = read("deploy/gpu/grafana/datasource.yaml");
    assert!(source.contains("url: http://prometheus:9090"));
}
