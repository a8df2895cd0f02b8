"""An engine plugin's connection to the agentrt eviction service (vLLM's and SGLang's alike).

Runs on the engine's scheduler thread, so every call is bounded: a RANK waits at most the deadline
(``AGENTRT_EVICTION_DEADLINE_MS``, default 2 ms) and then the caller falls back to the engine's own
order; a broken connection is retried at most once a second; a late answer is dropped by its
request id when it finally arrives. Nothing here raises into the engine.

A plugin also calls :meth:`EvictionClient.watch`: a thread of its own then notices, within half a
second, that the host closed the connection (``agentrt serve`` stopped or restarted) and connects
again as soon as the host is back — not at the engine's next eviction, which may be minutes away
on an idle engine — so the host's ``agentrt_engine_plugin_connected`` reads 1 within a second or
two of a restart. Both sides log the reconnection. The thread and the scheduler thread share the
connection under one lock, held for microseconds by the watcher.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from array import array

from . import wire

# Each plugin passes its own logger (under its engine's, so the engine's log config shows the lines).
_default_log = logging.getLogger("agentrt_engine")


def _worth_a_line(count: int) -> bool:
    """Log a recurring condition on its 1st, 10th, 100th and every 1000th time, not every time:
    a host that keeps closing the connection must not flood the engine's log."""
    return count in (1, 10, 100) or count % 1000 == 0


