"""Issue 27, points 1-3: with SPAN_PROFILE_SPOOL_DIR set, a receiver that accepts and never
answers costs no window. A child process makes windows against it and exits through stop():
stop() keeps its timeout, says how many windows wait and where, and stats() accounts for every
window. A later process with a working receiver delivers every waiting window once, in order
(the receiver sees each window's start in Pyroscope's ingest query). The URL's password is in
no output and no spooled file."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SECRET = "hunter2-issue27"

CHILD = r"""
import json, sys, time, warnings
import span_profile
warnings.simplefilter("always")
agent = span_profile.start(service="spooled", output=sys.argv[1], sample_rate_hz=200, window_s=1.0)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    sum(i * i for i in range(1000))
t0 = time.monotonic()
with warnings.catch_warnings(record=True) as caught:
    agent.stop(timeout_s=1.0)
took = time.monotonic() - t0
print(json.dumps({"took": took, "stats": agent.stats(), "warnings": [str(w.message) for w in caught],
                  "repr": repr(agent), "output": agent.output}))
"""

WINDOW_KEYS = ("exported_windows", "waiting_windows", "dropped_windows", "dropped_spool_full_windows",
               "dropped_expired_windows", "dropped_rejected_windows", "dropped_at_shutdown_windows")


def hanging_receiver():
    """Accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []

    def accept():
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            held.append(conn)
    threading.Thread(target=accept, daemon=True).start()
    return s


def working_receiver():
    """Answers 200 and notes (from, name) of every ingest request."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            q = parse_qs(urlparse(self.path).query)
            self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append((int(q["from"][0]), q["name"][0].split("{")[0]))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def child(url, seconds, spool):
    env = dict(os.environ, SPAN_PROFILE_SPOOL_DIR=str(spool), PYROSCOPE_PROTOCOL="ingest")
    p = subprocess.run([sys.executable, "-c", CHILD, url, str(seconds)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert SECRET not in p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def spooled_bytes(spool):
    out = b""
    for root, _, names in os.walk(spool):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out += f.read()
    return out


def test_a_hanging_receiver_costs_no_window_and_the_next_start_delivers_them_once_in_order(tmp_path):
    spool = tmp_path / "spool"
    hang = hanging_receiver()
    url = "pyroscope+http://user:%s@127.0.0.1:%d" % (SECRET, hang.getsockname()[1])
    first = child(url, 4.5, spool)
    s = first["stats"]
    assert sum(s[k] for k in WINDOW_KEYS) == s["windows"], s
    assert first["took"] < 1.3, first
    # Nothing was lost: every window with samples waits on disk (a first, partial window may
    # have had nothing to send, which counts as delivered).
    assert s["exported_windows"] <= 1 and s["waiting_windows"] == s["windows"] - s["exported_windows"], s
    assert s["waiting_windows"] >= 4, s
    (said,) = first["warnings"]
    assert "%d of %d window(s) were not delivered" % (s["waiting_windows"], s["windows"]) in said, said
    assert str(spool) in said and "SPAN_PROFILE_SPOOL_DIR" in said, said
    assert "user:***@" in first["repr"] and "user:***@" in first["output"], first
    assert SECRET.encode() not in spooled_bytes(spool)

    server, seen = working_receiver()
    good = "pyroscope+http://user:%s@127.0.0.1:%d" % (SECRET, server.server_address[1])
    split = time.time()
    time.sleep(1.1)  # the second process's windows start in a later second
    second = child(good, 0.5, spool)
    assert sum(second["stats"][k] for k in WINDOW_KEYS) == second["stats"]["windows"], second
    hang.close()
    server.shutdown()
    # The first process's windows came first, in order, once each (one request per profile
    # type and window); then the second process's own.
    starts = [f for f, _ in seen]
    assert len(seen) == len(set(seen)), seen
    assert starts == sorted(starts), seen
    # 1 s windows: each window's start second is its own. The second process's windows start
    # after the first's ended.
    firsts = [f for f in starts if f <= split]
    assert len(firsts) == len(set(firsts)) * len({n for _, n in seen}), seen
    assert len(set(firsts)) == s["waiting_windows"], (seen, s)
    assert starts[:len(firsts)] == firsts, "the earlier process's windows go first"
    assert second["stats"]["exported_windows"] >= 1, second
