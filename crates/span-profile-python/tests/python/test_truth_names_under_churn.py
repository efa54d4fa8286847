"""Frame names stay true while code objects are freed and their memory reused (ADR 0020).

Functions made at run time die young: `exec` of generated source, `types.FunctionType` over
`code.replace(co_name=...)`, lambdas from `eval`. When one is freed, the next one's code
object, name and line table are often allocated at the same addresses, so a walker that
knows a code object by its addresses reports it under a dead function's name.

Ground truth: four threads each create, call and drop uniquely named functions, over a
thousand a second, each call under a span of its own; the test records which function each
span ran, and on which line that function calls on (each function's one line is put at one
of several line numbers, so a line table from another function gives a wrong line). A sample
is right when the innermost churned frame of its stack is the function its span ran, at that
line. (Samples taken while a span is open but its function is not yet running, or
has returned, hold no churned frame and say nothing about names; they are not counted.)
"""
import sys
import threading
import time
import types

import pytest
from opentelemetry.sdk.trace import TracerProvider

import span_profile
from pprof_reader import all_samples

#: Long enough for about 2,000 samples in churned functions (about 170 a second here), so that
#: REQUIRED is resolved: at 5 s (about 830 samples) one wrong sample in a run was 0.12% and
#: failed a spec that allows 0.1% (seen once on 3.10: a frame object freed and reused while
#: the walker followed its caller link, ADR 0020's consequences).
RUN_S = 12.0
#: Fewer samples than this cannot tell 99.9% from 100%.
MIN_SAMPLES = 1000
THREADS = 4
PREFIX = "churn_"
#: The share of samples that must be right: 99.9% on every version (issue 24). Before the
#: span-boundary count (ADR 0020, decision 3 as amended), a span entered and left within one
#: stack copy showed its frames with no span: 97.1-97.5% right on 3.9 and 99.1-99.9% on 3.12
#: with syscall reads. With it, 100% in 28 runs on 3.9-3.13, both read modes.
REQUIRED = 0.999
#: Functions each thread must make, free and call per second for the run to count: issue 24's
#: 1,000. Each costs a compile, an SDK span, our hooks and the call; four threads share one GIL
#: and make 4,300-7,400 a second each on 2 quiet cores (3.9-3.13), and 2,400-2,600 on 3.9
#: with three busy loops beside, so a loaded machine still makes the rate. (On 2026-12-02 quiet runs made 560-920/s
#: and the spec accepted 400; the same workload makes 4,400-4,700/s on 3.9 today.)
MIN_RATE = 1000


def _spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


#: How many line numbers the functions are spread over (function i's one line is set by i % LINES).
LINES = 5


def _make_exec(name, k):
    """A `def` on line k + 1 (the whole function on one line)."""
    ns = {"spin": _spin}
    exec(compile("\n" * k + "def %s(n): return spin(n)\n" % name, "<churn %s>" % name, "exec"), ns)
    return ns[name], k + 1


_TEMPLATE = (lambda n: _spin(n)).__code__


def _make_replace(name, k):
    """The template lambda renamed and moved to line 1000 + k."""
    fields = {"co_name": name, "co_firstlineno": 1000 + k}
    if hasattr(_TEMPLATE, "co_qualname"):
        fields["co_qualname"] = name
    return types.FunctionType(_TEMPLATE.replace(**fields), {"_spin": _spin}, name), 1000 + k


def _make_lambda(name, k):
    """A lambda on line k + 1. Its code is called "<lambda>": its file tells them apart."""
    return eval(compile("\n" * k + "lambda n: spin(n)", name, "eval"), {"spin": _spin}), k + 1


MAKERS = {"exec": _make_exec, "replace": _make_replace, "lambda": _make_lambda}


def _churn(t, tracer, stop, ran, made):
    """Thread `t`: create, call under its own span, and drop functions until `stop`."""
    kinds = list(MAKERS.items())
    i = 0
    while not stop.is_set():
        kind, make = kinds[i % len(kinds)]
        name = "%st%d_%s_%06d" % (PREFIX, t, kind, i)
        fn, line = make(name, i % LINES)
        with tracer.start_as_current_span(name) as span:
            fn(300)
        ran[span.get_span_context().span_id] = (name, line)
        del fn, span
        i += 1
    made[t] = i


def _reported(frame):
    """The churned function a frame shows, and its line: its name, or, for a lambda, its file
    (a `<module>` frame of a churned file is the code that makes the function, not the
    function)."""
    function, file, line = frame
    if function.startswith(PREFIX):
        return function, line
    if function == "<lambda>" and file.startswith(PREFIX):
        return file, line
    return None


@pytest.mark.parametrize("reads", ["guarded", "syscall"])
def test_churned_functions_keep_their_own_names_and_spans(tmp_path, monkeypatch, reads):
    monkeypatch.setenv("SPAN_PROFILE_MEMORY_READS", reads)
    output = str(tmp_path / "profiles")
    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    tracer = provider.get_tracer("churn")
    agent = span_profile.start(service="churn", output=output, sample_rate_hz=200, window_s=1,
                               overhead_budget=0)
    stop, ran, made = threading.Event(), {}, {}
    threads = [threading.Thread(target=_churn, args=(t, tracer, stop, ran, made), name="churn-%d" % t)
               for t in range(THREADS)]
    started = time.perf_counter()
    for th in threads:
        th.start()
    time.sleep(RUN_S)
    stop.set()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - started
    agent.stop()

    rates = {t: n / elapsed for t, n in made.items()}
    assert all(r >= MIN_RATE for r in rates.values()), (
        "each thread must make %d functions/s: %s" % (MIN_RATE, rates))

    right, wrong, wrong_lines, examples = 0, 0, 0, []
    for s in all_samples(output):
        shown = [n for n in map(_reported, s.frames) if n]
        if not shown:
            continue
        expected = ran.get(int(s.span_id, 16)) if s.span_id else None
        if shown[0] == expected:
            right += s.count
        else:
            wrong += s.count
            wrong_lines += s.count if expected and shown[0][0] == expected[0] else 0
            if len(examples) < 8:
                examples.append((shown[0], expected, s.frames[:3]))
    total = right + wrong
    assert total >= MIN_SAMPLES, "too few samples in churned functions: %d" % total
    print("churn accuracy %s %s: %d of %d right (%.2f%%), %d with the right function at a wrong line" % (
        ".".join(map(str, sys.version_info[:2])), reads, right, total, 100.0 * right / total, wrong_lines)
        + "; functions/s per thread: %s" % sorted(round(r) for r in rates.values()))
    assert right / total >= REQUIRED, (
        "%d of %d samples (%.2f%%) show another function, line or span than the one running; "
        "e.g. (shown, running, stack): %s; walker stats: %s"
        % (wrong, total, 100.0 * wrong / total, examples,
           {k: v for k, v in agent.stats().items() if "code" in k or "context" in k or "torn" in k}))
