"""span_profile's ``sitecustomize``, first on ``PYTHONPATH`` under ``span-profile run``: starts
the agent before the application's code runs (ADR 0029), then runs the ``sitecustomize`` that
would have run without us (the user's or the distribution's), so it keeps working."""
import os
import sys


def _chain():
    """Imports the next ``sitecustomize`` on ``sys.path`` after this directory, as
    ``sitecustomize``."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    del sys.modules["sitecustomize"]
    try:
        import sitecustomize  # noqa: F401 - the user's own
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


def _start():
    try:
        from span_profile._bootstrap import autostart
    except Exception as e:  # noqa: BLE001 - never break the app
        sys.stderr.write("span_profile: not profiling: cannot import span_profile (%s: %s) in %s; pip install "
                         "span-profile into this environment\n" % (type(e).__name__, e, sys.executable))
        return
    autostart("span-profile run")


_start()
_chain()
