"""What each profiler wrote, read into one shape for peers.py: a list of `Rec`, one per sample
(or aggregated sample), with the sampled thread as the profiler labelled it, the frames leaf
first, the CPU it claims, a sample count, and the span of wall-clock time it was taken in.

pprof is read with crates/span-profile-python/tests/python/pprof_reader.py (imported, with its
`captured_push_profiles` for pyroscope-io's PushRequests); on top of it this module reads the
profile's time_nanos/duration_nanos and numeric labels (ddtrace's `end_timestamp_ns` and
`thread native id`), which that reader leaves out.
"""
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY_TESTS = os.path.join(HERE, "..", "..", "crates", "span-profile-python", "tests", "python")
sys.path.insert(0, PY_TESTS)

import pprof_reader  # noqa: E402
from pprof_reader import _fields, captured_push_profiles, parse_profile  # noqa: E402


class Unreadable(Exception):
    """The profiler's output is missing or lacks what is counted; the message says which."""


class Rec:
    __slots__ = ("thread", "tid", "frames", "files", "cpu_ns", "count", "t_lo", "t_hi")

    def __init__(self, thread, tid, frames, files, cpu_ns, count, t_lo, t_hi):
        self.thread = thread  # the thread name the profiler gave, or None
        self.tid = tid  # a thread id the profiler gave (native id or ident), or None
        self.frames = frames  # function names, leaf first
        self.files = files  # their file names
        self.cpu_ns = cpu_ns  # the CPU the profile gives this sample, or None
        self.count = count  # samples this record stands for
        self.t_lo, self.t_hi = t_lo, t_hi  # wall-clock ns it was taken between (None: unknown)


def _window(data):
    """(time_nanos, time_nanos + duration_nanos) of a bare pprof profile, or (None, None)."""
    t = d = None
    for field, _, v in _fields(data):
        if field == 9:
            t = v
        elif field == 10:
            d = v
    return (t, t + (d or 0)) if t else (None, None)


def _num_labels(data):
    """The numeric labels of each sample ({key: num}), in the order parse_profile lists samples."""
    strings, raw = [], []
    for field, _, v in _fields(data):
        if field == 6:
            strings.append(v.decode("utf-8"))
        elif field == 2:
            raw.append(v)
    out = []
    for r in raw:
        labels = {}
        for f2, _, v2 in _fields(r):
            if f2 == 3:
                lab = dict((f3, v3) for f3, _, v3 in _fields(v2))
                if 3 in lab:
                    labels[strings[lab.get(1, 0)]] = lab[3]
        out.append(labels)
    return out


def _tid(labels, *keys):
    for k in keys:
        v = labels.get(k)
        if v not in (None, "", 0):
            try:
                return int(v)
            except ValueError:
                pass
    return None


def _pprof_recs(data, cpu_type, count_of, thread_key, tid_keys, exact_time=None):
    prof = parse_profile(data)
    if cpu_type not in prof.sample_types:
        raise Unreadable("its profile has no `%s` sample type (it has %s)" % (cpu_type, ", ".join(prof.sample_types)))
    lo, hi = _window(data)
    nums = _num_labels(data) if exact_time else [{}] * len(prof.samples)
    recs = []
    for s, num in zip(prof.samples, nums):
        n = count_of(s)
        if not n:
            continue
        labels = dict(s.labels, **num)
        t_lo, t_hi = lo, hi
        if exact_time and num.get(exact_time):
            t_lo = t_hi = num[exact_time]
        recs.append(Rec(labels.get(thread_key) or None, _tid(labels, *tid_keys), [f[0] for f in s.frames],
                        [f[1] for f in s.frames], s.values.get(cpu_type), n, t_lo, t_hi))
    return recs


