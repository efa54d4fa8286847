"""A minimal OTLP/HTTP profiles receiver: http.server plus the opentelemetry-proto classes.

    python otlp_receiver.py OUT.jsonl [REJECT_FIRST [ONLY_WITH_HEADER]]

Prints its port on the first line of stdout, then serves POST /v1development/profiles:
gunzips, decodes and summarizes each request (otlp_check.summarize), appends the summary
as one JSON line to OUT.jsonl, and answers ExportProfilesServiceResponse (with
partial_success.rejected_profiles = REJECT_FIRST on the first request, or on the first
request that carries the header ONLY_WITH_HEADER when it is given). Stops after 60 s.
"""
import gzip
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from otlp_check import summarize  # noqa: E402
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402

OUT = sys.argv[1]
REJECT_FIRST = int(sys.argv[2]) if len(sys.argv) > 2 else 0
ONLY_WITH_HEADER = sys.argv[3] if len(sys.argv) > 3 else None
count = [0]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1development/profiles":
            self.send_response(404)
            self.end_headers()
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        summary = summarize(body)
        summary["headers"] = {k.lower(): v for k, v in self.headers.items()
                              if k.lower() in ("content-type", "content-encoding", "x-tenant")}
        with open(OUT, "a") as f:
            f.write(json.dumps(summary) + "\n")
        resp = svc.ExportProfilesServiceResponse()
        if ONLY_WITH_HEADER is None or self.headers.get(ONLY_WITH_HEADER) is not None:
            if count[0] == 0 and REJECT_FIRST:
                resp.partial_success.rejected_profiles = REJECT_FIRST
                resp.partial_success.error_message = "profile too old"
            count[0] += 1
        data = resp.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
threading.Timer(60, server.shutdown).start()
server.serve_forever()
