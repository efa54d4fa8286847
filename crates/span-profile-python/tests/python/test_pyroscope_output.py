"""output="pyroscope+http://…" from Python: the agent pushes its windows to a Pyroscope-shaped
capture server (a plain HTTP server in this process). Decoded by hand from push.proto's field
numbers (an independent decoder: no code shared with the exporter), the requests are Connect
pushes with the series labels Pyroscope needs and, per sample, the local root's span_id (the
value of the root span's `pyroscope.profile.id`, Grafana's join key), the trace id and the
route."""
import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import span_profile
from conftest import RATE_HZ, busy, hex16
from pprof_reader import _fields, parse_profile


def pyroscope_pushed_work():
    return busy(0.6)


class Capture(BaseHTTPRequestHandler):
    requests = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Capture.requests.append((self.path, dict((k.lower(), v) for k, v in self.headers.items()), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def decode_push(body):
    """[(labels dict, [bare pprof bytes])] of a PushRequest."""
    out = []
    for field, _, series in _fields(body):
        assert field == 1, "PushRequest has only `series`"
        labels, profiles = {}, []
        for f2, _, v2 in _fields(series):
            if f2 == 1:
                pair = dict((f3, v3) for f3, _, v3 in _fields(v2))
                labels[pair.get(1, b"").decode()] = pair.get(2, b"").decode()
            elif f2 == 2:
                raw = dict((f3, v3) for f3, _, v3 in _fields(v2))
                assert len(raw.get(2, b"")) == 36, "a uuid per profile"
                profiles.append(raw[1])
        out.append((labels, profiles))
    return out


def test_python_agent_pushes_span_labelled_windows_to_pyroscope(tracer):
    Capture.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        agent = span_profile.start(service="tests", output="pyroscope+http://127.0.0.1:%d" % server.server_port,
                                   sample_rate_hz=RATE_HZ, window_s=1, overhead_budget=0)
        with tracer.start_as_current_span("GET /orders/{id}", attributes={"http.route": "/orders/{id}"}) as root:
            with tracer.start_as_current_span("order.lookup") as inner:
                pyroscope_pushed_work()
        agent.stop()  # flushes: the last window is sent before stop() returns
    finally:
        server.shutdown()

    assert Capture.requests, "nothing was pushed"
    samples = []
    for path, headers, body in Capture.requests:
        assert path == "/push.v1.PusherService/Push"
        assert headers["content-type"] == "application/proto"
        assert headers["content-encoding"] == "gzip"
        for labels, profiles in decode_push(gzip.decompress(body)):
            assert labels["__name__"] == "process_cpu"
            assert labels["service_name"] == "tests"
            assert len(labels) <= 30
            for raw in profiles:
                p = parse_profile(raw)
                assert ("cpu" in p.sample_types), p.sample_types
                samples.extend(p.samples)

    root_id = hex16(root.context.span_id)
    assert root.attributes["pyroscope.profile.id"] == root_id
    # Pyroscope keeps the samples under the local root: a link from the inner span would find
    # nothing, so it carries none.
    assert "pyroscope.profile.id" not in inner.attributes
    ours = [s for s in samples if "pyroscope_pushed_work" in s.functions]
    assert sum(s.count for s in ours) > 20, ours[:3]
    for s in ours:
        # Only these stay per-sample in Pyroscope; anything else would become a series label.
        assert set(s.labels) <= {"span_id", "trace_id", "route"}, s.labels
        assert s.labels["span_id"] == root_id, "the local root, not the inner span"
        assert s.labels["trace_id"] == format(root.context.trace_id, "032x")
        assert s.labels["route"] == "/orders/{id}"
