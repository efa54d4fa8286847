#!/usr/bin/env python3
"""Instructions a request of a whole service, under callgrind: what hook_instructions.py counts
in one thread, counted in a real server (fixed_load_service.py's threads, asyncio or FastAPI
service), all its threads together, so that what differs between services shows.

For each --arms arm (fixed_load_service.py's --agent, with `span_profile-hooks` for the agent at
1 Hz with its processor): start the service under `valgrind --tool=callgrind`, send --warmup
requests, zero the counters (`callgrind_control -z`), send --requests requests one after another,
dump (`callgrind_control -d`) and stop it. Prints, a request: the whole process's instructions
and those in span_profile's extension (the exclusive counts of its functions, from
`callgrind_annotate`). Arms run one after another; PYTHONHASHSEED is fixed.

    python benches/overhead/service_instructions.py --python <venv>/bin/python --bench ../shared/bench \\
        --service fastapi --arms none span_profile-hooks --requests 200

The whole process's count moves between runs by more than the hooks add (the event loop and the
collector run when the timing lets them): compare the extension's counts, and the whole
process's only for differences far larger than that.

Needs valgrind (`apt-get install valgrind`).
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import urllib.request

from fixed_load import SPAN_PROFILE_RATE, service_agent

HERE = os.path.dirname(os.path.abspath(__file__))
OUR_EXTENSION = "span_profile/_native"


def get(port, i):
    url = "http://127.0.0.1:%d/checkout/%s?i=%d" % (port, "ab"[i % 2], i)
    with urllib.request.urlopen(url, timeout=300) as r:
        r.read()


def run_arm(args, arm, out):
    """(whole process, our extension) instructions a request of one arm."""
    # The service's agent and rate as fixed_load.py runs the arm (the hooks arm: the agent at
    # 1 Hz with its processor), without the caller's own settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPAN_PROFILE_", "DD_"))}
    env.update(SPAN_PROFILE_WINDOW_S="600", PYTHONHASHSEED="0")
    if arm in SPAN_PROFILE_RATE:
        env["SPAN_PROFILE_OVERHEAD_BUDGET"] = "0"
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "--dump-line=no",
           args.python, os.path.join(HERE, "fixed_load_service.py"), "--service", args.service,
           "--agent", service_agent(arm), "--rate", str(SPAN_PROFILE_RATE.get(arm, 100)),
           "--bench", args.bench]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = p.stdout.readline().split()
        if len(line) != 2 or line[0] != "READY":
            sys.exit("%s: the service did not start under valgrind (is valgrind installed?)" % arm)
        port = int(line[1])
        for i in range(args.warmup):
            get(port, i)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(args.requests):
            get(port, 100000 + i)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        p.terminate()
        p.wait()
    # The dump asked for is the first numbered file; the one written at exit is `out` itself.
    dumps = sorted(f for f in glob.glob(out + ".*") if f.rsplit(".", 1)[1].isdigit())
    if not dumps:
        sys.exit("%s: callgrind wrote no dump; is callgrind_control on the PATH?" % arm)
    total = None
    with open(dumps[0]) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    if total is None:
        sys.exit("%s: no instruction total in %s" % (arm, dumps[0]))
    ours = 0
    annotated = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", dumps[0]], check=True,
                               capture_output=True, text=True).stdout
    for line in annotated.splitlines():
        # A function's line: its count, its share, then `file:function [object]`.
        count = line.split()[0].replace(",", "") if line.strip() else ""
        if count.isdigit() and OUR_EXTENSION in line.rsplit("[", 1)[-1]:
            ours += int(count)
    return total / args.requests, ours / args.requests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--bench", required=True, help="the directory of workload.py (../shared/bench)")
    ap.add_argument("--service", choices=["threads", "asyncio", "fastapi"], required=True)
    ap.add_argument("--arms", nargs="+", default=["none", "span_profile-hooks"],
                    choices=["none", "span_profile-hooks", "span_profile-full", "span_profile-noagent",
                             "span_profile-nohooks", "sdk-noop"])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    args = ap.parse_args()
    args.bench = os.path.abspath(args.bench)
    with tempfile.TemporaryDirectory(prefix="service-instructions-") as d:
        for arm in args.arms:
            total, ours = run_arm(args, arm, os.path.join(d, arm + ".out"))
            print("%s %s: %.0f instructions a request, %.0f of them in span_profile's extension"
                  % (args.service, arm, total, ours), flush=True)


if __name__ == "__main__":
    main()
