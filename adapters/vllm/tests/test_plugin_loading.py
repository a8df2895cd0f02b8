"""The plugin as vLLM loads it: through the ``vllm.general_plugins`` entry point, configured by
environment. Each case runs in a fresh interpreter, as vLLM's processes do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = """
import vllm.plugins
vllm.plugins.load_general_plugins()
from agentrt_vllm import patch
from vllm.v1.core.block_pool import BlockPool
print("installed", patch._state["installed"], "wrapped" if hasattr(BlockPool.get_new_blocks, "__wrapped__") else "plain")
"""


def run(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_inactive_without_a_socket():
    assert run({}) == "installed False plain"


def test_patches_the_block_pool_when_configured(tmp_path):
    assert run({"AGENTRT_EVICTION_SOCKET": str(tmp_path / "x.sock")}) == "installed True wrapped"


UNKNOWN_VERSION = """
from agentrt_vllm import patch
patch.vllm_version = lambda: "0.31.9"  # stands in for an unknown vLLM: the one fault this cannot cause otherwise
import vllm.plugins
vllm.plugins.load_general_plugins()
from vllm.v1.core.block_pool import BlockPool
print("installed", patch._state["installed"], "wrapped" if hasattr(BlockPool.get_new_blocks, "__wrapped__") else "plain")
"""


def run_unknown(env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", UNKNOWN_VERSION], env=env, capture_output=True, text=True, timeout=120)


def test_an_unknown_vllm_stops_with_an_error_naming_the_way_on(tmp_path):
    out = run_unknown({"AGENTRT_EVICTION_SOCKET": str(tmp_path / "x.sock")})
    assert out.returncode != 0, out.stdout
    assert "vLLM 0.31.9 is not a version the agentrt plugin was tested with" in out.stderr, out.stderr[-2000:]
    assert "AGENTRT_VLLM_ALLOW_UNTESTED=1" in out.stderr and "unset AGENTRT_EVICTION_SOCKET" in out.stderr


def test_an_unknown_vllm_is_let_through_when_the_operator_allows_it():
    from agentrt_vllm.plugin import UntestedVllmError, version_gate

    version_gate("0.31.9", ("0.32.0",), allowed=True)  # warns, does not raise
    version_gate("0.32.0+cpu", ("0.32.0",), allowed=False)
    with pytest.raises(UntestedVllmError, match="AGENTRT_VLLM_ALLOW_UNTESTED=1"):
        version_gate("0.31.9", ("0.32.0",), allowed=False)


def test_the_wheel_carries_what_the_engine_plugins_share(tmp_path):
    """The wheel ``cargo xtask dist`` ships is all an operator installs: it carries
    ``agentrt_engine`` (adapters/lib/python), which the plugin imports, and loads from a folder
    that holds nothing else of agentrt."""
    repo = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
                    "--no-build-isolation", "--quiet", "--wheel-dir", str(tmp_path), str(repo / "adapters/vllm")],
                   check=True, capture_output=True)
    shutil.rmtree(repo / "adapters/vllm/build", ignore_errors=True)
    (wheel,) = tmp_path.glob("agentrt_vllm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("wire", "client", "request_tag", "settings", "versions", "plugin"):
        assert f"agentrt_engine/{module}.py" in names, names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--no-deps", "--quiet",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    probe = "import agentrt_vllm.plugin, agentrt_engine; print(agentrt_vllm.plugin.__file__, agentrt_engine.__file__)"
    # -S: no site-packages, so neither an editable install nor the venv can stand in for the wheel.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env["PYTHONPATH"] = str(site)
    seen = subprocess.run([sys.executable, "-S", "-c", probe], env=env, check=True, capture_output=True,
                          text=True).stdout.split()
    assert len(seen) == 2 and all(p.startswith(str(site)) for p in seen), seen
