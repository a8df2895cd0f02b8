"""Fixtures for the plugin's tests: vLLM from the venv, the agentrt host binary, policy components.

Everything here is real: vLLM's KV-cache manager and block pool, the Rust eviction service in its
own process on a Unix socket, Wasm policy components built from this repository. Tests skip, saying
why, when a piece is missing (no vLLM venv, no components, no cargo).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testing"))
import eviction_host  # noqa: E402  (adapters/testing: the eviction service, shared with the SGLang suite)
from eviction_host import REPO, TARGET, Host, component, components_dir  # noqa: E402,F401
from eviction_host import host_binary_fixture, start_host  # noqa: E402,F401  (the shared fixtures)

try:
    import vllm  # noqa: F401
    VLLM_MISSING = None
except ImportError as e:
    VLLM_MISSING = f"vLLM is not installed here ({e}): run adapters/vllm/setup-venv.sh and use .venv-vllm/bin/python"


pytest_pycollect_makemodule = eviction_host.skip_every_module_unless(VLLM_MISSING)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def installed():
    """The plugin's patches on vLLM's classes (what ``register()`` does in an engine process)."""
    from agentrt_vllm import patch

    assert patch.install("/nonexistent/agentrt-test.sock"), "this vLLM is not one the plugin supports"
    return patch


# --- a real `vllm serve` and `agentrt serve` in front of it (end-to-end tests) ----------------------
#
# Every process started here runs in its own process group and is stopped in the fixture's
# teardown, whatever the test did: SIGTERM, then SIGKILL to the group after a timeout. Ports come
# from binding port 0; sockets and logs live in the test's tmp_path.

SKIP_SERVE_REASON = "AGENTRT_SKIP_VLLM_SERVE=1"


def stop_process(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM, wait, then SIGKILL the process group (vLLM's engine core is a child process)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this module created (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def prometheus_sums(text: str) -> dict[str, float]:
    """Prometheus text → {series name: sum over its label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def http_json(url: str, body: dict | None = None, headers: dict | None = None, timeout: float = 120):
    """(status, parsed JSON or text) of a GET (body None) or POST; HTTP errors are returned, not raised."""
    import json
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@pytest.fixture(scope="session")
def agentrt_binary() -> Path:
    """The `agentrt` binary (release). AGENTRT_BIN overrides; otherwise `cargo build --release -p
    agentrt` (a no-op when it is current) so the tests never run a stale proxy."""
    override = os.environ.get("AGENTRT_BIN")
    if override:
        return Path(override)
    binary = TARGET / "release" / "agentrt"
    if shutil.which("cargo") is not None:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "agentrt"], cwd=REPO, check=True)
    elif not binary.is_file():
        pytest.skip(f"{binary} is missing and cargo is not on PATH")
    return binary


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Llama + BPE tokenizer (make_tiny_model.py), made once per test session."""
    out = tmp_path_factory.mktemp("tiny-model")
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def prefill_heavy_model(tmp_path_factory) -> Path:
    """The random model whose prefill costs (`make_tiny_model.py --size prefill-heavy`: a
    2,560-token prefill ~100 decode steps on two CPU cores), made once per test session."""
    out = tmp_path_factory.mktemp("prefill-heavy-model")
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), "--size", "prefill-heavy", str(out)],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def tiny_model_that_ends(tmp_path_factory) -> Path:
    """The tiny model's variant whose answers end (`make_tiny_model.py --ends-answers`), for agent
    SDKs that refuse an answer cut at max_tokens."""
    out = tmp_path_factory.mktemp("tiny-model-ends")
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), "--ends-answers", str(out)],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory) -> Path:
    """The plugin as an operator installs it: this checkout's ``adapters/vllm`` built into a wheel
    (what ``cargo xtask dist`` ships; ``AGENTRT_VLLM_WHEEL`` names a built one instead) and
    installed into a folder of its own, which every ``vllm serve`` here finds first on its
    ``PYTHONPATH`` — so the end-to-end tests run the wheel, not the venv's editable install."""
    out = tmp_path_factory.mktemp("plugin-wheel")
    wheel = os.environ.get("AGENTRT_VLLM_WHEEL")
    if not wheel:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
               "--no-build-isolation", "--quiet", "--wheel-dir", str(out), str(REPO / "adapters/vllm")]
        subprocess.run(pip, check=True, capture_output=True)
        shutil.rmtree(REPO / "adapters/vllm/build", ignore_errors=True)
        (wheel,) = [str(w) for w in out.glob("agentrt_vllm-*.whl")]
    site = out / "site"
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--no-deps", "--quiet",
                    "--target", str(site), wheel], check=True, capture_output=True)
    # What a vLLM process started with this PYTHONPATH imports and loads as its plugin.
    # The wheel carries agentrt_engine (adapters/lib/python) too: it must not come from elsewhere.
    probe = ("import agentrt_vllm, agentrt_engine, importlib.metadata as md; "
             "(ep,) = [e for e in md.entry_points(group='vllm.general_plugins') if e.name == 'agentrt']; "
             "print(agentrt_vllm.__file__, agentrt_engine.__file__, ep.dist._path)")
    seen = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(site)},
                          check=True, capture_output=True, text=True).stdout.split()
    assert all(p.startswith(str(site)) for p in seen), f"vLLM would not load the wheel from {site}: {seen}"
    return site


