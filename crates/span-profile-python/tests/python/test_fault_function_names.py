"""Fault: function names that are huge or not valid UTF-8. Python allows both: a code object's
name can be megabytes long, and a str can hold lone surrogates, which have no UTF-8 encoding.
The walker copies at most 1024 characters of a name (the rest is cut and marked with "…"),
replaces what is not a character with U+FFFD, and the pprof files stay valid UTF-8: no crash,
no walk error, and the thread's samples are kept."""
import threading

import span_profile
from conftest import busy
from pprof_reader import all_samples

MAX_CHARS = 1024  # WalkerConfig::default().max_string_chars


def renamed(name):
    """A function that burns CPU, whose code object is called `name`."""
    def f(seconds):
        return busy(seconds)

    code = f.__code__.replace(co_name=name)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    f.__code__ = code
    return f


NAMES = {
    "one_mib": "m" * (1 << 20),
    "two_mib": "M" * (2 << 20),
    "surrogates": "lone_\udc80_\ud800_surrogates",
    "astral_nul": "astral_\U0001f600_\x00_nul",
}


def test_huge_and_invalid_names_are_cut_and_replaced(agent):
    threads = []
    for key, name in NAMES.items():
        t = threading.Thread(target=renamed(name), args=(0.6,), name="names-" + key)
        threads.append(t)
        t.start()
    for t in threads:
        t.join()
    stats = span_profile.stats()
    agent.stop()

    samples = all_samples(agent.output)  # decodes every string as UTF-8: fails if one is not
    by_thread = {}
    for s in samples:
        by_thread.setdefault(s.labels.get("thread_name"), []).append(s)
    for key, name in NAMES.items():
        mine = by_thread.get("names-" + key)
        assert mine, "no samples of the thread running %s" % key
        leaf_callers = {s.functions[1] for s in mine if len(s.functions) > 1 and s.functions[0] == "busy"}
        assert leaf_callers, key
        for got in leaf_callers:
            assert len(got) <= MAX_CHARS + 1, (key, len(got))
            if len(name) > MAX_CHARS:
                assert got.endswith("…") and got[:-1] == name[:MAX_CHARS], key
            else:
                expected = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in name)
                assert got == expected, (key, got)
    assert stats["walk_errors"] == 0, stats
