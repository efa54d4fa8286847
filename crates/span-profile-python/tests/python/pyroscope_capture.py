#!/usr/bin/env python3
"""A loopback stand-in for a Pyroscope server that keeps every request it gets, for benches that
read back what a peer agent pushed (accuracy_bench.py). Each request becomes
<dir>/<n>.json with its path (and query string), content type and body (base64); the answer is
always 200.

    python pyroscope_capture.py PORT DIR
"""
import base64
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port, out):
    os.makedirs(out, exist_ok=True)
    lock = threading.Lock()
    count = [0]

    class Keep(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                count[0] += 1
                n = count[0]
            with open(os.path.join(out, "%06d.json" % n), "w") as f:
                json.dump({"path": self.path, "ctype": self.headers.get("Content-Type"),
                           "body": base64.b64encode(body).decode()}, f)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Keep).serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: pyroscope_capture.py PORT DIR")
    serve(int(sys.argv[1]), sys.argv[2])
