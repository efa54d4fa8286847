#!/usr/bin/env python3
"""The open-loop load generator of the fixed-load benchmark: a process of its own, so its CPU is
not the service's.

Requests arrive on a schedule set by the clock, not by the service: arrival k is due at
t0 + k / rate (--arrivals fixed) or after exponential gaps of mean 1 / rate (--arrivals poisson,
seeded). Each arrival is sent on an idle keep-alive connection (a new one when none is idle), so a
slow response never holds back later arrivals; its latency runs from its *scheduled* arrival to
the end of its response, so queueing in the sender or the service is counted, not hidden
(no coordinated omission). A connection the server has closed (uvicorn closes one idle for 5 s)
is not reused, and a request that meets one closing as it goes out is sent again, once, on a new
connection, as HTTP clients do (counted in `retried`; without this, 6 requests of 2,287 failed in
a 20 s run at 114 requests a second to the FastAPI service, each on a connection uvicorn had
closed).

    python fixed_load_client.py --port 8000 --rate 50 --duration 10

Prints one JSON line: sent, completed, errors, retried, seconds, the latency percentiles in ms
(p50, p99, p99.9, max) and the largest lag of a send behind its schedule (the generator's own
lateness).
"""
import argparse
import asyncio
import json
import random
import time


def percentile(sorted_v, q):
    if not sorted_v:
        return None
    k = min(len(sorted_v) - 1, max(0, int(round(q * (len(sorted_v) - 1)))))
    return sorted_v[k]


async def run(args):
    idle = []
    lat, errors, lag = [], [0], [0.0]
    opened, retried = [0], [0]

    async def connection():
        """An idle keep-alive connection, or a new one. An idle one the server has closed (uvicorn
        closes a connection idle for 5 s) is dropped, not reused."""
        while idle:
            r, w = idle.pop()
            if not r.at_eof() and not w.is_closing():
                return r, w, True
            w.close()
        opened[0] += 1
        r, w = await asyncio.open_connection(args.host, args.port)
        return r, w, False

    async def exchange(r, w, i):
        """Sends request i and reads its response: (status line, body). The status line is
        empty if the server closed the connection before answering."""
        w.write(b"GET /checkout/%s?i=%d HTTP/1.1\r\nHost: bench\r\n\r\n" % (b"ab"[i % 2:i % 2 + 1], i))
        await w.drain()
        status = await r.readline()
        if not status:
            return status, b""
        try:
            length = 0
            while True:
                h = await r.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            return status, await r.readexactly(length)
        except (ConnectionResetError, BrokenPipeError) as e:
            # The response had begun: an error, not the closed idle connection retried below.
            raise ValueError("the response broke off: %r" % e) from e

    async def one(i, due):
        try:
            r, w, reused = await connection()
            lag[0] = max(lag[0], time.perf_counter() - due)
            try:
                status, _ = await exchange(r, w, i)
            except (ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
                status = b""
            if not status and reused:
                # The server closed the reused connection as the request went out (RFC 9112
                # 9.3.1: a client may retry an idempotent request then): once, on a new one, and
                # its latency still runs from the scheduled arrival.
                w.close()
                retried[0] += 1
                opened[0] += 1
                r, w = await asyncio.open_connection(args.host, args.port)
                status, _ = await exchange(r, w, i)
            if not status.startswith(b"HTTP/1.1 200"):
                errors[0] += 1
                w.close()
                return
            lat.append(time.perf_counter() - due)
            idle.append((r, w))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors[0] += 1

    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    end = t0 + args.duration
    tasks, due, i = [], t0, 0
    while due < end:
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        tasks.append(asyncio.ensure_future(one(args.first + i, due)))
        i += 1
        due += rng.expovariate(args.rate) if args.arrivals == "poisson" else 1.0 / args.rate
    await asyncio.wait(tasks, timeout=args.drain) if tasks else None
    unfinished = sum(1 for t in tasks if not t.done())
    for t in tasks:
        t.cancel()
    elapsed = time.perf_counter() - t0
    for _, w in idle:
        w.close()
    lat.sort()
    ms = lambda v: None if v is None else round(1000 * v, 3)  # noqa: E731
    return {
        "sent": i, "completed": len(lat), "errors": errors[0], "unfinished": unfinished,
        "seconds": round(elapsed, 3), "rate": args.rate, "arrivals": args.arrivals,
        "connections": opened[0], "retried": retried[0],
        "p50_ms": ms(percentile(lat, 0.5)), "p99_ms": ms(percentile(lat, 0.99)),
        "p999_ms": ms(percentile(lat, 0.999)), "max_ms": ms(lat[-1] if lat else None),
        "send_lag_ms": ms(lag[0]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True, help="arrivals per second")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--arrivals", choices=["fixed", "poisson"], default="poisson")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="the first request's index i")
    ap.add_argument("--drain", type=float, default=10.0, help="seconds to wait for the last responses")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
