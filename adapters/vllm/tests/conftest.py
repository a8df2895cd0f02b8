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
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).parent))

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here: run adapters/vllm/setup-venv.sh and use .venv-vllm/bin/python")


def components_dir() -> Path:
    return Path(os.environ.get("AGENTRT_COMPONENTS_DIR", REPO / "target" / "components"))


def component(name: str) -> Path:
    path = components_dir() / f"{name}.wasm"
    if not path.is_file():
        pytest.skip(f"{path} is missing: run `cargo xtask build-policies`")
    return path


@pytest.fixture(scope="session")
def host_binary() -> Path:
    """target/debug/agentrt-vllm-host, built if needed (AGENTRT_VLLM_HOST_BIN overrides)."""
    override = os.environ.get("AGENTRT_VLLM_HOST_BIN")
    if override:
        return Path(override)
    binary = REPO / "target" / "debug" / "agentrt-vllm-host"
    if not binary.is_file():
        if shutil.which("cargo") is None:
            pytest.skip("agentrt-vllm-host is not built and cargo is not on PATH")
        subprocess.run(["cargo", "build", "-p", "agentrt-vllm", "--bin", "agentrt-vllm-host"], cwd=REPO, check=True)
    return binary


class Host:
    """One agentrt-vllm-host process: a policy behind the eviction socket."""

    def __init__(self, binary: Path, socket_path: Path, policy: Path, extra: list[str]) -> None:
        self.socket_path = socket_path
        self.proc = subprocess.Popen(
            [str(binary), "--policy", str(policy), "--socket", str(socket_path), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "AGENTRT_LOG": os.environ.get("AGENTRT_LOG", "warn")},
        )
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"host did not start: {line!r} {self.proc.stderr.read()}")
        self.counts: dict[str, dict[str, int]] = {}

    def stop(self) -> dict[str, dict[str, int]]:
        """SIGTERM; parse the final counts line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=30)
        for part in re.findall(r"(\w+)=\w+ \{([^}]*)\}", out):
            name, body = part
            self.counts[name] = {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", body)}
        self.stderr = err
        return self.counts


@pytest.fixture
def start_host(host_binary, tmp_path):
    hosts: list[Host] = []

    def start(policy: str = "lru", *extra: str) -> Host:
        host = Host(host_binary, tmp_path / f"evict-{len(hosts)}.sock", component(policy), list(extra))
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        if host.proc.poll() is None:
            host.stop()


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
