"""Bad strings don't lose spans (issue 27, point 6): a span name or `http.route` with a lone
surrogate, a NUL or a megabyte of text is repaired (U+FFFD for what has no UTF-8 form or is a
NUL, cut to 256 bytes at a character boundary) and the span is kept, with its samples labelled."""
import pytest

import span_profile
from conftest import by_span, hex16, named_function, records_of
from pprof_reader import samples_in

#: The cap on a span name or route, in bytes of UTF-8 (span_hooks.rs, MAX_TEXT_BYTES: the core's
#: MAX_LABEL_VALUE_LEN, which the span table and the route labels cut to).
CAP = 256

MEGA = "é" * (1 << 20)  # two bytes each in UTF-8: the cap falls inside a character

CASES = [
    # (id, the string the application gives, what the store must hold)
    ("surrogate", "pay\udc80ment", "pay\ufffdment"),
    ("surrogates", "\ud800x\udfff", "\ufffdx\ufffd"),
    ("nul", "pay\x00ment", "pay\ufffdment"),
    ("megabyte", MEGA, "é" * (CAP // 2)),
    ("megabyte_odd", "a" + MEGA, "a" + "é" * ((CAP - 1) // 2)),
    ("surrogate_megabyte", "\udc80" * (1 << 20), "\ufffd" * (CAP // 3)),
]


@pytest.mark.parametrize("where", ["name", "route"])
@pytest.mark.parametrize("case_id,given,stored", CASES, ids=[c[0] for c in CASES])
def test_a_bad_string_is_repaired_and_the_span_keeps_its_samples(agent, tracer, where, case_id, given, stored):
    assert len(stored.encode("utf-8")) <= CAP
    work = named_function("bad_string_work_" + case_id)
    name, route = (given, "/ok") if where == "name" else ("request", given)
    with tracer.start_as_current_span(name, attributes={"http.route": route}) as span:
        work(0.5)
    agent.stop()

    sid = hex16(span.context.span_id)
    samples = samples_in(agent.output, work.__name__)
    total = sum(s.count for s in samples)
    assert total >= 5, "the work ran 0.5 s at 250 Hz"
    assert by_span(samples) == {sid: total}, "every sample of the work is the span's"
    want_route = stored if where == "route" else "/ok"
    assert {s.labels["route"] for s in samples} == {want_route}
    records = records_of(agent, span)
    assert records, "the span's record is in the windows"
    assert {r["name"] for r in records} == {stored if where == "name" else "request"}
    stats = span_profile.stats()
    assert stats["hook_errors"] == 0
    assert stats["spans_started"] == stats["spans_ended"] == 1
