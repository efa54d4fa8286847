"""One service of `fixed_load_service.py` under `fixed_load_client.py`'s load, for the scripts
that look inside a service while it serves (`sampler_work.py`, `idle_intervals.py`)."""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


@contextlib.contextmanager
def service_at_load(python, bench, service, agent, rps, seconds, env=None):
    """Starts the service with `agent` and a client sending `rps` requests a second for
    `seconds`; yields `(pid, port)` and, on leaving, waits for the client and stops the
    service. Exits with a message if the service does not start."""
    svc = subprocess.Popen([python, os.path.join(HERE, "fixed_load_service.py"), "--service", service,
                            "--agent", agent, "--bench", bench, "--rate", "100"],
                           stdout=subprocess.PIPE, text=True, env=env)
    client = None
    try:
        line = svc.stdout.readline()
        if not line.startswith("READY"):
            sys.exit("the service did not start: %r" % line)
        port = int(line.split()[1])
        with urllib.request.urlopen("http://127.0.0.1:%d/stats" % port) as r:
            pid = json.load(r)["pid"]
        client = subprocess.Popen([python, os.path.join(HERE, "fixed_load_client.py"), "--port", str(port),
                                   "--rate", str(rps), "--duration", str(seconds)],
                                  stdout=subprocess.DEVNULL)
        yield pid, port
    finally:
        if client is not None:
            client.wait()
        svc.terminate()
        svc.wait()


def agent_stats(port):
    """The agent's counters the service reports at /stats (empty with no agent)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/stats" % port) as r:
        return json.load(r).get("agent") or {}


def load_arguments(doc, warmup):
    """The parser of a script built on `service_at_load`, with its common options: --python,
    --bench, --service, --rps, --warmup (default `warmup`), --seconds and --json."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the service's interpreter (with span_profile, for a script that starts the agent)")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "..", "..", "shared", "bench"))
    ap.add_argument("--service", choices=["threads", "asyncio", "fastapi"], default="threads")
    ap.add_argument("--rps", type=float, required=True)
    ap.add_argument("--warmup", type=float, default=warmup)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    return ap
