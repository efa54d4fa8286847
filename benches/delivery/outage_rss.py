"""Peak RSS of a profiled process while its receiver is down (issue 27), against the same run
with a receiver that answers 200, alternated.

    python benches/delivery/outage_rss.py [SECONDS] [ROUNDS]

Each arm is a child process that works for SECONDS (default 60) with 1 s windows at 100 Hz,
sending to a local Pyroscope receiver that either accepts and never answers (`down`) or
answers 200 at once (`up`), with no spool directory: the windows wait in the exporter's memory
spool (64 MiB by default), oldest dropped past it. It prints each child's peak RSS
(`ru_maxrss`), its windows made, delivered, waiting and dropped, arms alternated up down up
down.
"""
import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHILD = r"""
import json, resource, sys, threading, time
import span_profile
agent = span_profile.start(service="outage", output=sys.argv[1], sample_rate_hz=100, window_s=1.0)
def work(stop):
    while not stop.is_set():
        sum(i * i for i in range(2000))
stop = threading.Event()
threads = [threading.Thread(target=work, args=(stop,)) for _ in range(4)]
for t in threads: t.start()
time.sleep(float(sys.argv[2]))
stop.set()
for t in threads: t.join()
s = agent.stats()
agent.stop(timeout_s=1.0)
print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "stats": s}))
"""


def hanging():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(256)
    held = []

    def accept():
        while True:
            try:
                held.append(s.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    return s, s.getsockname()[1]


class Ok(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    down_sock, down_port = hanging()
    up = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    print("%-5s %10s %6s %9s %7s %7s" % ("arm", "peak RSS", "made", "delivered", "waiting", "dropped"))
    for _ in range(rounds):
        for arm, port in (("up", up.server_address[1]), ("down", down_port)):
            url = "pyroscope+http://127.0.0.1:%d" % port
            p = subprocess.run([sys.executable, "-c", CHILD, url, str(seconds)], capture_output=True,
                               text=True, timeout=seconds + 120)
            if p.returncode != 0:
                sys.exit(p.stderr)
            out = json.loads(p.stdout.strip().splitlines()[-1])
            s = out["stats"]
            dropped = sum(v for k, v in s.items() if k.startswith("dropped") and k.endswith("windows"))
            print("%-5s %7.1f MB %6d %9d %7d %7d" % (arm, out["maxrss_kb"] / 1024, s["windows"],
                                                   s["exported_windows"], s["waiting_windows"], dropped))
    down_sock.close()
    up.shutdown()


if __name__ == "__main__":
    main()
