"""A tiny pprof reader for the tests: gzip + a hand-written protobuf wire-format parser (the
field numbers of pprof's profile.proto), so the tests need no generated code."""
import glob
import gzip
import json
import os

META_PREFIX = "span-profile.meta="  # the meta comment of files written before ADR 0024
META_FIELD = 21328  # the Profile field that carries the meta JSON since ADR 0024


def _varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf):
    """Yields (field number, wire type, value) of one message; value is an int or bytes."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 2:
            ln, i = _varint(buf, i)
            v, i = bytes(buf[i:i + ln]), i + ln
        elif wire == 1:
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield field, wire, v


def _ints(wire, v):
    """A repeated integer field: packed (bytes) or one unpacked value."""
    if wire != 2:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def _signed(x):
    return x - (1 << 64) if x >= 1 << 63 else x


class Sample:
    def __init__(self, frames, values, labels):
        self.frames = frames  # [(function, file, line)], leaf first
        self.values = values  # {sample type: value}
        self.labels = labels  # {key: str value}

    @property
    def functions(self):
        return [f[0] for f in self.frames]

    @property
    def count(self):
        return self.values.get("samples", 0)

    @property
    def span_id(self):
        return self.labels.get("span_id")

    def __repr__(self):
        return "Sample(%s, %s, %s)" % (self.functions[:4], self.values, self.labels)


class Profile:
    def __init__(self, path, samples, meta, sample_types, strings, time_nanos=0, duration_nanos=0):
        self.path = path
        self.time_nanos = time_nanos  # the window's start, Unix ns
        self.duration_nanos = duration_nanos
        self.samples = samples
        self.meta = meta  # the span-profile meta JSON (resource, stats, spans), or {}
        self.sample_types = sample_types
        self.strings = strings


def read_profile(path):
    with open(path, "rb") as f:
        return parse_profile(gzip.decompress(f.read()), path)


def parse_profile(data, path=None):
    """A bare (not gzipped) pprof profile."""
    strings, raw_samples, locations, functions, types, comments = [], [], {}, {}, [], []
    meta_field = None
    time_nanos = duration_nanos = 0
    for field, wire, v in _fields(data):
        if field == 9:
            time_nanos = v
        elif field == 10:
            duration_nanos = v
        elif field == 6:
            strings.append(v.decode("utf-8"))
        elif field == 2:
            raw_samples.append(v)
        elif field == 4:
            loc = {"id": 0, "lines": []}
            for f2, w2, v2 in _fields(v):
                if f2 == 1:
                    loc["id"] = v2
                elif f2 == 4:
                    line = dict((f3, v3) for f3, _, v3 in _fields(v2))
                    loc["lines"].append((line.get(1, 0), _signed(line.get(2, 0))))
            locations[loc["id"]] = loc
        elif field == 5:
            fn = dict((f2, v2) for f2, _, v2 in _fields(v))
            functions[fn.get(1, 0)] = (fn.get(2, 0), fn.get(4, 0))
        elif field == 1:
            vt = dict((f2, v2) for f2, _, v2 in _fields(v))
            types.append((vt.get(1, 0), vt.get(2, 0)))
        elif field == 13:
            comments.extend(_ints(wire, v))
        elif field == META_FIELD and wire == 2:
            meta_field = v
    type_names = [strings[t] for t, _ in types]
    samples = []
    for raw in raw_samples:
        loc_ids, values, labels = [], [], {}
        for f2, w2, v2 in _fields(raw):
            if f2 == 1:
                loc_ids.extend(_ints(w2, v2))
            elif f2 == 2:
                values.extend(_signed(x) for x in _ints(w2, v2))
            elif f2 == 3:
                lab = dict((f3, v3) for f3, _, v3 in _fields(v2))
                labels[strings[lab.get(1, 0)]] = strings[lab.get(2, 0)]
        frames = []
        for lid in loc_ids:
            for fid, line in locations[lid]["lines"]:
                name, filename = functions.get(fid, (0, 0))
                frames.append((strings[name], strings[filename], line))
        samples.append(Sample(frames, dict(zip(type_names, values)), labels))
    meta = json.loads(meta_field) if meta_field is not None else {}
    for c in comments if meta_field is None else []:
        s = strings[c]
        if s.startswith(META_PREFIX):
            meta = json.loads(s[len(META_PREFIX):])
    return Profile(path, samples, meta, type_names, strings, time_nanos, duration_nanos)


def files(output_dir):
    return sorted(glob.glob(os.path.join(str(output_dir), "**", "*.pb.gz"), recursive=True))


def read_all(output_dir):
    return [read_profile(p) for p in files(output_dir)]


def all_samples(output_dir):
    return [s for p in read_all(output_dir) for s in p.samples]


def samples_in(output_dir, function):
    """Samples whose stack contains `function`, each with its count."""
    return [s for s in all_samples(output_dir) if function in s.functions]


def captured_push_profiles(capture_dir):
    """The pprof profiles (bare, not gzipped) in every Pyroscope PushRequest that
    pyroscope_capture.py kept under `capture_dir`, oldest first: each request's series
    (field 1), their samples (field 2), each sample's raw profile (field 1), gzip or bare."""
    import base64

    for p in sorted(glob.glob(os.path.join(str(capture_dir), "*.json"))):
        with open(p) as f:
            body = base64.b64decode(json.load(f)["body"])
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        for field, _, series in _fields(body):
            if field != 1:
                continue
            for f2, _, sample in _fields(series):
                if f2 != 2:
                    continue
                for f3, _, raw in _fields(sample):
                    if f3 == 1:
                        yield gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
