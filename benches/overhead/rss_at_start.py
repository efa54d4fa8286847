#!/usr/bin/env python3
"""Resident memory of a threads-only process just after the agent starts: what a service that
does not use asyncio pays for span_profile before any window fills. Imports the OpenTelemetry
SDK, starts the agent (unless --agent none) with a span processor, waits, and prints one JSON
line: VmRSS in MB and whether asyncio and ssl ended up imported.

    python benches/overhead/rss_at_start.py                 # the agent
    python benches/overhead/rss_at_start.py --agent none    # the same process without it

Run the two alternately, several times: the figure is steady to about 0.05 MB here.
"""
import argparse
import json
import sys
import tempfile
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from procfs import rss_mb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", choices=["span_profile", "none"], default="span_profile")
    ap.add_argument("--wait", type=float, default=2.0, help="seconds after the start")
    args = ap.parse_args()
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    agent = None
    with tempfile.TemporaryDirectory() as out:
        if args.agent == "span_profile":
            import span_profile

            agent = span_profile.start(service="rss-at-start", output=out)
            provider.add_span_processor(span_profile.SpanProcessor())
        time.sleep(args.wait)
        print(json.dumps({"agent": args.agent, "rss_mb": round(rss_mb(), 2),
                          "asyncio": "asyncio" in sys.modules, "ssl": "ssl" in sys.modules}))
        if agent is not None:
            agent.stop()


if __name__ == "__main__":
    main()
