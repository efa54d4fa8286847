"""One request of the bench's checkout as the fixed-load services serve it: the spans of
../shared/bench/workload.py's checkout (a SERVER span `request` with its route and six children)
and its work between them, the date parsing `work` times workload.py's own (4: about 3 ms of CPU
a request on the benchmarks machine, where workload.py's own is about 1 ms). fixed_load_service.py
serves it; hook_instructions.py and examples/python/hook_cost.py measure the hooks on it."""
from opentelemetry.trace import SpanKind


def handle(tracer, workload, i, work=4):
    """Request `i`, traced by `tracer`, doing the work of `workload` (the imported workload.py);
    returns the rendered response."""
    start = tracer.start_as_current_span
    with start("request", kind=SpanKind.SERVER, attributes={"http.route": "/checkout/" + "ab"[i % 2]}):
        with start("auth.check"):
            workload.auth_check(i)
        with start("pricing.calculate"):
            with start("parse_dates"):
                ts = workload.parse_dates(150 * work, i)
            with start("apply_discount"):
                total = workload.apply_discount(i, 40)
            with start("decimal.quantize"):
                price = total.quantize(workload.CENT, rounding=workload.ROUND_HALF_UP)
        with start("render.json"):
            return workload.render(i, price, ts)
