#!/usr/bin/env python3
"""The seed scenario: a small checkout service whose `pricing.calculate` span is slow because of
date parsing, profiled with span_profile.

Every request runs under a SERVER span whose `http.route` is the route template:

    POST /checkout                 (http.route=/checkout)
      cart.load
      pricing.calculate            slow: parse_date() runs datetime.strptime on every line item
        (parse_date, apply_discount)
      payment.charge
    GET /orders/{id}               (http.route=/orders/{id})
      order.lookup

Worker threads handle simulated requests for --seconds; span_profile writes one pprof file per
--window-s window to OUTPUT (argv, else $SPAN_PROFILE_OUTPUT, else ./profiles) and stops at the
end. Then ask which lines made the slowest pricing.calculate slow:

    cargo run -q -p span-profile-cli -- top ./profiles --slowest pricing.calculate

Needs: pip install opentelemetry-sdk, and the span_profile package (scripts/demo.sh does both).
"""
import argparse
import hashlib
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind

import span_profile

CENT = Decimal("0.01")
CATALOG = {"sku-%03d" % i: Decimal("%d.%02d" % (3 + i % 70, (i * 37) % 100)) for i in range(200)}


def parse_date(s):
    """The hot spot: strptime is slow, and every line item carries dates as strings."""
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")


def apply_discount(items, promo_dates):
    """Promotions apply to items added while a promotion ran."""
    total = Decimal(0)
    for sku, qty, added in items:
        price = CATALOG[sku] * qty
        when = parse_date(added)
        for start, end in promo_dates:
            if start <= when <= end:
                price *= Decimal("0.9")
                break
        total += price
    return total.quantize(CENT, rounding=ROUND_HALF_UP)


def load_cart(rng, size):
    items = []
    for _ in range(size):
        day = rng.randrange(1, 28)
        items.append((rng.choice(list(CATALOG)), rng.randrange(1, 4),
                      "2024-%02d-%02dT%02d:%02d:00" % (rng.randrange(1, 13), day, rng.randrange(24), rng.randrange(60))))
    return items


def calculate_price(items):
    promos = [(parse_date("2024-%02d-01T00:00:00" % m), parse_date("2024-%02d-10T23:59:59" % m)) for m in range(1, 13)]
    history = [parse_date(added) for _, _, added in items]  # "recently viewed" pricing rules
    return apply_discount(items, promos), len(history)


def charge(amount, order_id):
    digest = hashlib.sha256(("%s:%s" % (order_id, amount)).encode())
    for _ in range(200):
        digest = hashlib.sha256(digest.digest())
    time.sleep(0.002)  # the payment provider's round trip
    return digest.hexdigest()[:12]


class Checkout:
    def __init__(self, tracer):
        self.tracer = tracer

    def checkout(self, rng, order_id):
        size = 400 if order_id % 25 == 0 else rng.randrange(5, 40)  # a few huge carts
        with self.tracer.start_as_current_span("POST /checkout", kind=SpanKind.SERVER,
                                               attributes={"http.route": "/checkout"}):
            with self.tracer.start_as_current_span("cart.load"):
                items = load_cart(rng, size)
            with self.tracer.start_as_current_span("pricing.calculate") as span:
                total, _ = calculate_price(items)
                span.set_attribute("cart.items", size)
            with self.tracer.start_as_current_span("payment.charge"):
                charge(total, order_id)

    def order(self, rng, order_id):
        with self.tracer.start_as_current_span("GET /orders/{id}", kind=SpanKind.SERVER,
                                               attributes={"http.route": "/orders/{id}"}):
            with self.tracer.start_as_current_span("order.lookup"):
                rows = sorted((rng.random(), i) for i in range(2000))
                return rows[order_id % len(rows)]


class SlowestPricing(SpanProcessor):
    """Remembers the slowest pricing.calculate span, to print at the end."""

    def __init__(self):
        self.slowest = (0, None)
        self.lock = threading.Lock()

    def on_end(self, span):
        if span.name == "pricing.calculate":
            d = span.end_time - span.start_time
            with self.lock:
                if d > self.slowest[0]:
                    self.slowest = (d, format(span.context.span_id, "016x"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", nargs="?", default=os.environ.get("SPAN_PROFILE_OUTPUT", "./profiles"))
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=100, help="samples per second per thread")
    ap.add_argument("--overhead-budget", type=float, default=None,
                    help="sampler CPU as a share of one core (default 0.01; 0 = no cap)")
    args = ap.parse_args()

    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    slowest = SlowestPricing()
    provider.add_span_processor(slowest)
    trace.set_tracer_provider(provider)
    agent = span_profile.start(service=os.environ.get("OTEL_SERVICE_NAME", "checkout"), output=args.output,
                               sample_rate_hz=args.rate, window_s=args.window_s, overhead_budget=args.overhead_budget)
    service = Checkout(trace.get_tracer("checkout"))

    deadline = time.monotonic() + args.seconds
    counts = [0] * args.workers

    def worker(w):
        rng = random.Random(w)
        order_id = w
        while time.monotonic() < deadline:
            if order_id % 3 == 2:
                service.order(rng, order_id)
            else:
                service.checkout(rng, order_id)
            counts[w] += 1
            order_id += args.workers

    with ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="http-worker") as pool:
        list(pool.map(worker, range(args.workers)))
    agent.stop()

    stats = span_profile.stats()
    d, span_id = slowest.slowest
    print("handled %d requests in %.0f s; %d samples (%d ticks, sampler CPU %.1f%% of a core) in %d windows "
          "written to %s" % (sum(counts), args.seconds, stats["samples"], stats["ticks"],
                             100 * stats["sampler_cpu_ns"] / 1e9 / args.seconds, stats["exported_windows"], args.output))
    if span_id:
        print("slowest pricing.calculate: span %s, %.1f ms" % (span_id, d / 1e6))


if __name__ == "__main__":
    main()
