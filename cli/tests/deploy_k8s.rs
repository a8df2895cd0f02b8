//! The Kubernetes manifests (`deploy/k8s/`: agentrt beside vLLM in one pod, and its Service), as
//! far as a machine without a cluster can check them: `kubernetes-validate` (PyPI; it carries the
//! API's JSON schemas, so it runs offline) validates each file strictly against the oldest and the
//! newest Kubernetes release named here, and the manifests, read as data with the validator's
//! YAML parser, must agree with themselves and with docs/deploy.md — the proxy's arguments parse
//! as `agentrt serve`, the plugin and the proxy name one socket on one shared emptyDir, vLLM gets
//! the flags the dashboard needs and is reachable only through the proxy, the probes ask
//! `/healthz` on the port the proxy listens on and the Service sends clients there, and every
//! secret comes from the Secret the guide's `kubectl create secret` line makes. Runs when the
//! validator's venv exists (`bash deploy/k8s/setup-validate.sh`); `.ci/run` makes it and sets
//! `AGENTRT_REQUIRE_K8S=1`, so a missing one fails there instead of skipping.

mod deploy_files;

use std::path::{Path, PathBuf};
use std::process::Command;

use deploy_files::*;
use serde_json::Value;

const MANIFESTS: [&str; 2] = ["deploy/k8s/deployment.yaml", "deploy/k8s/service.yaml"];
/// The oldest Kubernetes release the manifests are checked against, and the newest the
/// validator knows.
const VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

/// The validator's venv, or `None` (said why) where it is missing and not required.
fn venv() -> Option<PathBuf> {
    let venv = match std::env::var_os("AGENTRT_K8S_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/agentrt/venv-k8s"),
    };
    if venv.join("bin/kubernetes-validate").is_file() {
        return Some(venv);
    }
    let why = format!(
        "no kubernetes-validate in {}; run `bash deploy/k8s/setup-validate.sh`",
        venv.display()
    );
    assert!(std::env::var("AGENTRT_REQUIRE_K8S").as_deref() != Ok("1"), "{why}");
    eprintln!("SKIPPED the Kubernetes manifests' checks: {why}");
    None
}

#[test]
fn every_manifest_validates_strictly_against_the_kubernetes_api_schemas() {
    let Some(venv) = venv() else { return };
    for version in VERSIONS {
        let out = Command::new(venv.join("bin/kubernetes-validate"))
            .args(["--strict", "--kubernetes-version", version])
            .args(MANIFESTS)
            .current_dir(repo())
            .output()
            .expect("starting kubernetes-validate");
        let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "Kubernetes {version}:\n{said}");
        assert_eq!(
            said.matches(" passed for resource ").count(),
            MANIFESTS.len(),
            "each file holds one resource, and each passed:\n{said}"
        );
    }
}

/// Every resource of the manifests, as JSON, by kind.
fn resources(venv: &Path) -> Vec<Value> {
    let out = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import json, sys, yaml; json.dump([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f))], sys.stdout)",
        ])
        .args(MANIFESTS)
        .current_dir(repo())
        .output()
        .expect("starting the venv's python");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("JSON")
}

fn kind<'a>(resources: &'a [Value], kind: &str) -> &'a Value {
    resources
        .iter()
        .find(|r| r["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The entry of `list` (a manifest's list of named things) whose `name` is `name`.
fn named<'a>(list: &'a Value, name: &str, what: &str) -> &'a Value {
    list.as_array()
        .unwrap_or_else(|| panic!("no list of {what}"))
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("no {what} {name}"))
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    named(&pod["containers"], name, "container")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// The variable `name` of a container's `env`.
fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    named(&container["env"], name, "environment variable")
}

/// The volume mounted at `path`'s folder or above it in `container`, and where.
fn mount_holding(container: &Value, path: &Path) -> (String, PathBuf) {
    container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                PathBuf::from(m["mountPath"].as_str().unwrap()),
            )
        })
        .find(|(_, at)| path.starts_with(at))
        .unwrap_or_else(|| panic!("{} mounts nothing holding {}", container["name"], path.display()))
}

fn volume<'a>(pod: &'a Value, name: &str) -> &'a Value {
    named(&pod["volumes"], name, "volume")
}

