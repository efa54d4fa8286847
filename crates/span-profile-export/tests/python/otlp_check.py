"""Decodes ExportProfilesServiceRequest bodies with the opentelemetry-proto package (an
independent decoder), checks the structural rules, and prints one JSON summary.

    python otlp_check.py FILE...      # each file: a raw (not gzipped) request body

Checks: row 0 of every dictionary table is the zero value; link ids are 16 and 8 bytes;
every index is in bounds (Python would read a negative one from the end, so each is checked
before use), and an index that must name a real row (a stack's locations, a line's function,
a sample's stack and attributes) is not 0. Prints, per profile, its types and per-sample rows:
[leaf-first function names, trace hex, span hex, value, {attribute key: value}].
"""
import json
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb


def check(cond, what):
    if not cond:
        raise SystemExit("CHECK FAILED: " + what)


def bound(i, n, what, zero_ok=True):
    check((0 if zero_ok else 1) <= i < n, "%s %d not in [%d, %d)" % (what, i, 0 if zero_ok else 1, n))


def summarize(data):
    req = svc.ExportProfilesServiceRequest()
    req.ParseFromString(data)
    d = req.dictionary
    check(d.string_table[0] == "", "string_table[0] is empty")
    check(d.mapping_table[0] == pb.Mapping(), "mapping_table[0] is zero")
    check(d.location_table[0] == pb.Location(), "location_table[0] is zero")
    check(d.function_table[0] == pb.Function(), "function_table[0] is zero")
    check(d.stack_table[0] == pb.Stack(), "stack_table[0] is zero")
    check(d.attribute_table[0] == pb.KeyValueAndUnit(), "attribute_table[0] is zero")
    check(d.link_table[0].trace_id == bytes(16) and d.link_table[0].span_id == bytes(8),
          "link_table[0] is the zero link")
    for l in d.link_table:
        check(len(l.trace_id) == 16 and len(l.span_id) == 8, "link ids are 16 and 8 bytes")
    s = d.string_table
    ns, nl, nf, nst, na, nk, nm = (len(s), len(d.location_table), len(d.function_table),
                                   len(d.stack_table), len(d.attribute_table), len(d.link_table),
                                   len(d.mapping_table))
    for f in d.function_table:
        for i in (f.name_strindex, f.system_name_strindex, f.filename_strindex):
            bound(i, ns, "function string")
    for m in d.mapping_table:
        bound(m.filename_strindex, ns, "mapping filename")
        for i in m.attribute_indices:
            bound(i, na, "mapping attribute", zero_ok=False)
    for loc in d.location_table[1:]:
        bound(loc.mapping_index, nm, "location.mapping_index")
        check(loc.lines, "a location has a line")
        for line in loc.lines:
            bound(line.function_index, nf, "line.function_index", zero_ok=False)
        for i in loc.attribute_indices:
            bound(i, na, "location attribute", zero_ok=False)
    for st in d.stack_table[1:]:
        check(st.location_indices, "a stack has locations")
        for i in st.location_indices:
            bound(i, nl, "stack location index", zero_ok=False)
    for a in d.attribute_table:
        bound(a.key_strindex, ns, "attribute key")
        bound(a.unit_strindex, ns, "attribute unit")
    out = {"resource": {}, "profiles": []}
    for rp in req.resource_profiles:
        for kv in rp.resource.attributes:
            out["resource"][kv.key] = kv.value.string_value
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                check(len(p.profile_id) in (0, 16), "profile_id is 16 bytes")
                for vt in (p.sample_type, p.period_type):
                    bound(vt.type_strindex, ns, "value type")
                    bound(vt.unit_strindex, ns, "value unit")
                for i in p.attribute_indices:
                    bound(i, na, "profile attribute", zero_ok=False)
                prof = {
                    "sample_type": [s[p.sample_type.type_strindex], s[p.sample_type.unit_strindex]],
                    "period_type": [s[p.period_type.type_strindex], s[p.period_type.unit_strindex]],
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "samples": [],
                }
                seen = set()
                for smp in p.samples:
                    bound(smp.stack_index, nst, "sample.stack_index", zero_ok=False)
                    bound(smp.link_index, nk, "sample.link_index")
                    ident = (smp.stack_index, tuple(sorted(smp.attribute_indices)), smp.link_index)
                    check(ident not in seen, "sample identity is unique")
                    seen.add(ident)
                    names = []
                    for li in d.stack_table[smp.stack_index].location_indices:
                        for line in d.location_table[li].lines:
                            names.append(s[d.function_table[line.function_index].name_strindex])
                    attrs = {}
                    for ai in smp.attribute_indices:
                        bound(ai, na, "sample attribute index", zero_ok=False)
                        a = d.attribute_table[ai]
                        attrs[s[a.key_strindex]] = a.value.string_value
                    link = d.link_table[smp.link_index]
                    check(len(smp.values) == 1, "one aggregated value")
                    prof["samples"].append([names, link.trace_id.hex(), link.span_id.hex(),
                                            smp.values[0], attrs])
                out["profiles"].append(prof)
    return out


if __name__ == "__main__":
    print(json.dumps([summarize(open(f, "rb").read()) for f in sys.argv[1:]]))
