"""The load generator says what its failed calls died of (agent_programs.py): a client's read
timeout — what a call held past the client's patience in a proxy's queue looks like — an HTTP
error, a refused connection. Real sockets on loopback; no engine needed."""

import http.server
import socket
import threading

import agent_programs

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def summary_of(*calls):
    result = agent_programs.Result(programs=1, calls=list(calls), wall_s=1.0)
    return result.summary()


def test_a_call_nothing_answers_fails_as_timed_out_after_the_clients_timeout():
    # Listening, never answering: the kernel completes the connection, no byte ever comes back.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        base = f"http://127.0.0.1:{silent.getsockname()[1]}"
        call = agent_programs.one_call(base, BODY, {}, timeout=0.5)
    assert not call.ok and call.error == "timed out"
    summary = summary_of(call)
    assert summary["failed"] == 1
    assert summary["failures"]["timed out"]["calls"] == 1
    assert summary["failures"]["timed out"]["longest_s"] >= 0.5
    assert agent_programs.failures_said(summary).startswith("1 failed: timed out ×1")


class Unavailable(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the handler's name is http.server's)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_error(503, "engine overloaded")

    def log_message(self, *_):
        pass


def test_an_http_error_and_a_refused_connection_are_told_apart_from_a_timeout():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        unavailable = agent_programs.one_call(f"http://127.0.0.1:{server.server_port}", BODY, {}, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    with socket.create_server(("127.0.0.1", 0)) as s:
        closed_port = s.getsockname()[1]
    refused = agent_programs.one_call(f"http://127.0.0.1:{closed_port}", BODY, {}, timeout=5)
    assert (unavailable.error, refused.error) == ("HTTP 503", "refused")
    summary = summary_of(unavailable, refused)
    assert summary["failed"] == 2 and set(summary["failures"]) == {"HTTP 503", "refused"}


def test_an_answered_call_has_no_failure():
    assert summary_of(agent_programs.Call(True, 0.1, 0.05, 10, 0))["failures"] == {}
