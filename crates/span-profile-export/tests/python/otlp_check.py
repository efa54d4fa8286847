"""Decodes ExportProfilesServiceRequest bodies with the opentelemetry-proto package (an
independent decoder), checks the structural rules, and prints one JSON summary.

    python otlp_check.py FILE...      # each file: a raw (not gzipped) request body

Checks: row 0 of every dictionary table is the zero value; link ids are 16 and 8 bytes;
every index is in bounds. Prints, per profile, its types and per-sample rows:
[leaf-first function names, trace hex, span hex, value, {attribute key: value}].
"""
import json
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb


def check(cond, what):
    if not cond:
        raise SystemExit("CHECK FAILED: " + what)


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
    ns, nl, nf, nst, na, nk = (len(s), len(d.location_table), len(d.function_table),
                               len(d.stack_table), len(d.attribute_table), len(d.link_table))
    for f in d.function_table:
        check(0 <= f.name_strindex < ns and 0 <= f.filename_strindex < ns, "function strings")
    for loc in d.location_table:
        for line in loc.lines:
            check(0 <= line.function_index < nf, "line.function_index")
    for st in d.stack_table:
        for i in st.location_indices:
            check(0 < i < nl, "stack location index")
    for a in d.attribute_table:
        check(0 <= a.key_strindex < ns, "attribute key")
    out = {"resource": {}, "profiles": []}
    for rp in req.resource_profiles:
        for kv in rp.resource.attributes:
            out["resource"][kv.key] = kv.value.string_value
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                check(len(p.profile_id) in (0, 16), "profile_id is 16 bytes")
                prof = {
                    "sample_type": [s[p.sample_type.type_strindex], s[p.sample_type.unit_strindex]],
                    "period_type": [s[p.period_type.type_strindex], s[p.period_type.unit_strindex]],
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "samples": [],
                }
                seen = set()
                for smp in p.samples:
                    check(0 < smp.stack_index < nst, "sample.stack_index")
                    check(0 <= smp.link_index < nk, "sample.link_index")
                    ident = (smp.stack_index, tuple(sorted(smp.attribute_indices)), smp.link_index)
                    check(ident not in seen, "sample identity is unique")
                    seen.add(ident)
                    names = []
                    for li in d.stack_table[smp.stack_index].location_indices:
                        for line in d.location_table[li].lines:
                            names.append(s[d.function_table[line.function_index].name_strindex])
                    attrs = {}
                    for ai in smp.attribute_indices:
                        check(0 < ai < na, "sample attribute index")
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