def reset_prefix_cache(base: str) -> None:
    """Empty vLLM's prefix cache (its dev endpoint: the server must run with VLLM_SERVER_DEV_MODE=1)."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(base + "/reset_prefix_cache", method="POST"), timeout=60).read()


class VllmServer:
    """`vllm serve` on the tiny model (CPU), optionally with the agentrt plugin and KV events;
    the plugin from ``plugin_site`` (the wheel) when given."""

    def __init__(self, model: Path, log_path: Path, *, blocks: int = 80, eviction_socket: Path | None = None,
                 kv_endpoint: str | None = None, kv_replay: str | None = None, port: int | None = None,
                 deadline_ms: float | None = None, extra_args: tuple[str, ...] = (),
                 env_extra: dict[str, str] | None = None, plugin_site: Path | None = None) -> None:
        import json

        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
        env.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1"})
        if eviction_socket is not None:
            env["AGENTRT_EVICTION_SOCKET"] = str(eviction_socket)
        if deadline_ms is not None:
            env["AGENTRT_EVICTION_DEADLINE_MS"] = str(deadline_ms)
        if plugin_site is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_site), env.get("PYTHONPATH")]))
        env.update(env_extra or {})
        args = [str(Path(sys.executable).parent / "vllm"), "serve", str(model), "--served-model-name", "tiny",
                "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32", "--enforce-eager",
                "--enable-prefix-caching", "--block-size", "32", "--max-model-len", "2048",
                "--num-gpu-blocks-override", str(blocks), *extra_args]
        if kv_endpoint is not None:
            events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": kv_endpoint, "topic": "kv"}
            if kv_replay is not None:
                events["replay_endpoint"] = kv_replay
            args += ["--kv-events-config", json.dumps(events)]
        self.args = args
        self._log = open(log_path, "w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self.ready_s: float | None = None

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]

    def wait_ready(self, timeout: float = 300) -> float:
        import urllib.request

        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                urllib.request.urlopen(self.base + "/health", timeout=2)
                self.ready_s = time.monotonic() - self.started
                return self.ready_s
            except OSError:
                if time.monotonic() - self.started > timeout:
                    raise RuntimeError(f"vLLM did not come up in {timeout} s:\n{self.log()}")
                time.sleep(0.5)

    def metrics(self) -> dict[str, float]:
        import urllib.request

        return prometheus_sums(urllib.request.urlopen(self.base + "/metrics", timeout=30).read().decode())

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


class AgentrtServe:
    """`agentrt serve` (the proxy) in front of ``upstream``, with its log in ``log_path``."""

    def __init__(self, binary: Path, upstream: str, log_path: Path, *, policy: Path, admin_token: str | None = None,
                 eviction_socket: Path | None = None, kv_events: str | None = None, kv_replay: str | None = None,
                 extra_args: tuple[str, ...] = (), log_level: str | None = None) -> None:
        args = [str(binary), "serve", "--upstream", upstream, "--listen", "127.0.0.1:0", "--policy", str(policy),
                *extra_args]
        if admin_token is not None:
            args += ["--admin-token", admin_token]
        if eviction_socket is not None:
            args += ["--eviction-socket", str(eviction_socket)]
        if kv_events is not None:
            args += ["--kv-events", kv_events]
        if kv_replay is not None:
            args += ["--kv-events-replay", kv_replay]
        self.args = args
        self.admin_token = admin_token
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if k != "AGENTRT_ADMIN_TOKEN"}
        env["AGENTRT_LOG"] = log_level or os.environ.get("AGENTRT_LOG", "info")
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            found = re.search(r"listening on (http://[0-9.:]+)", log_path.read_text(errors="replace"))
            if found:
                self.base = found.group(1)
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"agentrt serve did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]

    def metrics(self) -> dict[str, float]:
        import urllib.request

        return prometheus_sums(urllib.request.urlopen(self.base + "/metrics", timeout=30).read().decode())

    def metrics_text(self) -> str:
        import urllib.request

        return urllib.request.urlopen(self.base + "/metrics", timeout=30).read().decode()

    def tenants(self) -> dict:
        status, body = http_json(self.base + "/admin/tenants", headers={"authorization": f"Bearer {self.admin_token}"})
        assert status == 200, body
        return body

    def stop(self) -> None:
        stop_process(self.proc, timeout=30)
        self._log.close()


class Stack:
    """`agentrt serve` → `vllm serve` with the plugin on the proxy's eviction socket and the KV events
    on a loopback port: the whole path of docs/background.md §6 on this machine."""

    def __init__(self, binary: Path, model: Path, workdir: Path, *, policy: str, blocks: int, admin_token: str | None,
                 deadline_ms: float | None, serve_args: tuple[str, ...], vllm_args: tuple[str, ...],
                 log_level: str | None, plugin_site: Path | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.socket = workdir / "evict.sock"
        kv, replay, http = free_port(), free_port(), free_port()
        self.kv_endpoint = f"tcp://127.0.0.1:{kv}"
        self.kv_replay = f"tcp://127.0.0.1:{replay}"
        self.vllm: VllmServer | None = None
        # The proxy first: it binds the eviction socket and the KV-event endpoint (vLLM's publisher
        # connects to a tcp://host:port endpoint).
        self.serve = AgentrtServe(binary, f"http://127.0.0.1:{http}", workdir / "agentrt-serve.log",
                                  policy=component(policy), admin_token=admin_token, eviction_socket=self.socket,
                                  kv_events=self.kv_endpoint, kv_replay=self.kv_replay, extra_args=serve_args,
                                  log_level=log_level)
        try:
            self.vllm = VllmServer(model, workdir / "vllm.log", blocks=blocks, eviction_socket=self.socket,
                                   kv_endpoint=self.kv_endpoint, kv_replay=self.kv_replay, port=http,
                                   deadline_ms=deadline_ms, extra_args=vllm_args, plugin_site=plugin_site)
            self.vllm.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.vllm is not None:
            self.vllm.stop()
        self.serve.stop()


@pytest.fixture
def start_stack(agentrt_binary, tiny_model, plugin_site, tmp_path):
    """Factory: ``start_stack(policy="cachesage", blocks=80, ...)`` → a running :class:`Stack`.
    Every stack is stopped at teardown (the test may stop one earlier to start the next cold)."""
    stacks: list[Stack] = []

    def start(policy: str = "cachesage", *, blocks: int = 80, admin_token: str | None = None,
              deadline_ms: float | None = 20, serve_args: tuple[str, ...] = (), vllm_args: tuple[str, ...] = (),
              log_level: str | None = None, model: Path | None = None) -> Stack:
        stack = Stack(agentrt_binary, model or tiny_model, tmp_path / f"stack-{len(stacks)}-{policy}", policy=policy,
                      blocks=blocks, admin_token=admin_token, deadline_ms=deadline_ms, serve_args=serve_args,
                      vllm_args=("--enable-prompt-tokens-details", *vllm_args), log_level=log_level,
                      plugin_site=plugin_site)
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        stack.stop()
