"""The hint wire format of `agentrt serve` (POST /v1/agentrt/hints and the request headers),
checked here before anything is sent.

The limits are the proxy's own: a hint the proxy would refuse with 400 is refused here with a
`ValueError` whose message has the same shape (``hints[3].kind: expected "tool" or "user", got
"x"``), so that a mistake shows up where it was made, at once, rather than as a warning in a log.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

#: Most hints in one call.
MAX_HINTS = 64
#: Most bytes of a request body.
MAX_BODY_BYTES = 16 * 1024
#: Most UTF-8 bytes of `session`, `agent`, `tool`, `from_agent`, `to_agent` (the proxy's limit on
#: an agent name, `x-agent-id`).
MAX_NAME_BYTES = 256
#: Most `expected_ms`: one day.
MAX_EXPECTED_MS = 86_400_000

#: Request headers.
SESSION_HEADER = "x-session-id"
SESSION_END_HEADER = "x-agentrt-session-end"
NEXT_AGENT_HEADER = "x-agentrt-next-agent"

# Per hint type: the fields it must have and the ones it may have (besides `type`).
_FIELDS = {
    "session_closed": ({"session"}, set()),
    "wait": ({"session", "kind"}, {"agent", "tool", "expected_ms"}),
    "handoff": ({"session", "to_agent"}, {"from_agent"}),
}
_NAMES = ("session", "agent", "tool", "from_agent", "to_agent")


def _quote(value: Any) -> str:
    # As JSON spells it (the proxy's messages do too): "x", null, 1.5.
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def check_name(where: str, value: Any) -> str:
    """A session/agent/tool name: a non-empty string of at most 256 UTF-8 bytes."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {_quote(value)}")
    if not value:
        raise ValueError(f"{where}: must not be empty")
    size = len(value.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise ValueError(f"{where}: {size} bytes, over the limit of {MAX_NAME_BYTES}: use a shorter id")
    return value


def check_hint(index: int, hint: Any) -> dict:
    """One hint, as the endpoint takes it; returns a copy."""
    at = f"hints[{index}]"
    if not isinstance(hint, Mapping):
        raise ValueError(f"{at}: expected an object with a \"type\", got {type(hint).__name__}")
    if "type" not in hint:
        raise ValueError(f'{at}.type: missing (one of "session_closed", "wait", "handoff")')
    kind = hint["type"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise ValueError(f'{at}.type: expected "session_closed", "wait" or "handoff", got {_quote(kind)}')
    required, optional = _FIELDS[kind]
    for field in sorted(required - set(hint)):
        raise ValueError(f"{at}.{field}: missing (a \"{kind}\" hint needs {', '.join(sorted(required))})")
    for field in sorted(set(hint) - required - optional - {"type"}):
        allowed = ", ".join(sorted(required | optional))
        raise ValueError(f"{at}.{field}: not a field of a \"{kind}\" hint (its fields: type, {allowed})")
    out = dict(hint)
    for field in _NAMES:
        if field in out and not (field in optional and out[field] is None):
            check_name(f"{at}.{field}", out[field])
    # An optional field given as None is left out; a required one is checked as given.
    out = {k: v for k, v in out.items() if not (k in optional and v is None)}
    if kind == "wait":
        _check_wait(at, out)
    return out


def _check_wait(at: str, hint: dict) -> None:
    kind = hint["kind"]
    if kind not in ("tool", "user"):
        raise ValueError(f'{at}.kind: expected "tool" or "user", got {_quote(kind)}')
    if kind == "tool" and "tool" not in hint:
        raise ValueError(f"{at}.tool: missing (a tool wait names its tool)")
    if kind == "user" and "tool" in hint:
        raise ValueError(f"{at}.tool: a user wait names no tool")
    expected = hint.get("expected_ms")
    if expected is not None:
        if isinstance(expected, bool) or not isinstance(expected, int):
            raise ValueError(f"{at}.expected_ms: expected whole milliseconds, got {_quote(expected)}")
        if not 0 <= expected <= MAX_EXPECTED_MS:
            raise ValueError(f"{at}.expected_ms: {expected} is outside 0..={MAX_EXPECTED_MS} (one day)")


def encode(hints: Sequence[Mapping[str, Any]]) -> bytes:
    """The request body for `hints`, checked against every limit of the endpoint."""
    if isinstance(hints, (str, bytes, Mapping)) or not isinstance(hints, Sequence):
        raise ValueError("hints: expected a list of hint objects")
    if len(hints) > MAX_HINTS:
        raise ValueError(f"hints: {len(hints)} hints, over the limit of {MAX_HINTS} per call: split the list")
    body = json.dumps({"hints": [check_hint(i, h) for i, h in enumerate(hints)]}, ensure_ascii=False)
    data = body.encode("utf-8")
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(f"hints: the body is {len(data)} bytes, over the limit of {MAX_BODY_BYTES}: split the list")
    return data


def expected_ms(expected_s: Optional[float]) -> Optional[int]:
    """Seconds (as frameworks measure them) to the endpoint's whole milliseconds."""
    if expected_s is None:
        return None
    if isinstance(expected_s, bool) or not isinstance(expected_s, (int, float)) or expected_s != expected_s:
        raise ValueError(f"expected_s: expected a number of seconds, got {_quote(expected_s)}")
    if not 0 <= expected_s <= MAX_EXPECTED_MS / 1000:
        raise ValueError(f"expected_s: {expected_s} is outside 0..={MAX_EXPECTED_MS // 1000} s (one day)")
    return round(expected_s * 1000)


def _header_value(where: str, value: str) -> str:
    check_name(where, value)
    # A header carries visible ASCII only (RFC 9110); other ids go through the endpoint, in JSON.
    if not all(0x20 <= ord(c) < 0x7F for c in value) or value != value.strip():
        raise ValueError(
            f"{where}: {_quote(value)} cannot travel in an HTTP header (visible ASCII only, no leading or "
            "trailing space): use an ASCII id"
        )
    return value


def headers_for(session: str, closed: bool = False, next_agent: Optional[str] = None) -> dict:
    """The request headers that name `session` (``x-session-id``) and carry the hints a request can
    carry: ``closed`` — this is the session's last request; ``next_agent`` — the agent that runs
    next. Pass them as the request's extra headers (``default_headers=``, ``extra_headers=``)."""
    headers = {SESSION_HEADER: _header_value("session", session)}
    if closed:
        headers[SESSION_END_HEADER] = "closed"
    if next_agent is not None:
        headers[NEXT_AGENT_HEADER] = _header_value("next_agent", next_agent)
    return headers
