#!/usr/bin/env python3
"""What the agent adds to a thread's start and end: the process CPU (time.process_time(), so the
new thread's own run of our `_bootstrap_inner` counts) of `Thread(target=f).start(); join()`,
2,000 times a round, 7 rounds, with no agent and with one running (sampler at 1 Hz, so that the
hooks are what is measured). Arms alternate in fresh interpreters, A B A B.

    python benches/overhead/thread_hook.py --python target/venvs/bench-3.12/bin/python --pairs 3
"""
import argparse
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, threading, time
if sys.argv[1] == "agent":
    import span_profile
    span_profile.start(service="thread-hook", output=sys.argv[2], sample_rate_hz=1, window_s=600,
                       overhead_budget=0)
def f():
    pass
rounds = []
for _ in range(7):
    t0 = time.process_time()
    for _ in range(2000):
        t = threading.Thread(target=f)
        t.start()
        t.join()
    rounds.append((time.process_time() - t0) / 2000 * 1e6)
rounds.sort()
print("%.1f %.1f" % (rounds[3], rounds[0]))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out:
        for p in range(args.pairs):
            for arm in ("none", "agent"):
                median, low = subprocess.run([args.python, "-c", CHILD, arm, out], capture_output=True,
                                             text=True, check=True).stdout.split()
                print("pair %d %-5s µs of process CPU a thread start and join: median %s, min %s"
                      % (p, arm, median, low), flush=True)


if __name__ == "__main__":
    main()
