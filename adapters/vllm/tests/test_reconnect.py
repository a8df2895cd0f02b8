"""The plugin's connection comes back on its own when the eviction service restarts: the watcher
thread (``EvictionClient.watch``) notices the closed connection and connects to the new process as
soon as it listens, with no eviction, rank or block event to prompt it — what an idle engine beside
a restarted ``agentrt serve`` needs. Against the real eviction service (``agentrt-eviction-host``),
stopped with SIGTERM and started again on the same socket path."""

from __future__ import annotations

import time

from eviction_host import Host, component

from agentrt_engine.client import EvictionClient


def wait_for(condition, seconds: float) -> float:
    """Seconds until ``condition()`` holds; fails past ``seconds``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_restarted_host_is_reconnected_to_within_two_seconds_without_any_engine_call(host_binary, tmp_path, caplog):
    path = tmp_path / "evict.sock"
    first = Host(host_binary, path, component("lru"), [])
    client = EvictionClient(str(path), 1.0, "test")
    try:
        assert client.connected()
        client.watch(every_s=0.25)
        assert first.stop()["eviction"]["connections"] == 1
        wait_for(lambda: client.sock is None, 2.0)  # the watcher saw the host go
        second = Host(host_binary, path, component("lru"), [])
        started = time.monotonic()
        with caplog.at_level("INFO", logger="agentrt_engine"):
            took = wait_for(lambda: client.sock is not None, 2.0)
            # The new host accepted it: its count says so (and a RANK is answered on it).
            assert client.rank([(1, 0, 1, 0, 0, 0)], 1) is not None
        counts = second.stop()
        assert counts["eviction"]["connections"] == 1, counts
        assert took < 2.0 and time.monotonic() - started < 5
        assert client.stats["connections_lost"] == 1
        assert any("reconnected to eviction service" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        client.close()