#[test]
fn the_pod_shares_one_socket_and_vllm_is_reached_only_through_the_proxy() {
    let Some(venv) = venv() else { return };
    let resources = resources(&venv);
    let pod = &kind(&resources, "Deployment")["spec"]["template"]["spec"];
    let (vllm, agentrt) = (container(pod, "vllm"), container(pod, "agentrt"));
    let proxy = parse_serve(&strings(&agentrt["args"]), "deploy/k8s's agentrt");
    let vllm_args = strings(&vllm["args"]);

    // One socket path, on one shared in-memory emptyDir.
    let socket = env(vllm, "AGENTRT_EVICTION_SOCKET")["value"].as_str().unwrap();
    assert_eq!(proxy.eviction_socket.as_deref(), Some(Path::new(socket)));
    let (on_vllm, _) = mount_holding(vllm, Path::new(socket));
    let (on_agentrt, _) = mount_holding(agentrt, Path::new(socket));
    assert_eq!(on_vllm, on_agentrt, "both containers see the socket's volume");
    assert!(
        volume(pod, &on_vllm)["emptyDir"].is_object(),
        "the socket's volume lives with the pod"
    );

    // vLLM: the flags the dashboard needs, on the pod's loopback only, its events to the proxy.
    for flag in ["--enable-prefix-caching", "--enable-prompt-tokens-details"] {
        assert!(vllm_args.iter().any(|a| a == flag), "vLLM without {flag}");
    }
    assert_eq!(
        flag_value(&vllm_args, "--host"),
        "127.0.0.1",
        "clients reach vLLM only through the proxy"
    );
    let upstream = format!("http://127.0.0.1:{}", flag_value(&vllm_args, "--port"));
    assert_eq!(proxy.upstream, upstream);
    let events: Value = serde_json::from_str(flag_value(&vllm_args, "--kv-events-config")).expect("JSON");
    assert_eq!(proxy.kv_events.as_deref(), events["endpoint"].as_str());
    assert_eq!(proxy.kv_events_replay.as_deref(), events["replay_endpoint"].as_str());
    assert_eq!(events["topic"], "kv", "agentrt serve subscribes to the topic kv");
    assert!(
        vllm["resources"]["limits"]["nvidia.com/gpu"].is_number(),
        "vLLM gets a GPU"
    );

    // The proxy's probes ask /healthz on the port it listens on; the Service sends clients there.
    let port = agentrt["ports"][0].clone();
    assert_eq!(port["containerPort"], u64::from(proxy.listen.port()));
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &agentrt[probe]["httpGet"];
        assert_eq!(get["path"], "/healthz", "{probe}");
        assert_eq!(get["port"], port["name"], "{probe}");
    }
    let service = &kind(&resources, "Service")["spec"];
    assert_eq!(service["ports"][0]["targetPort"], port["name"]);
    let labels = &kind(&resources, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["selector"].as_object().expect("a selector") {
        assert_eq!(&labels[key], value, "the Service selects the pod");
    }
}

#[test]
fn every_secret_comes_from_the_secret_the_guide_makes_and_the_key_file_is_not_world_readable() {
    let Some(venv) = venv() else { return };
    let resources = resources(&venv);
    let pod = &kind(&resources, "Deployment")["spec"]["template"]["spec"];
    let agentrt = container(pod, "agentrt");
    let proxy = parse_serve(&strings(&agentrt["args"]), "deploy/k8s's agentrt");

    // docs/deploy.md's command, continuation lines joined.
    let guide = read("docs/deploy.md").replace("\\\n", " ");
    let create = guide
        .lines()
        .find(|l| l.trim_start().starts_with("kubectl create secret generic "))
        .expect("docs/deploy.md makes the Secret");
    let secret = create
        .trim_start()
        .strip_prefix("kubectl create secret generic ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap();

    let mut keys = Vec::new();
    for (container, variable) in [(agentrt, "AGENTRT_ADMIN_TOKEN"), (agentrt, "AGENTRT_METRICS_TOKEN")] {
        let reference = &env(container, variable)["valueFrom"]["secretKeyRef"];
        assert_eq!(reference["name"], secret, "{variable}");
        keys.push(reference["key"].as_str().unwrap().to_string());
    }
    // The tenants' file (API keys) is a file of the same Secret where --config reads it.
    let config = proxy.config.expect("agentrt serve reads tenants from --config");
    let (name, at) = mount_holding(agentrt, &config);
    let source = &volume(pod, &name)["secret"];
    assert_eq!(source["secretName"], secret);
    let item = &source["items"][0];
    assert_eq!(
        Path::new(item["path"].as_str().unwrap()),
        config.strip_prefix(&at).unwrap()
    );
    keys.push(item["key"].as_str().unwrap().to_string());
    let mode = source["defaultMode"].as_u64().expect("a mode");
    assert_eq!(mode & 0o007, 0, "the key file is not every user's: {mode:o}");
    for key in keys {
        assert!(
            create.contains(&format!("--from-literal={key}=")) || create.contains(&format!("--from-file={key}")),
            "the guide's Secret has no {key}: {create}"
        );
    }
}
