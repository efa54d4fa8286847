"""The processor reads the SDK span's fields (`_context`, `_parent`, `_name`, `_start_time`,
`_end_time`) straight from the span's inline attribute values on CPython 3.11-3.13, at the
index its class's shared keys give each name (ADR 0018), and with `getattr` otherwise. Either
way it must read exactly what `getattr` would."""
import sys

from opentelemetry.sdk import trace as sdk_trace

import span_profile
from span_profile import _native
from conftest import busy, hex16, records_of

INLINE = sys.version_info >= (3, 11)
FIELDS = ("_context", "_parent", "_name", "_start_time", "_end_time")


def field_work():
    return busy(0.05)


def test_the_sdk_spans_fields_are_found_inline_where_cpython_keeps_them(agent, tracer):
    with tracer.start_as_current_span("outer") as outer:
        with tracer.start_as_current_span("inner") as inner:
            field_work()
    agent.stop()
    indices = _native.span_field_indices()
    if INLINE:
        assert all(isinstance(indices[f], int) for f in FIELDS), indices
    else:
        assert all(indices[f] is None for f in FIELDS), indices
    for span, parent in ((outer, None), (inner, outer)):
        records = records_of(agent, span)
        assert records, span.name
        for r in records:
            assert r["name"] == span.name
            assert r["start_unix_ns"] == span.start_time
            assert r.get("parent_span_id") == (hex16(parent.context.span_id) if parent else None)
        assert [r["end_unix_ns"] for r in records if r["end_unix_ns"] is not None] == [span.end_time]


class Renamed(sdk_trace._Span):
    """A span class whose `_name` is a property: `getattr` gives the property's value, whatever
    the instance's own values hold under that name."""

    @property
    def _name(self):
        return "renamed:" + self.__dict__["_given_name"]

    @_name.setter
    def _name(self, value):
        # A value under `_name` in the instance's own attributes too, which `getattr` never
        # returns while the property is there.
        self.__dict__["_given_name"] = value
        self.__dict__["_name"] = "inline:" + value


def test_a_property_over_a_field_is_read_as_getattr_reads_it(agent, tracer, monkeypatch):
    with tracer.start_as_current_span("plain"):  # the SDK's own class is learned first
        pass
    monkeypatch.setattr(sdk_trace, "_Span", Renamed)
    with tracer.start_as_current_span("request") as span:
        assert type(span) is Renamed and span._name == "renamed:request"
        field_work()
    agent.stop()
    records = records_of(agent, span)
    assert records and {r["name"] for r in records} == {"renamed:request"}
    assert span_profile.stats()["hook_errors"] == 0


def test_a_span_whose_attributes_were_made_a_dict_is_still_read_exactly(agent, tracer):
    # `vars()` makes the instance's dict from its inline values; a field set after that is in
    # the dict (3.11, 3.12) or still inline (3.13).
    with tracer.start_as_current_span("request") as span:
        vars(span)
        span._name = "renamed-after-vars"
        field_work()
    agent.stop()
    records = records_of(agent, span)
    assert records
    assert [r["end_unix_ns"] for r in records if r["end_unix_ns"] is not None] == [span.end_time]
    assert span_profile.stats()["hook_errors"] == 0


def test_a_class_changed_after_its_fields_were_learned_is_learned_again(agent, tracer, monkeypatch):
    class Later(sdk_trace._Span):
        pass

    monkeypatch.setattr(sdk_trace, "_Span", Later)
    with tracer.start_as_current_span("first"):
        pass
    # A property added to the class changes its version tag: the index learned is dropped.
    # Its setter leaves a value under `_name` in the instance's own attributes too.
    Later._name = property(lambda self: "from-the-property",
                           lambda self, v: self.__dict__.__setitem__("_name", "inline:" + v))
    with tracer.start_as_current_span("second") as span:
        field_work()
    agent.stop()
    records = records_of(agent, span)
    assert records and {r["name"] for r in records} == {"from-the-property"}
    if INLINE:
        assert _native.span_field_indices()["_name"] is None


class Intercepted(sdk_trace._Span):
    """A span class with its own `__getattribute__`, which agrees with the instance's values
    on the first span and not on the second: only `getattr` reads it right."""

    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        if name == "_name" and value == "second":
            return "intercepted"
        return value


def test_a_class_with_its_own_attribute_lookup_is_read_through_it(agent, tracer, monkeypatch):
    monkeypatch.setattr(sdk_trace, "_Span", Intercepted)
    with tracer.start_as_current_span("first"):
        pass
    with tracer.start_as_current_span("second") as span:
        field_work()
    agent.stop()
    records = records_of(agent, span)
    assert records and {r["name"] for r in records} == {"intercepted"}
