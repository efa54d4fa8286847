"""The processor's `on_start`, `_on_ending` and `on_end` are hand-written native methods
(ADR 0017). They take their arguments as Python methods with these signatures would, however
the SDK passes them, and reject the rest with the errors Python gives:

    on_start(self, span, parent_context=None)
    _on_ending(self, span)
    on_end(self, span)
"""
import inspect
import re

import pytest
from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor, TracerProvider

import span_profile
from conftest import busy


def test_the_methods_have_the_sdk_processors_signatures():
    methods = span_profile.SpanProcessor
    assert str(inspect.signature(methods.on_start)) == "(self, /, span, parent_context=None)"
    assert str(inspect.signature(methods._on_ending)) == "(self, /, span)"
    assert str(inspect.signature(methods.on_end)) == "(self, /, span)"


def test_with_no_agent_the_calls_do_nothing():
    # A span that is not one is ignored, and nothing raises into the application.
    processor = span_profile.SpanProcessor()
    processor.on_start(None)
    processor.on_start(None, parent_context=None)
    processor._on_ending(span=None)
    processor.on_end(span=None)


def test_the_span_may_come_by_position_or_by_name(agent):
    # Spans from a provider of their own, handed to the processor by hand: each way of passing
    # them must record a start, and an end from whichever of _on_ending/on_end the SDK uses.
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("by-hand")
    spans = [tracer.start_span("s%d" % i) for i in range(4)]
    processor = span_profile.SpanProcessor()
    before = span_profile.stats()
    processor.on_start(spans[0])
    processor.on_start(spans[1], None)
    processor.on_start(spans[2], parent_context=None)
    processor.on_start(span=spans[3], parent_context=None)
    after_start = span_profile.stats()
    assert after_start["spans_started"] - before["spans_started"] == 4
    for s in spans:
        s.end()
    # The SDK (1.35+) records the end at _on_ending and then calls on_end, which does nothing;
    # an older one calls on_end only. Either way each span below ends once.
    processor._on_ending(spans[0])
    processor._on_ending(span=spans[1])
    processor.on_end(spans[0])
    processor.on_end(span=spans[1])
    after = span_profile.stats()
    assert after["spans_ended"] - after_start["spans_ended"] == 2
    assert after["hook_errors"] == before["hook_errors"]


@pytest.mark.parametrize("call, message", [
    (lambda p: p.on_start(), "on_start() missing required argument 'span'"),
    (lambda p: p.on_start(parent_context=None), "on_start() missing required argument 'span'"),
    (lambda p: p.on_start(1, 2, 3), "on_start() takes at most 2 positional arguments (3 given)"),
    (lambda p: p.on_start(1, span=1), "on_start() got multiple values for argument 'span'"),
    (lambda p: p.on_start(1, 2, parent_context=2),
     "on_start() got multiple values for argument 'parent_context'"),
    (lambda p: p.on_start(1, context=2), "on_start() got an unexpected keyword argument 'context'"),
    (lambda p: p.on_end(1, None), "on_end() takes 1 positional argument (2 given)"),
    (lambda p: p.on_end(1, parent_context=None),
     "on_end() got an unexpected keyword argument 'parent_context'"),
    (lambda p: p._on_ending(), "_on_ending() missing required argument 'span'"),
    (lambda p: type(p).on_end(object(), 1), "doesn't apply to a 'object' object"),
])
def test_wrong_arguments_raise_type_error_as_a_python_method_would(call, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        call(span_profile.SpanProcessor())


def concurrent_work():
    return busy(0.05)


def test_spans_are_recorded_when_the_sdk_calls_the_processor_from_a_thread_pool(agent):
    # ConcurrentMultiSpanProcessor hands each call to an executor, with its arguments by name.
    processors = ConcurrentMultiSpanProcessor(num_threads=2)
    processors.add_span_processor(span_profile.SpanProcessor())
    provider = TracerProvider(active_span_processor=processors, shutdown_on_exit=False)
    with provider.get_tracer("concurrent").start_as_current_span("request") as span:
        concurrent_work()
        assert agent.current_span().span_id == span.context.span_id
    agent.stop()
    provider.shutdown()
    stats = span_profile.stats()
    assert stats["hook_errors"] == 0
    assert stats["spans_started"] >= 1 and stats["spans_ended"] >= 1
