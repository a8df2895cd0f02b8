"""vLLM's own ``tests/v1/core`` (from PyPI's vLLM 0.32.0 sdist, fetched by setup-venv.sh) with the
plugin installed, three ways: no host (nothing listens on the socket: every pool falls back to
vLLM's order), an ``lru`` host and a ``cachesage`` host (the real eviction service running the
real components; every ranking the tests' pools ask for is answered and applied). Every test
passes each way except those skipped, by name, for needing a download (core_suite/).

Each way is a child pytest (the patches are process-wide); its counts go to
``<target>/engine-suites/vllm-core-<way>.json``. About a minute a way on two cores.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from engine_suite import run_suite
from eviction_host import TARGET

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE.parent / "core_suite"
VLLM_VERSION = "0.32.0"
MODULES = ["test_prefix_caching.py", "test_kv_cache_utils.py", "test_scheduler.py", "test_single_type_kv_cache_manager.py"]


def core_tests() -> Path:
    """The unpacked sdist (``AGENTRT_VLLM_CORE_TESTS`` or ~/.cache/agentrt/vllm-0.32.0-core-tests)."""
    default = Path.home() / ".cache" / "agentrt" / f"vllm-{VLLM_VERSION}-core-tests"
    root = Path(os.environ.get("AGENTRT_VLLM_CORE_TESTS", default)) / f"vllm-{VLLM_VERSION}"
    if not (root / "tests" / "v1" / "core" / MODULES[0]).is_file():
        pytest.skip(f"vLLM's own tests are not unpacked at {root}: run `bash adapters/vllm/setup-venv.sh`")
    return root


@pytest.mark.parametrize("way", ["no-host", "lru", "cachesage"])
def test_vllms_own_core_tests_pass_with_the_plugin(way, start_host, tmp_path):
    root = core_tests()
    host = None if way == "no-host" else start_host(way)
    socket_path = tmp_path / "nobody.sock" if host is None else host.socket_path
    stats_path = tmp_path / "plugin-stats.json"
    run = run_suite(
        sys.executable,
        root,
        [f"tests/v1/core/{m}" for m in MODULES],
        PLUGIN_DIR,
        "agentrt_core_suite",
        {"AGENTRT_EVICTION_SOCKET": str(socket_path), "AGENTRT_CORE_SUITE_STATS": str(stats_path)},
        tmp_path / "junit.xml",
    )
    stats = json.loads(stats_path.read_text())
    record = {"way": way, "passed": run.passed, "failed": len(run.failed), "skipped": len(run.skipped),
              "seconds": round(run.seconds, 1), "plugin": stats}
    out = TARGET / "engine-suites"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"vllm-core-{way}.json").write_text(json.dumps(record, indent=1))

    assert not run.failed, f"vLLM's tests/v1/core with the plugin, {way}: {run.summary()}:\n" + "\n".join(run.failed)
    odd = {node: why for node, why in run.skipped.items() if "needs a download" not in why}
    assert not odd, f"vLLM's tests/v1/core with the plugin, {way}: skipped for another reason than a download: {odd}"
    assert run.passed > 500, f"{way}: only {run.summary()}:\n{run.output_tail}"
    assert stats["pools"] > 0 and stats["evictions_needed"] > 0, f"{way}: the tests' pools evicted nothing: {stats}"
    if host is None:
        assert stats["rank_requests"] == 0 and stats["victims_from_policy"] == 0, stats
    else:
        # Every ranking asked for was answered in time, and the policy's victims were the ones evicted.
        assert stats["rank_requests"] > 0 and stats["rank_answered"] == stats["rank_requests"], stats
        assert stats["victims_from_policy"] > 0 and stats["victims_from_vllm"] == 0, stats
        counts = host.stop()["eviction"]
        assert counts["rank_requests"] == stats["rank_requests"] and counts["malformed"] == 0, counts
