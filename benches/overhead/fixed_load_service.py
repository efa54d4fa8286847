#!/usr/bin/env python3
"""The service side of the fixed-load benchmark (fixed_load.py starts it; it is not run by hand).

Serves `GET /checkout/{a,b}?i=N` with the checkout of ../shared/bench/workload.py (a SERVER span
`request` with six child spans; --work 4 makes it about 3 ms of CPU), on one of three servers:

  threads  http.server.ThreadingHTTPServer (a thread per connection, HTTP/1.1 keep-alive)
  asyncio  asyncio.start_server with a minimal HTTP/1.1 parser, the checkout's async variant
  fastapi  a FastAPI app on uvicorn (a sync endpoint, so it runs in Starlette's thread pool)

under one profiler arm (--agent), started in this process before the server:

  none               no profiler
  span_profile       this agent, 100 Hz, its default CPU budget, with its SpanProcessor
  span_profile-full  the same with the budget off (SPAN_PROFILE_OVERHEAD_BUDGET=0 set by the caller)
  pyroscope          pyroscope-io + pyroscope-otel's PyroscopeSpanProcessor, sending to --sink
  ddtrace            `import ddtrace.auto` with DD_TRACE_OTEL_ENABLED and DD_PROFILING_ENABLED set by
                     the caller: the spans go through ddtrace's OpenTelemetry bridge
  ddtrace-100hz      the same, the caller setting its stack sampler to a fixed 100 Hz
  (py-spy runs out of process around `--agent none`)

and three that take this agent's cost apart:

  sdk-noop              the SDK's own SpanProcessor base class, which does nothing: what having
                        any span processor costs the SDK's span start and end
  span_profile-noagent  this agent's SpanProcessor with no agent started: its hooks' calls alone
  span_profile-nohooks  this agent started (at --rate, budget off) with no SpanProcessor: its
                        threads and its thread hook, no span hooks

`GET /stats` answers with the process's pid and, for this agent, span_profile.stats(). When the
server listens it prints `READY <port>` on stdout.
"""
import argparse
import os
import sys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--service", choices=["threads", "asyncio", "fastapi"], required=True)
    ap.add_argument("--agent", default="none",
                    choices=["none", "span_profile", "span_profile-full", "pyroscope", "ddtrace", "ddtrace-100hz",
                             "sdk-noop", "span_profile-noagent", "span_profile-nohooks"])
    ap.add_argument("--bench", required=True, help="the directory of workload.py")
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--sink", default="http://127.0.0.1:4040")
    ap.add_argument("--idle-threads", type=int, default=0,
                    help="threads parked 12 frames deep for the whole run (workload.py's idle64 has 64)")
    ap.add_argument("--work", type=int, default=4, help="the date parsing's size, times workload.py's")
    return ap.parse_args()


ARGS = parse_args()
if ARGS.agent.startswith("ddtrace"):
    import ddtrace.auto  # noqa: F401  (first, as ddtrace's docs ask)

import asyncio  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from opentelemetry import trace  # noqa: E402

sys.path.insert(0, ARGS.bench)
import workload  # noqa: E402

import checkout  # noqa: E402  (this directory's)

STATS = None


def start_agent():
    """The tracer the checkout uses, with the arm's profiler started."""
    global STATS
    if ARGS.agent.startswith("ddtrace"):
        return trace.get_tracer("bench")  # ddtrace's provider (DD_TRACE_OTEL_ENABLED)
    from opentelemetry.sdk.trace import TracerProvider
    provider = TracerProvider()
    if ARGS.agent == "sdk-noop":
        from opentelemetry.sdk.trace import SpanProcessor
        provider.add_span_processor(SpanProcessor())
    elif ARGS.agent == "span_profile-noagent":
        import span_profile
        provider.add_span_processor(span_profile.SpanProcessor())
    elif ARGS.agent.startswith("span_profile"):
        import span_profile
        if ARGS.agent != "span_profile-nohooks":
            provider.add_span_processor(span_profile.SpanProcessor())
        span_profile.start(service="bench", output=tempfile.mkdtemp(prefix="fixed-load-"),
                           sample_rate_hz=ARGS.rate)
        STATS = span_profile.stats
    elif ARGS.agent == "pyroscope":
        import pyroscope
        from pyroscope.otel import PyroscopeSpanProcessor
        provider.add_span_processor(PyroscopeSpanProcessor())
        pyroscope.configure(application_name="bench", server_address=ARGS.sink, sample_rate=int(ARGS.rate))
    return provider.get_tracer("bench")


