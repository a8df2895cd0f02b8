"""docs/agents.md ("Hints out: what the engine reads") says that the installed vLLM cannot carry a
policy's decisions in its KV hint envelope: its OpenAI-compatible HTTP server accepts no
`kv_hints`, and no retention action is defined anywhere in the package. This reads the installed
vLLM's own source (not importing it) and fails when either stops being true, so that the statement
is revised rather than left stale. Skipped, saying why, without the vLLM venv (conftest)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def vllm_package() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations, "vLLM is importable but has no package folder"
    return Path(next(iter(spec.submodule_search_locations)))


def files_saying(folder: Path, text: str) -> list[str]:
    return sorted(
        str(path.relative_to(folder))
        for path in folder.rglob("*.py")
        if text in path.read_text(encoding="utf-8", errors="replace")
    )


def test_the_envelope_is_there_and_carries_no_policy_decision_over_http():
    package = vllm_package()
    protocol = package / "v1" / "kv_hints" / "protocol.py"
    if not protocol.is_file():
        pytest.fail(f"{protocol} is gone: docs/agents.md's 'Hint dialects' and 'Hints out' describe its envelope")
    source = protocol.read_text(encoding="utf-8")
    for field in ("protocol_version", "message_id", "actions", "action_id", "action_type", "action_version", "payload"):
        assert f"{field}:" in source, f"the envelope lost `{field}`: revise host/serve/src/hints/dialects.rs"
    over_http = files_saying(package / "entrypoints", "kv_hints")
    assert not over_http, (
        f"vLLM's HTTP entry points now read kv_hints ({over_http}): agentrt could send a policy's decisions "
        "in the envelope; revise docs/agents.md 'Hints out' (and whether serve strips `kv_hints`)"
    )
    retain = files_saying(package, "kv.retain")
    assert not retain, (
        f"vLLM now defines a retention action ({retain}): revise docs/agents.md 'Hints out' and consider "
        "sending the policy's retain as that action"
    )
