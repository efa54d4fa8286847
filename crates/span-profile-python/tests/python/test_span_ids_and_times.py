"""Span ids and times are read exactly, whatever their size: an `int` of one, two or three
30-bit digits, up to the largest 64-bit id, and an `int` subclass. The processor reads them through
its own fast conversion (span_hooks.rs `u64_of`), so these are its edges."""
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

import span_profile
from span_profile import _hooks
from conftest import busy, hex16, records_of


class SpanId(int):
    """An application's own id type."""


# Outermost first: the largest id, the top bit alone, three digits, two, one, and a subclass.
EDGE_IDS = [2**64 - 1, 2**63, 2**60 + 5, 2**30, 2**30 - 1, 1, SpanId(2**62 + 3)]


class EdgeIds(RandomIdGenerator):
    def __init__(self):
        self.next = iter(EDGE_IDS)

    def generate_span_id(self):
        return next(self.next)


def edge_work():
    return busy(0.05)


def test_span_ids_at_the_edges_of_64_bits_and_their_times_are_recorded_exactly(agent):
    provider = TracerProvider(id_generator=EdgeIds())
    provider.add_span_processor(span_profile.SpanProcessor())
    tracer = provider.get_tracer("edges")

    spans, seen = [], []

    def nest(depth):
        with tracer.start_as_current_span("edge-%d" % depth) as span:
            spans.append(span)
            edge_work()
            current = agent.current_span()
            seen.append((current.span_id, current.local_root))
            if depth + 1 < len(EDGE_IDS):
                nest(depth + 1)

    nest(0)
    agent.stop()

    root = EDGE_IDS[0]
    assert [s.context.span_id for s in spans] == EDGE_IDS
    assert seen == [(i, root) for i in EDGE_IDS]
    assert span_profile.stats()["hook_errors"] == 0

    for parent, span in zip([None] + spans, spans):
        # A window that closes while the span is open records it then too, with no end.
        records = records_of(agent, span)
        assert [r["end_unix_ns"] for r in records if r["end_unix_ns"] is not None] == [span.end_time]
        for r in records:
            assert r["start_unix_ns"] == span.start_time
            assert r["local_root_span_id"] == hex16(root)
            assert r.get("parent_span_id") == (hex16(parent.context.span_id) if parent else None)


def test_a_span_started_at_time_zero_keeps_it(agent, tracer):
    # Zero is one digit, the smallest time; the end is never before the start.
    with tracer.start_as_current_span("from-the-epoch", start_time=0) as span:
        edge_work()
    agent.stop()
    records = records_of(agent, span)
    assert {r["start_unix_ns"] for r in records} == {0}
    assert [r["end_unix_ns"] for r in records if r["end_unix_ns"] is not None] == [span.end_time]


def subclass_work():
    return busy(0.05)


def test_a_subclass_that_overrides_the_hooks_and_calls_the_base_still_records_spans(agent):
    calls = []

    class Counting(span_profile.SpanProcessor):
        def __init__(self, log):
            self.log = log

        def on_start(self, span, parent_context=None):
            self.log.append("start")
            super().on_start(span, parent_context)

        def _on_ending(self, span):
            self.log.append("ending")
            super()._on_ending(span)

        def on_end(self, span):
            self.log.append("end")
            super().on_end(span)

    provider = TracerProvider()
    provider.add_span_processor(Counting(calls))
    with provider.get_tracer("subclass").start_as_current_span("request") as span:
        subclass_work()
        assert agent.current_span().span_id == span.context.span_id
    agent.stop()

    # `_on_ending` is called by OpenTelemetry SDKs from 1.35 on.
    assert calls == ["start"] + (["ending"] if _hooks._SDK_ON_ENDING else []) + ["end"]
    records = records_of(agent, span)
    assert [r["end_unix_ns"] for r in records if r["end_unix_ns"] is not None] == [span.end_time]


def test_the_processor_takes_no_arguments_and_says_where_settings_go():
    import pytest

    with pytest.raises(TypeError, match="span_profile.start"):
        span_profile.SpanProcessor(100)
    processor = span_profile.SpanProcessor()
    assert processor.force_flush() is True
    # The SDK hands on the application's timeout, a float if it gave one.
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    assert provider.force_flush(1500.0) is True
    provider.shutdown()
