"""What the overhead scripts read from /proc about their own process. Imports nothing of
span_profile, so a no-agent arm that uses it loads no part of the agent."""


def rss_mb():
    """This process's resident memory now (VmRSS), in MB; 0.0 where /proc has no such line."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0
