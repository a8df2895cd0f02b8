"""`AgentrtHints`: sends lifecycle hints to `agentrt serve`'s POST /v1/agentrt/hints.

Hints are advisory: a cache that does not hear one only loses a little hit rate. So a hint that
cannot be delivered — proxy down, too slow, rate-limited, an older proxy without the endpoint —
never raises into the framework: it is dropped, and the cause is logged once (logger
``agentrt_hints``) so that a broken setup is visible without flooding the log. A hint that is
malformed is the caller's bug, and raises `ValueError` at once, before anything is sent.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping, Optional, Sequence

from . import wire

log = logging.getLogger("agentrt_hints")

#: The endpoint, under the proxy's root.
HINTS_PATH = "/v1/agentrt/hints"
#: After a network failure, how long to drop hints without trying: a proxy that is down must not
#: cost the framework a timeout on every hint.
BACKOFF_S = 5.0


def endpoint_url(base_url: str) -> str:
    """The hint endpoint of the proxy at `base_url`, which may be the URL the model client uses
    (``http://host:8080/v1``) or the proxy's root (``http://host:8080``)."""
    if not isinstance(base_url, str):
        raise ValueError(f"base_url: expected a URL string, got {type(base_url).__name__}")
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"base_url: {base_url!r} is not an http(s) URL: pass agentrt serve's address, "
            "e.g. http://127.0.0.1:8080/v1 (the client's base_url) or http://127.0.0.1:8080"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"base_url: {base_url!r} has a query or fragment: pass the proxy's address only")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + HINTS_PATH, "", ""))


class AgentrtHints:
    """A client of `agentrt serve`'s hint endpoint.

    ``base_url``: the proxy, as the model client names it (``http://host:8080/v1``) or without
    ``/v1``. ``api_key``: the tenant's key (sent as ``Authorization: Bearer``), the same the model
    client uses; ``None`` where the proxy has no keys. ``timeout``: seconds per call.

    Every method returns the proxy's answer (``{"accepted": N, "duplicates": D}``), or ``None``
    when the hint could not be delivered (logged once per cause).
    """

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 2.0):
        self.url = endpoint_url(base_url)
        if api_key is not None and (not isinstance(api_key, str) or not api_key.isprintable()):
            raise ValueError("api_key: expected a printable string (the tenant's API key) or None")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
        self.api_key = api_key
        self.timeout = float(timeout)
        #: Hints delivered (accepted by the proxy, duplicates included) and dropped, by this client.
        self.sent = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._warned: set = set()
        self._down_until = 0.0

    # -- one method per hint ------------------------------------------------------------------

    def close(self, session: str) -> Optional[dict]:
        """The session is over: its cached context will not be asked for again."""
        return self.send([{"type": "session_closed", "session": session}])

    def wait_tool(
        self, session: str, tool: str, agent: Optional[str] = None, expected_s: Optional[float] = None
    ) -> Optional[dict]:
        """The session's agent now waits for `tool`; `expected_s`: how long it usually takes."""
        return self.send([_wait(session, "tool", agent, tool, wire.expected_ms(expected_s))])

    def wait_user(self, session: str, agent: Optional[str] = None) -> Optional[dict]:
        """The session now waits for its user (a human turn: minutes to never)."""
        return self.send([_wait(session, "user", agent, None, None)])

    def handoff(self, session: str, from_agent: Optional[str], to_agent: str) -> Optional[dict]:
        """`from_agent` (None: not known) hands the session to `to_agent`, which runs next."""
        hint = {"type": "handoff", "session": session, "to_agent": to_agent}
        if from_agent is not None:
            hint["from_agent"] = from_agent
        return self.send([hint])

    # -- transport ----------------------------------------------------------------------------

    def send(self, hints: Sequence[Mapping[str, Any]]) -> Optional[dict]:
        """Send up to 64 hints in one call (all or nothing at the proxy). Raises `ValueError` on a
        malformed hint; never raises on a delivery failure."""
        body = wire.encode(hints)
        if not hints:
            return {"accepted": 0, "duplicates": 0}  # nothing to say: no call
        if time.monotonic() < self._down_until:
            self._drop(len(hints))
            return None
        request = urllib.request.Request(self.url, data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        if self.api_key is not None:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            self._refused(error, len(hints))
            return None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            # Connection refused, unreachable, timed out: the proxy is not there (now).
            self._down_until = time.monotonic() + BACKOFF_S
            reason = getattr(error, "reason", error)
            self._warn_once(
                f"network:{type(reason).__name__}",
                "agentrt hints: cannot reach %s (%s); hints are dropped while it is unreachable",
                self.url,
                reason,
            )
            self._drop(len(hints))
            return None
        except ValueError as error:  # a 200 whose body is not JSON: not agentrt serve
            self._warn_once("answer", "agentrt hints: %s answered something that is not JSON (%s)", self.url, error)
            self._drop(len(hints))
            return None
        with self._lock:
            self.sent += len(hints)
        return answer if isinstance(answer, dict) else None

    async def asend(self, hints: Sequence[Mapping[str, Any]]) -> Optional[dict]:
        """`send` for async frameworks: the call runs in a worker thread, off the event loop. The
        hints are checked before it starts, so `ValueError` still raises here."""
        wire.encode(hints)
        return await asyncio.to_thread(self.send, hints)

    async def asend_from_hook(self, hints: Sequence[Mapping[str, Any]]) -> Optional[dict]:
        """`asend` for a framework hook, whose hints carry names the framework chose (an agent's,
        a tool's): one the endpoint would refuse (too long, say) is dropped with a warning, once per
        field, rather than raised into the framework's run."""
        try:
            return await self.asend(hints)
        except ValueError as error:
            field = str(error).split(":", 1)[0]
            self._warn_once(f"malformed:{field}", "agentrt hints: a hook's hint was dropped: %s", error)
            self._drop(len(hints))
            return None

    def _refused(self, error: urllib.error.HTTPError, count: int) -> None:
        detail = _error_message(error)
        fixes = {
            401: "pass the tenant's API key (api_key=), the one the model client uses",
            403: "pass the tenant's API key (api_key=), the one the model client uses",
            404: "this agentrt serve has no hint endpoint: upgrade it, or leave hints off",
            413: "send fewer hints per call",
            429: f"over the tenant's hint rate (agentrt serve --hint-rate); retry after "
            f"{error.headers.get('Retry-After', '?')} s",
        }
        fix = fixes.get(error.code, "the proxy refused them")
        self._warn_once(f"http:{error.code}", "agentrt hints: %s answered %s: %s (%s)", self.url, error.code, detail, fix)
        self._drop(count)

    def _drop(self, count: int) -> None:
        with self._lock:
            self.dropped += count

    def _warn_once(self, cause: str, message: str, *args: Any) -> None:
        with self._lock:
            if cause in self._warned:
                return
            self._warned.add(cause)
        log.warning(message, *args)


def _wait(session: str, kind: str, agent: Optional[str], tool: Optional[str], expected: Optional[int]) -> dict:
    hint = {"type": "wait", "session": session, "kind": kind}
    for key, value in (("agent", agent), ("tool", tool), ("expected_ms", expected)):
        if value is not None:
            hint[key] = value
    return hint


def _error_message(error: urllib.error.HTTPError) -> str:
    """The message of the proxy's `{"error": {"message": ...}}`, else the status line."""
    try:
        body = json.loads(error.read() or b"{}")
        return str(body["error"]["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(error.reason)
