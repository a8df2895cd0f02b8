"""Fixtures for the SGLang plugin's tests: SGLang from its venv, the agentrt eviction service, policy
components.

Everything here is real: SGLang's RadixCache and its token allocator, the Rust eviction service in
its own process on a Unix socket, Wasm policy components built from this repository. Tests skip,
saying why, when a piece is missing (no SGLang venv, no components, no cargo).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testing"))
import eviction_host  # noqa: E402  (adapters/testing: shared with the vLLM suite)
from eviction_host import host_binary_fixture, start_host  # noqa: E402,F401  (the shared fixtures)

try:
    import sglang.srt.mem_cache.radix_cache  # noqa: F401
    SGLANG_MISSING = None
except ImportError as e:
    SGLANG_MISSING = (
        f"SGLang's radix cache does not import here ({e}): run adapters/sglang/setup-venv.sh and use "
        "~/.cache/agentrt/venv-sglang/bin/python"
    )


pytest_pycollect_makemodule = eviction_host.skip_every_module_unless(SGLANG_MISSING)


@pytest.fixture(scope="session")
def installed():
    """The plugin's patches on SGLang's RadixCache and its `agentrt` backend (what ``register()``
    does in an SGLang process)."""
    from agentrt_sglang import patch

    assert patch.install("/nonexistent/agentrt-test.sock"), "this SGLang is not one the plugin supports"
    return patch