class EvictionClient:
    def __init__(self, path: str, deadline_s: float, engine_version: str, retry_s: float = 1.0,
                 log: logging.Logger | None = None) -> None:
        self.path = path
        self.deadline_s = deadline_s
        self.engine_version = engine_version
        self.log = log or _default_log
        self.retry_s = retry_s
        self.sock: socket.socket | None = None
        self.reader = wire.FrameReader()
        self.next_id = 1
        self.missed = 0  # RANKs given up since the last one sent (reported to the host)
        self.refused = False  # the host speaks another protocol
        # The protocol the host agreed to (HELLO_OK), per connection; None until it answers.
        # Host-tier questions and events need 2.
        self.host_protocol: int | None = None
        self._last_attempt = -1e9
        self._defined: dict[str, int] = {}
        self._pending_defs: list[bytes] = []
        self.events = array("Q")
        # The scheduler thread and the watcher (``watch``) share the connection.
        self._lock = threading.RLock()
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()
        self._lost_at: float | None = None  # when the last connection was lost
        self._last_reconnect_line = -1e9
        self.stats = {
            "rank_requests": 0,
            "rank_answered": 0,
            "deadline_missed": 0,
            "connect_failures": 0,
            "connections_lost": 0,  # connections the host closed or that broke (each retried)
            "send_failures": 0,
            "late_replies": 0,
            "block_events_sent": 0,
            "block_events_dropped": 0,
            "host_tier_unsupported": 0,  # host-tier RANKs a protocol-1 host answered (ignored)
            "rank_wait_us_total": 0,  # time spent waiting for answers that came in time
            "rank_wait_us_max": 0,
        }

    # -- connection ---------------------------------------------------------------------------
    def connected(self) -> bool:
        with self._lock:
            if self.sock is not None:
                return True
            if self.refused:
                return False
            now = time.monotonic()
            if now - self._last_attempt < self.retry_s:
                return False
            return self._connect(now)

    def _connect(self, now: float) -> bool:
        self._last_attempt = now
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(0.05)
            sock.connect(self.path)
            sock.sendall(wire.hello(self.engine_version))
            sock.setblocking(False)
        except OSError as e:
            self.stats["connect_failures"] += 1
            if _worth_a_line(self.stats["connect_failures"]):
                self.log.warning("agentrt: cannot reach eviction service at %s (%s); using the engine's own order",
                                 self.path, e)
            return False
        self.sock = sock
        self.host_protocol = None
        self.reader = wire.FrameReader()
        # Agent ids are per connection: define them again on the new one.
        self._pending_defs = [wire.agent(wid, name) for name, wid in self._defined.items()]
        if self._lost_at is None:
            if _worth_a_line(self.stats["connections_lost"] + 1):
                self.log.info("agentrt: connected to eviction service at %s", self.path)
        elif _worth_a_line(self.stats["connections_lost"]) or now - self._last_reconnect_line >= 60:
            self._last_reconnect_line = now
            self.log.info("agentrt: reconnected to eviction service at %s after %.1f s without it (%d reconnections)",
                          self.path, now - self._lost_at, self.stats["connections_lost"])
        self._lost_at = None
        return True

    # -- the watcher ----------------------------------------------------------------------------
    def watch(self, every_s: float = 0.5) -> None:
        """Keep the connection up from a thread of its own (started once; a daemon): every
        ``every_s`` it closes a connection the host closed and connects when there is none (tries
        at most once per ``retry_s``, counting the scheduler thread's), so a restarted host is
        found within ``every_s + retry_s``."""
        with self._lock:
            if self._watcher is not None or self._closed.is_set():
                return
            self._watcher = threading.Thread(target=self._watch, args=(every_s,), name="agentrt-eviction-watch",
                                             daemon=True)
            self._watcher.start()

    def _watch(self, every_s: float) -> None:
        while not self._closed.wait(every_s):
            try:
                with self._lock:
                    if self.refused or self._closed.is_set():
                        return
                    if self.sock is not None and self._host_closed():
                        self._drop("closed by the host (agentrt serve stopped or restarted?)")
                    if self.sock is None:
                        self.connected()  # at most once a second, with the scheduler's own tries
            except Exception as e:  # the watcher must never take the engine down
                self.log.warning("agentrt: eviction connection watcher: %s", e)

    def _host_closed(self) -> bool:
        """Whether the host closed the connection. What it sent meanwhile (a HELLO_OK, a late
        answer) is read into the frame reader, where the scheduler thread finds it as if it had
        read it itself: only then can the end of the stream be seen behind it."""
        assert self.sock is not None
        try:
            while select.select([self.sock], [], [], 0)[0]:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
                self.reader.feed(data)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return False

    def _drop(self, why: str) -> None:
        if self.sock is not None:
            self._lost_at = time.monotonic()
            self.stats["connections_lost"] += 1
            lost = self.stats["connections_lost"]
            if _worth_a_line(lost):
                self.log.warning(
                    "agentrt: eviction service connection lost (%s; %d so far); using the engine's order, retrying every %.0f s",
                    why,
                    lost,
                    self.retry_s,
                )
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def _send(self, data: bytes, deadline: float) -> bool:
        """Write all of ``data`` by ``deadline``; a partial write breaks framing, so drop then."""
        assert self.sock is not None
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
                view = view[sent:]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([], [self.sock], [], left)[1]:
                    self.stats["send_failures"] += 1
                    self._drop("write timed out")
                    return False
            except OSError as e:
                self.stats["send_failures"] += 1
                self._drop(str(e))
                return False
        return True

    # -- agents and block events ----------------------------------------------------------------
    def wire_agent(self, agent) -> int:
        """The wire id for a request's ``agentrt_agent``: an int handle as is, a name defined once."""
        if agent is None:
            return 0
        if isinstance(agent, int):
            return agent if 0 <= agent < wire.DEFINED_AGENT_BIT else 0
        name = str(agent)
        with self._lock:
            wid = self._defined.get(name)
            if wid is None:
                wid = wire.DEFINED_AGENT_BIT | (len(self._defined) + 1)
                self._defined[name] = wid
                self._pending_defs.append(wire.agent(wid, name))
            return wid

    def block_event(
        self, op: int, wire_agent: int, position: int, block_hash: int, parent_hash: int, tier: int = wire.TIER_GPU
    ) -> None:
        if tier != wire.TIER_GPU and (self.host_protocol or 0) < 2:
            # A host that has not (yet) said it knows tiers would count a host-memory copy as a
            # GPU block: such events are dropped until it has.
            self.stats["block_events_dropped"] += 1
            return
        self.events.extend((wire.block_word0(op, wire_agent, position, tier), block_hash, parent_hash))

    def _outgoing(self) -> bytes:
        parts = self._pending_defs
        self._pending_defs = []
        if self.events:
            parts.append(wire.blocks(self.events))
            self.stats["block_events_sent"] += len(self.events) // 3
            self.events = array("Q")
        return b"".join(parts)

    def flush(self) -> None:
        """Send buffered definitions and block events (no answer expected)."""
        if not self.events and not self._pending_defs:
            return
        with self._lock:
            if not self.connected():
                self.stats["block_events_dropped"] += len(self.events) // 3
                self.events = array("Q")
                return
            self._send(self._outgoing(), time.monotonic() + self.deadline_s)

    # -- ranking --------------------------------------------------------------------------------
    def rank(self, items: list[tuple], want: int) -> list[int] | None:
        """Indices of ``items`` to evict first, or ``None`` (no answer in time: use the engine's own order)."""
        answer = self._ask(items, want, wire.TIER_GPU)
        return None if answer is None else answer[0]

    def rank_host(self, items: list[tuple], want: int) -> tuple[list[int], list[int]] | None:
        """Host-memory-tier candidates: ``(indices to drop first, at most want; indices the policy
        declines to store)``, or ``None`` (no answer in time, or a host that knows no tiers: use
        the engine's own order and store everything)."""
        answer = self._ask(items, want, wire.TIER_HOST)
        if answer is None:
            return None
        order, declined = answer
        if declined is None:
            # A protocol-1 host ranked these as GPU blocks: not an answer about the host tier.
            self.stats["host_tier_unsupported"] += 1
            return None
        return order, declined

    def _ask(self, items: list[tuple], want: int, tier: int) -> tuple[list[int], list[int] | None] | None:
        with self._lock:
            return self._ask_locked(items, want, tier)

    def _ask_locked(self, items: list[tuple], want: int, tier: int) -> tuple[list[int], list[int] | None] | None:
        if not self.connected():
            return None
        if tier != wire.TIER_GPU and self.host_protocol is not None and self.host_protocol < 2:
            self.stats["host_tier_unsupported"] += 1
            return None
        started = time.monotonic()
        deadline = started + self.deadline_s
        request_id = self.next_id
        self.next_id = (self.next_id + 1) & 0xFFFFFFFF or 1
        self.stats["rank_requests"] += 1
        payload = self._outgoing() + wire.rank(request_id, want, self.missed, items, tier)
        if not self._send(payload, deadline):
            return None
        self.missed = 0
        answer = self._await(request_id, deadline)
        if answer is None:
            self.missed += 1
            self.stats["deadline_missed"] += 1
            return None
        self.stats["rank_answered"] += 1
        waited = int((time.monotonic() - started) * 1e6)
        self.stats["rank_wait_us_total"] += waited
        self.stats["rank_wait_us_max"] = max(self.stats["rank_wait_us_max"], waited)
        return answer

    def _await(self, request_id: int, deadline: float) -> tuple[list[int], list[int] | None] | None:
        assert self.sock is not None
        while True:
            try:
                item = self.reader.next()
            except ValueError as e:
                self._drop(str(e))
                return None
            if item is not None:
                kind, body = item
                got = self._on_frame(kind, body, request_id)
                if got is not None:
                    return got
                if self.sock is None:
                    return None
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError as e:
                self._drop(str(e))
                return None
            if not data:
                self._drop(
                    "closed by the host: at its --eviction-max-connections, or it refused a frame; its log says which"
                )
                return None
            self.reader.feed(data)

    def _on_frame(self, kind: int, body: bytes, request_id: int) -> tuple[list[int], list[int] | None] | None:
        try:
            if kind == wire.KIND_RANKED:
                rid, _fallback, order, declined = wire.decode_ranked(body)
                if rid == request_id:
                    return order, declined
                self.stats["late_replies"] += 1
            elif kind == wire.KIND_HELLO_OK:
                protocol = wire.decode_hello_ok(body)
                self.host_protocol = protocol
                if protocol not in wire.KNOWN_PROTOCOLS:
                    self.log.error(
                        "agentrt: eviction service speaks protocol %d, plugin %d: not using it",
                        protocol,
                        wire.PROTOCOL_VERSION,
                    )
                    self.refused = True
                    self._drop("protocol mismatch")
            else:
                self.log.warning("agentrt: unexpected frame kind %#x from host (%d bytes); skipped", kind, len(body))
        except Exception as e:  # a malformed answer must not reach the engine
            self.log.warning("agentrt: malformed frame kind %#x from host: %s", kind, e)
        return None

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self.sock is not None:
                try:
                    self.sock.close()
                except OSError:
                    pass
            self.sock = None
