"""Runs the real pyroscope-io client for a moment against a server, then shuts it down (which
flushes its profile).

    python pyroscope_client.py http://127.0.0.1:PORT SECONDS
"""
import sys
import time

import pyroscope

pyroscope.configure(
    application_name="conformance",
    server_address=sys.argv[1],
    sample_rate=100,
    tags={"region": "eu-west-1"},
    tenant_id="team-a",
    basic_auth_username="user",
    basic_auth_password="pass",
)


def work():
    x = 0
    for i in range(100000):
        x += i * i
    return x


end = time.time() + float(sys.argv[2])
while time.time() < end:
    work()
pyroscope.shutdown()
