"""A STAND-IN for `agentrt serve`, on loopback: its hint endpoint and a scripted chat-completions
route, so that the hooks are driven by the real frameworks over real HTTP without a model or the
Rust proxy. The proxy's own side of the protocol (tenants, metrics, the policy events) is tested
in Rust (host/serve); this stand-in only records what arrives, checks it against the wire format,
and answers as the protocol says (`{"accepted": N, "duplicates": D}`; closing a session already
closed and not reopened by a later request is a duplicate).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

HINT_TYPES = {"session_closed", "wait", "handoff"}


class StandIn:
    """The server and what it saw, in arrival order: ``events`` holds ``("chat", headers, body)``
    and ``("hints", headers, hints)`` tuples (headers lower-cased)."""

    def __init__(self) -> None:
        self.events: list = []
        self.lock = threading.Lock()
        self.closed: set = set()
        #: The next hint calls are answered with these (status, body, headers) instead.
        self.refusals: list = []
        self.replies: list = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        # A short poll interval: shutdown() waits up to one, at the end of every test.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "StandIn":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def hints(self) -> list:
        """Every hint received, flattened, in order."""
        with self.lock:
            return [h for kind, _, hints in self.events if kind == "hints" for h in hints]

    def hint_calls(self) -> list:
        with self.lock:
            return [(headers, hints) for kind, headers, hints in self.events if kind == "hints"]

    def chats(self) -> list:
        with self.lock:
            return [(headers, body) for kind, headers, body in self.events if kind == "chat"]

    def kinds(self) -> list:
        with self.lock:
            return [kind for kind, _, _ in self.events]

    def wait_for_hints(self, count: int, timeout: float = 5.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self.hints()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.hints()

    # -- the routes ---------------------------------------------------------------------------

    def on_hints(self, headers: dict, body: Any) -> tuple:
        if self.refusals:
            return self.refusals.pop(0)
        problem = _check(body)
        if problem:
            return 400, {"error": {"type": "invalid_hint", "message": problem}}, {}
        duplicates = 0
        with self.lock:
            for hint in body["hints"]:
                if hint["type"] == "session_closed":
                    if hint["session"] in self.closed:
                        duplicates += 1
                    self.closed.add(hint["session"])
            self.events.append(("hints", headers, body["hints"]))
        # As the proxy counts: every hint of the call is accepted, the repeated closes among them
        # are also counted as duplicates.
        return 200, {"accepted": len(body["hints"]), "duplicates": duplicates}, {}

    def on_chat(self, headers: dict, body: Any) -> tuple:
        with self.lock:
            # A request reopens its session.
            self.closed.discard(headers.get("x-session-id"))
            self.events.append(("chat", headers, body))
            text = self.replies.pop(0) if self.replies else "ok"
        return 200, _completion(body.get("model", "stand-in"), text), {}


def _check(body: Any) -> Optional[str]:
    """The endpoint's shape (the hooks' bodies must have it); None when it is right."""
    if not isinstance(body, dict) or not isinstance(body.get("hints"), list) or not body["hints"]:
        return 'expected {"hints": [...]}'
    if len(body["hints"]) > 64:
        return "over 64 hints"
    for i, hint in enumerate(body["hints"]):
        if not isinstance(hint, dict) or hint.get("type") not in HINT_TYPES:
            return f"hints[{i}].type: unknown"
        if not isinstance(hint.get("session"), str) or not hint["session"]:
            return f"hints[{i}].session: missing"
        if hint["type"] == "wait" and hint.get("kind") not in ("tool", "user"):
            return f"hints[{i}].kind: expected \"tool\" or \"user\", got {hint.get('kind')!r}"
        if hint["type"] == "handoff" and not hint.get("to_agent"):
            return f"hints[{i}].to_agent: missing"
    return None


def _completion(model: str, text: str) -> dict:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _handler(standin: StandIn) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                return self._answer(400, {"error": {"type": "invalid_hint", "message": "bad JSON"}}, {})
            if self.path == "/v1/agentrt/hints":
                self._answer(*standin.on_hints(headers, body))
            elif self.path == "/v1/chat/completions":
                self._answer(*standin.on_chat(headers, body))
            else:
                self._answer(404, {"error": {"type": "not_found", "message": self.path}}, {})

        def _answer(self, status: int, body: Any, headers: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # quiet: pytest shows failures, not traffic
            pass

    return Handler
