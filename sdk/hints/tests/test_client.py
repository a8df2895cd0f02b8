"""The client against the stand-in for `agentrt serve` (tests/standin.py), over real HTTP."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt_hints import AgentrtHints, endpoint_url, headers_for
from agentrt_hints import client as client_module

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "base_url, expected",
    [
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/agentrt/hints"),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/agentrt/hints"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/agentrt/hints"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1/agentrt/hints"),
        ("https://gw.example/agentrt/v1", "https://gw.example/agentrt/v1/agentrt/hints"),
    ],
)
def test_the_endpoint_is_found_from_the_clients_base_url_with_or_without_v1(base_url, expected):
    assert endpoint_url(base_url) == expected


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "", "/"])
def test_either_form_of_base_url_reaches_the_endpoint(agentrt, suffix):
    answer = AgentrtHints(agentrt.root + suffix).close("s-1")
    assert answer == {"accepted": 1, "duplicates": 0}
    assert agentrt.hints() == [{"type": "session_closed", "session": "s-1"}]


@pytest.mark.parametrize("bad", ["127.0.0.1:8080", "ftp://host/v1", "http://", "http://h/v1?x=1", None])
def test_a_base_url_that_is_not_a_proxy_address_is_refused_at_setup(bad):
    with pytest.raises(ValueError, match="base_url"):
        AgentrtHints(bad)


def test_each_method_sends_the_protocols_body_with_the_api_key(agentrt):
    hints = AgentrtHints(agentrt.root + "/v1", api_key="key-a")
    hints.close("s")
    hints.wait_tool("s", "web_search", agent="researcher", expected_s=2)
    hints.wait_tool("s", "grep")
    hints.wait_user("s", agent="planner")
    hints.handoff("s", "planner", "coder")
    hints.handoff("s", None, "reviewer")
    assert agentrt.hints() == [
        {"type": "session_closed", "session": "s"},
        {"type": "wait", "session": "s", "kind": "tool", "agent": "researcher", "tool": "web_search", "expected_ms": 2000},
        {"type": "wait", "session": "s", "kind": "tool", "tool": "grep"},
        {"type": "wait", "session": "s", "kind": "user", "agent": "planner"},
        {"type": "handoff", "session": "s", "to_agent": "coder", "from_agent": "planner"},
        {"type": "handoff", "session": "s", "to_agent": "reviewer"},
    ]
    for headers, _ in agentrt.hint_calls():
        assert headers["authorization"] == "Bearer key-a"
        assert headers["content-type"] == "application/json"
    assert (hints.sent, hints.dropped) == (6, 0)


def test_an_empty_list_is_answered_without_a_call(agentrt):
    assert AgentrtHints(agentrt.root).send([]) == {"accepted": 0, "duplicates": 0}
    assert agentrt.hint_calls() == []


def test_send_carries_several_hints_in_one_call_and_returns_the_answer(agentrt):
    hints = AgentrtHints(agentrt.root)
    hints.close("s")
    answer = hints.send([{"type": "session_closed", "session": "s"}, {"type": "wait", "session": "t", "kind": "user"}])
    assert answer == {"accepted": 2, "duplicates": 1}
    assert len(agentrt.hint_calls()) == 2


LONG = "x" * 257
MALFORMED = [
    ([{"type": "closed", "session": "s"}], 'hints[0].type: expected "session_closed", "wait" or "handoff", got "closed"'),
    ([{"session": "s"}], "hints[0].type: missing"),
    ([{"type": "session_closed"}], "hints[0].session: missing"),
    ([{"type": "session_closed", "session": ""}], "hints[0].session: must not be empty"),
    ([{"type": "session_closed", "session": 7}], "hints[0].session: expected a string, got 7"),
    ([{"type": "session_closed", "session": LONG}], "hints[0].session: 257 bytes, over the limit of 256"),
    ([{"type": "session_closed", "session": "é" * 129}], "hints[0].session: 258 bytes"),
    ([{"type": "session_closed", "session": "s", "agent": "a"}], "hints[0].agent: not a field of a \"session_closed\""),
    (
        [{"type": "session_closed", "session": "s"}] * 3 + [{"type": "wait", "session": "s", "kind": "x"}],
        'hints[3].kind: expected "tool" or "user", got "x"',
    ),
    ([{"type": "wait", "session": "s"}], "hints[0].kind: missing"),
    ([{"type": "wait", "session": "s", "kind": None}], 'hints[0].kind: expected "tool" or "user", got null'),
    ([{"type": "wait", "session": None, "kind": "user"}], "hints[0].session: expected a string, got null"),
    ([{"type": "wait", "session": "s", "kind": "tool"}], "hints[0].tool: missing"),
    ([{"type": "wait", "session": "s", "kind": "user", "tool": "t"}], "hints[0].tool: a user wait names no tool"),
    ([{"type": "wait", "session": "s", "kind": "tool", "tool": LONG}], "hints[0].tool: 257 bytes"),
    ([{"type": "wait", "session": "s", "kind": "user", "agent": LONG}], "hints[0].agent: 257 bytes"),
    ([{"type": "wait", "session": "s", "kind": "user", "expected_ms": -1}], "hints[0].expected_ms: -1 is outside"),
    ([{"type": "wait", "session": "s", "kind": "user", "expected_ms": 86_400_001}], "is outside 0..=86400000"),
    ([{"type": "wait", "session": "s", "kind": "user", "expected_ms": 1.5}], "expected whole milliseconds"),
    ([{"type": "wait", "session": "s", "kind": "user", "expected_ms": True}], "expected whole milliseconds"),
    ([{"type": "handoff", "session": "s", "from_agent": "a"}], "hints[0].to_agent: missing"),
    ([{"type": "handoff", "session": "s", "from_agent": "a", "to_agent": LONG}], "hints[0].to_agent: 257 bytes"),
    (["session_closed"], "hints[0]: expected an object"),
    ([{"type": "session_closed", "session": "s"}] * 65, "65 hints, over the limit of 64 per call: split the list"),
    ({"type": "session_closed", "session": "s"}, "hints: expected a list"),
    ([{"type": "wait", "session": "s", "kind": "user", "agent": "a" * 250}] * 64, "over the limit of 16384: split"),
]


@pytest.mark.parametrize("hints, message", MALFORMED)
def test_a_malformed_hint_raises_locally_and_nothing_is_sent(agentrt, hints, message):
    client = AgentrtHints(agentrt.root)
    with pytest.raises(ValueError) as error:
        client.send(hints)
    assert message in str(error.value)
    assert agentrt.hint_calls() == []


def test_malformed_arguments_of_the_methods_raise_locally(agentrt):
    client = AgentrtHints(agentrt.root)
    with pytest.raises(ValueError, match="expected_s: -1 is outside"):
        client.wait_tool("s", "t", expected_s=-1)
    with pytest.raises(ValueError, match="expected_s: expected a number of seconds"):
        client.wait_tool("s", "t", expected_s="2")
    with pytest.raises(ValueError, match="hints\\[0\\].session: 257 bytes"):
        client.close(LONG)
    with pytest.raises(ValueError, match="hints\\[0\\].to_agent: must not be empty"):
        client.handoff("s", "a", "")
    assert agentrt.hint_calls() == []


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_network_down_raises_nothing_and_warns_once(caplog):
    hints = AgentrtHints(f"http://127.0.0.1:{_closed_port()}/v1", timeout=1)
    with caplog.at_level(logging.WARNING, logger="agentrt_hints"):
        assert hints.close("s") is None
        assert hints.wait_user("s") is None
        hints._down_until = 0  # past the back-off: a real second attempt, refused again
        assert hints.handoff("s", "a", "b") is None
    warnings = [r for r in caplog.records if r.name == "agentrt_hints"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "cannot reach" in warnings[0].getMessage() and "/v1/agentrt/hints" in warnings[0].getMessage()
    assert (hints.sent, hints.dropped) == (0, 3)


def test_after_a_network_failure_hints_are_dropped_without_waiting_for_a_timeout(monkeypatch):
    hints = AgentrtHints(f"http://127.0.0.1:{_closed_port()}", timeout=1)
    hints.close("s")
    calls = []
    monkeypatch.setattr(client_module.urllib.request, "urlopen", lambda *a, **k: calls.append(a))
    for _ in range(10):
        assert hints.close("s") is None
    assert calls == [] and hints.dropped == 11


@pytest.mark.parametrize(
    "status, headers, fix",
    [
        (429, {"Retry-After": "1"}, "--hint-rate"),
        (401, {}, "api_key="),
        (404, {}, "no hint endpoint: upgrade it"),
        (400, {}, "the proxy refused them"),
    ],
)
def test_a_refusal_is_logged_once_with_its_fix_and_not_raised(agentrt, caplog, status, headers, fix):
    body = {"error": {"type": "invalid_hint", "message": "refused by the stand-in"}}
    agentrt.refusals = [(status, body, headers)] * 2
    hints = AgentrtHints(agentrt.root)
    with caplog.at_level(logging.WARNING, logger="agentrt_hints"):
        assert hints.close("s") is None
        assert hints.close("s") is None
    messages = [r.getMessage() for r in caplog.records if r.name == "agentrt_hints"]
    assert len(messages) == 1, messages
    assert str(status) in messages[0] and "refused by the stand-in" in messages[0] and fix in messages[0]
    # Refusals are not network failures: the next hint is tried at once.
    assert hints.close("s") == {"accepted": 1, "duplicates": 0}


def test_headers_for_names_the_session_and_carries_the_request_hints():
    assert headers_for("run-7") == {"x-session-id": "run-7"}
    assert headers_for("run-7", closed=True, next_agent="coder") == {
        "x-session-id": "run-7",
        "x-agentrt-session-end": "closed",
        "x-agentrt-next-agent": "coder",
    }
    for bad, message in [("", "must not be empty"), (LONG, "257 bytes"), ("sé", "cannot travel in an HTTP header"),
                         ("a\r\nb", "cannot travel"), (" a", "cannot travel")]:
        with pytest.raises(ValueError, match=message):
            headers_for(bad)
    with pytest.raises(ValueError, match="next_agent: 257 bytes"):
        headers_for("s", next_agent=LONG)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=120)


def test_importing_the_package_imports_no_framework():
    done = _python(
        "import sys, agentrt_hints; "
        "print(sorted(m for m in ('langchain_core', 'langgraph', 'agents', 'autogen_agentchat') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "module, hook, package",
    [
        ("langchain_core", "AgentrtCallback", "pip install langchain-core"),
        ("agents", "AgentrtRunHooks", "pip install openai-agents"),
        ("autogen_agentchat", "close_on_termination", "pip install autogen-agentchat"),
    ],
)
def test_a_hook_without_its_framework_says_which_package_to_install(module, hook, package):
    # sys.modules[name] = None makes `import name` fail as if it were not installed.
    done = _python(f"import sys; sys.modules[{module!r}] = None; from agentrt_hints import {hook}")
    assert done.returncode != 0
    assert "ImportError" in done.stderr and package in done.stderr, done.stderr
