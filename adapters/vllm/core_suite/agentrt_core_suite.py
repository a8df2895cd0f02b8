"""A pytest plugin that runs vLLM's own ``tests/v1/core`` with the agentrt plugin installed.

Loaded with ``-p agentrt_core_suite --noconftest`` in place of vLLM's top-level ``tests/conftest.py``,
which imports what the CPU venv does not have (``tblib``, model runners, image assets) and cleans
GPU state after every test. It gives the suite what it takes from there (``caplog_vllm``), the
model configurations its tests size the scheduler with (``stand_in_models``), and before any test
module imports vLLM's block pool it installs the plugin's patches exactly as ``register()`` does in
an engine process: ``patch.install(AGENTRT_EVICTION_SOCKET, deadline_ms, max_candidates=256)``.
Every ``BlockPool`` the tests build then carries a tracker that asks the host behind the socket to
rank its evictions; with nothing listening there, each pool falls back to vLLM's order.

Environment: ``AGENTRT_EVICTION_SOCKET`` (required), ``AGENTRT_EVICTION_DEADLINE_MS`` (default
1000: the host answers every ranking, so the policy, not the fallback, picks every victim),
``AGENTRT_CORE_SUITE_STATS`` (a JSON file the plugin's counters are written to at the end).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import pytest

# Tests that need files from the Hugging Face hub beyond a config.json: skipped by name (every
# parametrisation of the function), with the reason. A config.json is enough for the others
# (stand_in_models); these build their scheduler for a multimodal model, whose input processing
# loads the real tokenizer and image processor.
LLAVA = "llava-hf/llava-1.5-7b-hf's tokenizer and image processor, from the Hugging Face hub"
NEEDS_DOWNLOAD: dict[str, dict[str, str]] = {
    "tests/v1/core/test_scheduler.py": {
        name: LLAVA
        for name in (
            "test_eagle3_mm_encoder_cache_with_shift",
            "test_ec_connector_allocate_encoder_tokens_with_external_load",
            "test_ec_connector_cache_hit_external_load",
            "test_ec_connector_cache_miss_computes_locally",
            "test_ec_connector_defers_running_request_for_async_reload",
            "test_ec_connector_ensure_cache_available_defers_request",
            "test_ec_connector_schedule_multiple_requests",
            "test_ec_connector_text_only_request",
            "test_ec_connector_unable_to_allocate",
            "test_ec_connector_update_connector_output_called",
            "test_ec_connector_with_partial_cache_hit_multi_round",
            "test_encoder_cache_accepts_matching_embed_count",
            "test_encoder_cache_embed_count_mismatch_restores_prior_hit_state",
            "test_encoder_cache_recomputed_when_evicted_during_preemption",
            "test_encoder_cache_rejects_mismatched_embed_count",
            "test_encoder_cache_rejects_mismatched_embed_count_within_request",
            "test_encoder_cache_retained_across_preemption_and_resume",
            "test_encoder_only_prompt_longer_than_budget_is_chunked",
            "test_free_encoder_inputs_defers_for_eagle_lookahead",
            "test_free_encoder_inputs_notifies_the_ec_connector",
            "test_free_encoder_inputs_respects_unconfirmed_placeholders",
            "test_free_encoder_inputs_unchanged_without_spec_decode",
            "test_no_mm_input_chunking",
            "test_no_mm_input_chunking_for_same_step_duplicate",
            "test_priority_scheduling_ec_connector_preemption_and_resumption",
            "test_same_step_duplicate_encoder_input_stays_cached",
            "test_schedule_multimodal_requests",
            "test_schedule_partial_requests",
            "test_unavailable_encoder_input_fails_the_request_as_retryable",
        )
    },
}

_state: dict = {}


def pytest_configure(config) -> None:
    socket_path = os.environ.get("AGENTRT_EVICTION_SOCKET")
    if not socket_path:
        raise pytest.UsageError("agentrt_core_suite: set AGENTRT_EVICTION_SOCKET (a path where nothing listens: no host)")
    import stand_in_models

    models = Path(tempfile.mkdtemp(prefix="agentrt-core-suite-models-"))
    os.environ["VLLM_MODEL_REDIRECT_PATH"] = str(stand_in_models.write(models))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    from agentrt_vllm import patch

    deadline_ms = float(os.environ.get("AGENTRT_EVICTION_DEADLINE_MS", "1000"))
    if not patch.install(socket_path, deadline_ms, max_candidates=256):
        raise pytest.UsageError("agentrt_core_suite: the plugin refused this vLLM (see the log above)")
    _state["patch"] = patch


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        reason = NEEDS_DOWNLOAD.get(module, {}).get(getattr(item, "originalname", item.name))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"needs a download: {reason}"))


def _keep_tracker_counts() -> None:
    """Hold on to the counters of every tracker alive now (the dicts, not the pools): a test's
    pools are gone by the end of the session, and their counts with them otherwise."""
    patch = _state.get("patch")
    if patch is not None:
        for tracker in list(patch._trackers):
            _state.setdefault("tracker_stats", {})[id(tracker.stats)] = tracker.stats


def pytest_runtest_teardown(item, nextitem) -> None:
    _keep_tracker_counts()


def pytest_sessionfinish(session, exitstatus) -> None:
    out = os.environ.get("AGENTRT_CORE_SUITE_STATS")
    patch = _state.get("patch")
    if not out or patch is None:
        return
    _keep_tracker_counts()
    totals = dict(patch._state["client"].stats)
    for stats in _state.get("tracker_stats", {}).values():
        for key, value in stats.items():
            totals[key] = totals.get(key, 0) + value
    totals["pools"] = len(_state.get("tracker_stats", {}))
    Path(out).write_text(json.dumps(totals))


class _PluginErrors(logging.Handler):
    """The plugin never raises into vLLM: a tracker hook that fails is logged (``log.exception``)
    and the pool falls back to vLLM's order. In this suite such a log is a failure of the test."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def agentrt_plugin_errors():
    handler = _PluginErrors()
    logger = logging.getLogger("vllm.agentrt_vllm")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if handler.records:
        first = handler.records[0]
        detail = logging.Formatter().formatException(first.exc_info) if first.exc_info else ""
        pytest.fail(f"the agentrt plugin failed inside vLLM: {first.getMessage()}\n{detail}", pytrace=False)


# --- what vLLM's tests/conftest.py gives these modules -------------------------------------------


@pytest.fixture()
def temporary_enable_log_propagate():
    logger = logging.getLogger("vllm")
    previous = logger.propagate
    logger.propagate = True
    yield
    logger.propagate = previous


@pytest.fixture()
def caplog_vllm(temporary_enable_log_propagate, caplog):
    with caplog.at_level(logging.INFO):
        yield caplog