class Checkout(workload.Checkout):
    """workload.py's checkout, its spans and stages, with --work times the date parsing (the hot
    spot): 4 makes a request about 3 ms of CPU on the benchmarks machine, where workload.py's own
    is about 1 ms."""

    def handle(self, i):
        return checkout.handle(self.t, workload, i, ARGS.work)

    async def handle_async(self, i):
        with self.t.start_as_current_span("request", kind=trace.SpanKind.SERVER,
                                          attributes={"http.route": "/checkout/" + "ab"[i % 2]}):
            with self.t.start_as_current_span("auth.check"):
                workload.auth_check(i)
            await asyncio.sleep(0)
            with self.t.start_as_current_span("pricing.calculate"):
                with self.t.start_as_current_span("parse_dates"):
                    ts = workload.parse_dates(150 * ARGS.work, i)
                await asyncio.sleep(0)
                with self.t.start_as_current_span("apply_discount"):
                    total = workload.apply_discount(i, 40)
                await asyncio.sleep(0)
                with self.t.start_as_current_span("decimal.quantize"):
                    price = total.quantize(workload.CENT, rounding=workload.ROUND_HALF_UP)
            await asyncio.sleep(0)
            with self.t.start_as_current_span("render.json"):
                return workload.render(i, price, ts)


SVC = Checkout(start_agent())
_IDLE = __import__("threading").Event()
for _k in range(ARGS.idle_threads):
    __import__("threading").Thread(target=workload.parked, args=(_IDLE, 12), name="idle-%d" % _k,
                                   daemon=True).start()
for _i in range(50):  # warm-up, as workload.py does
    SVC.handle(_i)
# The cyclic collector's first full collection, over everything the imports made (13-36 ms in
# the FastAPI service), happens once, early in a process's life, at a moment set by how much each
# arm allocated at start-up: inside one run's measured load and before another's, it was a
# run's p99.9 (docs/benchmarks.md, "The table in turn"). Done here, before the service listens,
# in every arm alike; later full collections are the requests' own.
gc.collect()


def stats_body():
    # The process's CPU (all its threads, exited ones included) to the nanosecond: the same sum
    # as /proc/<pid>/stat's utime + stime, which counts in 10 ms clock ticks.
    d = {"pid": os.getpid(), "cpu_ns": time.process_time_ns(),
         "gc_full": gc.get_stats()[2]["collections"]}  # the cyclic collector's full collections
    if STATS is not None:
        s = STATS() or {}
        d["agent"] = {k: v for k, v in s.items() if isinstance(v, (int, float))}
    return json.dumps(d).encode()


def request_index(path):
    """(kind ok, i) of `/checkout/{a,b}?i=N`; None for any other path."""
    route, _, query = path.partition("?")
    if not route.startswith("/checkout/"):
        return None
    i = 0
    for kv in query.split("&"):
        k, _, v = kv.partition("=")
        if k == "i" and v.isdigit():
            i = int(v)
    return i


def ready(port):
    print("READY %d" % port, flush=True)


def serve_threads():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY on each connection, as production servers set it. The headers and the body
        # go out in two writes; with Nagle's algorithm on, the body waited for the ACK of the
        # headers, which the client delays by 40 ms: every request on a kept-alive connection
        # took 40 ms more (a p50 of 45 ms for 3 ms of work, in every arm).
        disable_nagle_algorithm = True

        def do_GET(self):
            if self.path == "/stats":
                body = stats_body()
            else:
                i = request_index(self.path)
                if i is None:
                    self.send_error(404)
                    return
                body = SVC.handle(i).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer.daemon_threads = True
    # socketserver's listen backlog is 5: when the client opens connections in a burst the kernel
    # drops the SYNs past it (TcpExtListenOverflows) and the client's connect waits out the 1 s
    # retransmit, a stall of the load generator in both arms. uvicorn listens with 2,048 and
    # asyncio.start_server with 100.
    ThreadingHTTPServer.request_queue_size = 128
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ready(srv.server_address[1])
    srv.serve_forever()


def serve_asyncio():
    async def conn(reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                parts = line.decode("latin-1").split()
                path = parts[1] if len(parts) > 1 else "/"
                if path == "/stats":
                    body, status = stats_body(), b"200 OK"
                else:
                    i = request_index(path)
                    if i is None:
                        body, status = b"", b"404 Not Found"
                    else:
                        body, status = (await SVC.handle_async(i)).encode(), b"200 OK"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def main():
        srv = await asyncio.start_server(conn, "127.0.0.1", 0, backlog=1024)
        ready(srv.sockets[0].getsockname()[1])
        await srv.serve_forever()

    asyncio.run(main())


def serve_fastapi():
    import socket

    import uvicorn
    from fastapi import FastAPI, Response

    app = FastAPI()

    @app.get("/checkout/{kind}")
    def checkout(kind: str, i: int = 0):
        return Response(content=SVC.handle(i), media_type="application/json")

    @app.get("/stats")
    def stats():
        return Response(content=stats_body(), media_type="application/json")

    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on connections of a socket whose proto
    # is TCP, and `socket.socket()` leaves it 0. Without it the body of each response waited
    # 40 ms for the client's delayed ACK of its headers (Nagle's algorithm), as for the threads
    # server. uvicorn's own --host/--port binding gets TCP_NODELAY.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=1024)
    server = uvicorn.Server(config)

    async def main():
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        ready(sock.getsockname()[1])
        await task

    asyncio.run(main())


{"threads": serve_threads, "asyncio": serve_asyncio, "fastapi": serve_fastapi}[ARGS.service]()
