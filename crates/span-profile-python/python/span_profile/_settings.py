"""Settings of span_profile.start(): explicit arguments first, then SPAN_PROFILE_* variables,
then defaults. Resource labels also come from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
(read by the native core)."""
import os

from . import _native

DEFAULT_OUTPUT = "./profiles"
DEFAULT_SAMPLE_RATE_HZ = 100
DEFAULT_WINDOW_S = 60.0
#: The ranges the native core accepts (``ProfilerBuilder::SAMPLE_RATE_HZ`` and ``WINDOW``),
#: checked here too so that an error can say where a value came from.
MIN_SAMPLE_RATE_HZ, MAX_SAMPLE_RATE_HZ = _native.SAMPLE_RATE_HZ
MIN_WINDOW_S, MAX_WINDOW_S = _native.WINDOW_S

#: Settings accepted through ``**more`` in ``start()``.
LABEL_SETTINGS = ("version", "environment", "instance")
EXTRA_SETTINGS = LABEL_SETTINGS + ("overhead_budget",)
DEFAULT_OVERHEAD_BUDGET = 0.01


def _env(name):
    v = os.environ.get(name)
    if v is None or not v.strip():
        return None
    return v.strip()


def _number(name, value, source, integer):
    if isinstance(value, str):
        try:
            value = int(value) if integer else float(value)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise ValueError("%s=%r (from %s) is not %s" % (name, value, source, kind)) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be a number, not %s" % (name, type(value).__name__))
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError("%s=%r (from %s) must be a whole number" % (name, value, source))
            value = int(value)
    else:
        value = float(value)
        if value != value:
            raise ValueError("%s (from %s) is NaN" % (name, source))
    return value


def _pick(name, value, env_name, default):
    """(value, where it came from): the argument, else the variable, else the default."""
    if value is not None:
        return value, "argument " + name
    env = _env(env_name)
    if env is not None:
        return env, env_name
    return default, "default"


def _ranged(name, value, env_name, default, integer, lo, hi, hint):
    value, src = _pick(name, value, env_name, default)
    v = _number(name, value, src, integer)
    if not lo <= v <= hi:
        unit = "" if integer else " seconds"
        raise ValueError("%s=%r (from %s) is out of range; use %g to %g%s (%s)" % (name, v, src, lo, hi, unit, hint))
    return v


def check_writable(output):
    """For an existing output directory: proves this process can write a file in it; raises
    OSError with the path, the reason and what to do. A directory that does not exist yet is
    created by the native agent, which raises ValueError if it cannot be; network outputs
    pass."""
    import tempfile

    directory = _native.parse_output(output)
    if not os.path.isdir(directory):
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=".span_profile-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise type(e)(e.errno, "span_profile cannot write profiles to %s: %s; choose a directory this process "
                      "can write (output= or SPAN_PROFILE_OUTPUT)" % (directory, e.strerror or e)) from e


def resolve(service=None, output=None, sample_rate_hz=None, window_s=None, **more):
    """The effective settings as a dict; raises TypeError/ValueError with what to change."""
    unknown = sorted(set(more) - set(EXTRA_SETTINGS))
    if unknown:
        raise TypeError("span_profile.start() got unexpected setting(s) %s; known settings: service, output, "
                        "sample_rate_hz, window_s, %s" % (", ".join(unknown), ", ".join(EXTRA_SETTINGS)))
    out = {}

    service, src = _pick("service", service, "SPAN_PROFILE_SERVICE", None)
    if service is not None and not isinstance(service, str):
        raise TypeError("service must be a str, not %s" % type(service).__name__)
    if service is not None and not service.strip():
        raise ValueError("service (from %s) is empty; pass a name or leave it unset to use OTEL_SERVICE_NAME"
                         % src)
    out["service"] = service

    output, src = _pick("output", output, "SPAN_PROFILE_OUTPUT", DEFAULT_OUTPUT)
    if isinstance(output, os.PathLike):
        output = os.fspath(output)
    if isinstance(output, bytes):
        output = os.fsdecode(output)
    if not isinstance(output, str):
        raise TypeError("output must be a directory path (str or os.PathLike), not %s" % type(output).__name__)
    _native.parse_output(output)  # ValueError naming what is accepted
    out["output"] = output

    out["sample_rate_hz"] = _ranged("sample_rate_hz", sample_rate_hz, "SPAN_PROFILE_SAMPLE_RATE_HZ",
                                    DEFAULT_SAMPLE_RATE_HZ, True, MIN_SAMPLE_RATE_HZ, MAX_SAMPLE_RATE_HZ,
                                    "100 is typical")
    out["window_s"] = _ranged("window_s", window_s, "SPAN_PROFILE_WINDOW_S", DEFAULT_WINDOW_S, False,
                              MIN_WINDOW_S, MAX_WINDOW_S, "60 is typical")

    budget, src = _pick("overhead_budget", more.pop("overhead_budget", None), "SPAN_PROFILE_OVERHEAD_BUDGET",
                        DEFAULT_OVERHEAD_BUDGET)
    budget = _number("overhead_budget", budget, src, integer=False)
    if not 0 <= budget <= 1:
        raise ValueError("overhead_budget=%r (from %s) is out of range; it is the sampler's share of one core, "
                         "0 < x <= 1 (0.01 = 1%%), or 0 for no cap" % (budget, src))
    out["overhead_budget"] = budget

    for k in LABEL_SETTINGS:
        v = more.get(k)
        if v is not None and not isinstance(v, str):
            raise TypeError("%s must be a str, not %s" % (k, type(v).__name__))
        out[k] = v
    return out
