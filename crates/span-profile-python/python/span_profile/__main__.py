"""The ``span-profile`` command inside the Python package (ADR 0029): the wheel's
``span-profile`` script and ``python -m span_profile`` run the same Rust CLI, linked into
``span_profile._native``, so no Rust toolchain is needed to use it.

``python -m span_profile run [OPTIONS] app.py ARGS`` runs ``app.py`` with this interpreter (add
``--`` to give a whole command instead, as with ``span-profile run -- python app.py``)."""
import os
import signal
import sys


def _bootstrap_dir():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")


def main(argv=None, interpreter=None):
    """Runs the command on ``argv`` (default ``sys.argv[1:]``) and exits with its code.
    ``interpreter``: for ``run``, put this Python before a command that has no ``--``."""
    from . import _native

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        extra = ["--bootstrap", _bootstrap_dir()]
        if interpreter and "--" not in argv[1:]:
            extra += ["--python", interpreter]
        argv = ["run"] + extra + argv[1:]
    # Ctrl-C stops a long query as it would the native binary (Python's handler would only
    # set a flag that nothing checks while the CLI runs).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli_main(["span-profile"] + argv))


if __name__ == "__main__":
    main(interpreter=sys.executable)
