"""A minimal OTLP/HTTP trace receiver for the tests: it decodes what an exporter sends with the
OpenTelemetry protocol's own definitions (PyPI `opentelemetry-proto`), so a span that does not
decode as an `ExportTraceServiceRequest` fails the test, as it would fail a real collector.

    python receiver.py            # listens on 127.0.0.1, an ephemeral port

It prints `listening on PORT` once bound, then serves:
- `POST /v1/traces` (Content-Type `application/x-protobuf`, optionally gzip): decoded and kept;
  answered with an empty `ExportTraceServiceResponse`. Anything else that is posted is a 400 and is
  counted as a rejected export.
- `GET /spans`: every span received so far, as JSON — name, trace and span ids in hex, the parent's
  id (empty for a root), kind, status, attributes, and the resource's `service.name` — plus the
  rejected exports' reasons.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

LOCK = threading.Lock()
SPANS = []
REJECTED = []


def value_of(any_value):
    """An `AnyValue` as a plain Python value."""
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value", "bytes_value"):
        return str(getattr(any_value, which))
    return getattr(any_value, which)


def attributes_of(key_values):
    return {kv.key: value_of(kv.value) for kv in key_values}


def spans_of(request):
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                    "status": trace_pb2.Status.StatusCode.Name(span.status.code),
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": attributes_of(span.attributes),
                    "trace_state": span.trace_state,
                    "service_name": resource.get("service.name"),
                    "scope": scope_spans.scope.name,
                }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # the test reads /spans; a line per export would only be noise

    def reply(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reject(self, why):
        with LOCK:
            REJECTED.append(why)
        self.reply(400, why.encode(), "text/plain")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces":
            return self.reject(f"POST to {self.path}, not /v1/traces")
        content_type = self.headers.get("Content-Type", "")
        if content_type != "application/x-protobuf":
            return self.reject(f"Content-Type {content_type!r}, not application/x-protobuf")
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = trace_service_pb2.ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            return self.reject(f"not an ExportTraceServiceRequest: {e}")
        with LOCK:
            SPANS.extend(spans_of(request))
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.reply(200, answer, "application/x-protobuf")

    def do_GET(self):
        if self.path != "/spans":
            return self.reply(404, b"only /spans", "text/plain")
        with LOCK:
            body = json.dumps({"spans": SPANS, "rejected": REJECTED}).encode()
        self.reply(200, body, "application/json")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