def span_profile(output_dir):
    paths = pprof_reader.files(output_dir)
    if not paths:
        raise Unreadable("it wrote no window under %s" % output_dir)
    recs = []
    for p in paths:
        with open(p, "rb") as f:
            recs += _pprof_recs(gzip.decompress(f.read()), "cpu", lambda s: s.values.get("samples", 0),
                                "thread_name", ("thread_id", "native_thread_id"))
    return recs


def pyroscope(capture_dir, period_ns):
    if not glob.glob(os.path.join(capture_dir, "*.json")):
        raise Unreadable("it pushed nothing to the capture server")
    recs = []
    for raw in captured_push_profiles(capture_dir):
        recs += _pprof_recs(raw, "cpu", lambda s: round(s.values.get("cpu", 0) / period_ns),
                            "thread_name", ("thread_id",))
    return recs


def _zstd(path):
    try:
        import zstandard
    except ImportError:
        zstandard = None
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x28\xb5\x2f\xfd":
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    if zstandard is not None:
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if shutil.which("zstd"):
        return subprocess.run(["zstd", "-dc", path], capture_output=True, check=True, timeout=60).stdout
    raise Unreadable("its pprof is zstd-compressed and neither the zstandard module nor the zstd tool is here")


def ddtrace(prefix):
    paths = sorted(glob.glob(prefix + ".*.pprof"))
    if not paths:
        raise Unreadable("it wrote no %s.*.pprof (DD_PROFILING_OUTPUT_PPROF)" % prefix)
    recs = []
    for p in paths:
        # Stack samples have wall-samples 1; lock, allocation and exception events have 0.
        recs += _pprof_recs(_zstd(p), "cpu-time", lambda s: s.values.get("wall-samples", 0), "thread name",
                            ("thread native id", "thread id"), exact_time="end_timestamp_ns")
    return recs


_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")


def _split_frame(text):
    m = _FRAME.match(text)
    return (m.group(1), m.group(2)) if m else (text, "")


def py_spy_raw(path, interval_ns):
    """`py-spy record --threads --format raw`: lines `thread (TID)[: NAME];frame;...;frame COUNT`,
    root first, each frame `function (file:line)`. No timestamps."""
    if not os.path.exists(path):
        raise Unreadable("it wrote no %s" % path)
    recs = []
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            parts = stack.split(";")
            m = re.match(r"thread \((\d+|0x[0-9a-f]+)\)(?:: (.*))?$", parts[0])
            if not m or not n.isdigit():
                continue
            frames = [_split_frame(p) for p in reversed(parts[1:])]
            recs.append(Rec(m.group(2), int(m.group(1), 0), [f[0] for f in frames], [f[1] for f in frames],
                            int(n) * interval_ns, int(n), None, None))
    return recs


def py_spy_speedscope(path, lifetimes):
    """`py-spy record --threads --idle --format speedscope`: one profile a thread, its samples
    in the order taken, one every tick (--idle). py-spy gives no times, so sample i of n of a
    thread is placed at born + i/n of the thread's lifetime (`lifetimes`: {name: (born_ns,
    end_ns)}, from the truth); peers.py's tolerance covers the drift of that estimate."""
    if not os.path.exists(path):
        raise Unreadable("it wrote no %s" % path)
    with open(path) as f:
        doc = json.load(f)
    frames = doc["shared"]["frames"]
    recs = []
    for prof in doc["profiles"]:
        m = re.match(r'Thread (\d+|0x[0-9a-f]+)(?: "(.*)")?', prof.get("name", ""))
        name = m.group(2) if m else None
        tid = int(m.group(1), 0) if m else None
        samples = prof["samples"]
        life = lifetimes.get(name)
        for i, stack in enumerate(samples):
            t = None
            if life:
                t = int(life[0] + (life[1] - life[0]) * i / max(len(samples), 1))
            fr = [frames[j] for j in reversed(stack)]
            recs.append(Rec(name, tid, [x["name"] for x in fr], [x.get("file") or "" for x in fr],
                            None, 1, t, t))
    return recs
