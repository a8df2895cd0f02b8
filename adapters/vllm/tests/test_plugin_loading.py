"""The plugin as vLLM loads it: through the ``vllm.general_plugins`` entry point, configured by
environment. Each case runs in a fresh interpreter, as vLLM's processes do."""

from __future__ import annotations

import os
import subprocess
import sys

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
