"""Test helpers every engine adapter's pytest suite shares: the real agentrt eviction service
(`agentrt-eviction-host`, the Rust host behind the eviction socket, whatever the engine) running a
real policy component, and a silent host for the one fault the real one cannot be made to show.

Imported by adapters/vllm/tests/conftest.py and adapters/sglang/tests/conftest.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The build's target folder: CARGO_TARGET_DIR (relative to the repository when relative), as
# `cargo xtask` resolves it and passes it on.
TARGET = REPO / (os.environ.get("CARGO_TARGET_DIR") or "target")


def components_dir() -> Path:
    return Path(os.environ.get("AGENTRT_COMPONENTS_DIR", TARGET / "components"))


def component(name: str) -> Path:
    path = components_dir() / f"{name}.wasm"
    if not path.is_file():
        pytest.skip(f"{path} is missing: run `cargo xtask build-policies`")
    return path


def host_binary() -> Path:
    """<target>/debug/agentrt-eviction-host, built if needed (AGENTRT_EVICTION_HOST_BIN overrides)."""
    override = os.environ.get("AGENTRT_EVICTION_HOST_BIN")
    if override:
        return Path(override)
    binary = TARGET / "debug" / "agentrt-eviction-host"
    if not binary.is_file():
        if shutil.which("cargo") is None:
            pytest.skip("agentrt-eviction-host is not built and cargo is not on PATH")
        subprocess.run(["cargo", "build", "-p", "agentrt-eviction", "--bin", "agentrt-eviction-host"], cwd=REPO, check=True)
    return binary


class Host:
    """One eviction-service process: a policy behind the eviction socket."""

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


def host_factory(binary: Path, tmp_path: Path):
    """``(start, stop_all)``: ``start(policy="lru", *extra)`` runs a :class:`Host` on a socket in
    ``tmp_path``; ``stop_all()`` stops every one still running (a fixture's teardown)."""
    hosts: list[Host] = []

    def start(policy: str = "lru", *extra: str) -> Host:
        host = Host(binary, tmp_path / f"evict-{len(hosts)}.sock", component(policy), list(extra))
        hosts.append(host)
        return host

    def stop_all() -> None:
        for host in hosts:
            if host.proc.poll() is None:
                host.stop()

    return start, stop_all


def skip_every_module_unless(missing: str | None):
    """A ``pytest_pycollect_makemodule`` hook for a suite whose engine may be absent: with
    ``missing`` set (why the engine does not import), every test module is reported as skipped with
    that reason instead of being imported. (``pytest.importorskip`` at a conftest's top level aborts
    pytest 9 instead of skipping.)"""

    class SkippedModule(pytest.Module):
        def collect(self):
            raise pytest.skip.Exception(missing, allow_module_level=True)

    def pytest_pycollect_makemodule(module_path, parent):
        if missing is not None:
            return SkippedModule.from_parent(parent, path=module_path)
        return None

    return pytest_pycollect_makemodule


# The fixtures both suites use; a conftest imports them by name so pytest finds them.


@pytest.fixture(scope="session", name="host_binary")
def host_binary_fixture() -> Path:
    """<target>/debug/agentrt-eviction-host, built if needed (AGENTRT_EVICTION_HOST_BIN overrides)."""
    return host_binary()


@pytest.fixture
def start_host(host_binary, tmp_path):
    """``start(policy="lru", *extra)`` runs an eviction service; all are stopped after the test."""
    start, stop_all = host_factory(host_binary, tmp_path)
    yield start
    stop_all()


class SilentHost:
    """MOCK for a fault the real service cannot be made to show: a host that accepts the
    connection and reads everything but never answers. Records the RANK frames it got."""

    def __init__(self, path) -> None:
        from agentrt_engine import wire

        self.wire = wire
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(1)
        self.ranks: list[tuple[int, int, int, int]] = []  # (request_id, want, missed, items)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        wire = self.wire
        conn, _ = self.server.accept()
        reader = wire.FrameReader()
        while True:
            data = conn.recv(1 << 16)
            if not data:
                return
            reader.feed(data)
            while (frame := reader.next()) is not None:
                kind, body = frame
                if kind == wire.KIND_RANK:
                    rid, want, missed = struct.unpack_from("<III", body, 0)
                    self.ranks.append((rid, want, missed, (len(body) - 12) // wire.ITEM.size))
