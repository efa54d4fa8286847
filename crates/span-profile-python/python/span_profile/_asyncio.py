"""asyncio hooks. Task names for samples: while an agent runs, the event loop's ``create_task``
stores a ``TaskTag`` (the id of the task's folded name) in the new task's context, where the
sampler finds it next to the span slot. Default names (``Task-123``) fold to ``Task``, so a
label gets few distinct values; past ``MAX_NAMES`` names every new one is ``Task`` too.

Two loop classes are hooked: asyncio's ``BaseEventLoop`` (every loop of the standard library
and their subclasses) and ``uvloop.Loop``, whose ``create_task`` is its own. Each is hooked
when it is imported, before or after the agent starts. The agent never imports asyncio itself:
a service without it would pay for asyncio's imports, ssl and its libraries among them (about
5.5 MB of resident memory on CPython 3.12,
`benches/overhead/rss_at_start.py`).

Spans need no hook for tasks: each task runs in a copy of its creator's context, which carries
OpenTelemetry's current context, and the sampler reads that in place (ADR 0011).
``run_in_executor`` (unlike ``to_thread``) does not copy the context into the worker, so the
worker is handed the submitter's span in our own span slot (only our ContextVar; the
application's context is left alone).
"""
import functools
import re
import sys

MAX_NAMES = 256
DEFAULT_NAME = "Task"
_DEFAULT = re.compile(r"Task-\d+\Z")

_TAGGER = None  # name -> TaskTag of the running agent, or None
_TAG_VAR = None
_SLOT_VAR = None
_CURRENT = None  # () -> the calling thread's ActiveSpan, or None
#: loop class -> {method name: (the class's own method or None if inherited, our wrapper)}.
_PATCHED = {}


def _with_slot(slot, func, *args):
    token = _SLOT_VAR.set(slot)
    try:
        return func(*args)
    finally:
        _SLOT_VAR.reset(token)


def _wrap_run_in_executor(original):
    def run_in_executor(self, executor, func, *args):
        current = _CURRENT
        if _TAGGER is not None and current is not None:
            slot = current()
            if slot is not None:
                func = functools.partial(_with_slot, slot, func)
        return original(self, executor, func, *args)

    return run_in_executor


def _make_tagger(native):
    tags = {}

    def tag_for(name):
        if name is None:
            name = DEFAULT_NAME
        elif not isinstance(name, str):
            name = str(name)
        if _DEFAULT.match(name):
            name = DEFAULT_NAME
        tag = tags.get(name)
        if tag is None:
            if len(tags) >= MAX_NAMES:
                name = DEFAULT_NAME
                tag = tags.get(name)
            if tag is None:
                tag = tags[name] = native.task_tag(name)
        return tag

    return tag_for


def _wrap_create_task(original):
    def create_task(self, coro, *args, **kwargs):
        tagger = _TAGGER
        if tagger is None:
            return original(self, coro, *args, **kwargs)
        try:
            tag = tagger(kwargs.get("name"))
        except Exception:  # noqa: BLE001 - never break task creation
            return original(self, coro, *args, **kwargs)
        context = kwargs.get("context")
        if context is not None:
            context.run(_TAG_VAR.set, tag)
            return original(self, coro, *args, **kwargs)
        # The task copies the current context when it is created (eager tasks too): set the
        # tag for the copy, then restore ours.
        token = _TAG_VAR.set(tag)
        try:
            return original(self, coro, *args, **kwargs)
        finally:
            _TAG_VAR.reset(token)

    return create_task


_WRAPPERS = {"create_task": _wrap_create_task, "run_in_executor": _wrap_run_in_executor}


def _patch(cls):
    """Replaces ``create_task`` and ``run_in_executor`` of the loop class `cls` (once)."""
    if cls in _PATCHED:
        return
    patched = {}
    for name, wrap in _WRAPPERS.items():
        own = cls.__dict__.get(name)  # None when inherited (uvloop.Loop's come from Cython)
        original = own if own is not None else getattr(cls, name)
        wrapper = wrap(original)
        functools.update_wrapper(wrapper, original)
        setattr(cls, name, wrapper)
        patched[name] = (own, wrapper)
    _PATCHED[cls] = patched


def _unpatch_all():
    for cls, patched in list(_PATCHED.items()):
        for name, (own, wrapper) in patched.items():
            if cls.__dict__.get(name) is wrapper:
                if own is None:
                    delattr(cls, name)
                else:
                    setattr(cls, name, own)
            # Else something wrapped ours in turn: it stays, and ours delegates (no tagger).
    _PATCHED.clear()


def _patch_uvloop(module):
    loop = getattr(module, "Loop", None)
    if isinstance(loop, type) and hasattr(loop, "create_task"):
        try:
            _patch(loop)
        except (TypeError, AttributeError):  # a uvloop whose Loop is not a heap type
            pass


def _patch_asyncio(module=None):
    """Hooks asyncio's loops and, before 3.13, ``asyncio.create_task``."""
    import asyncio.base_events as base_events

    _patch(base_events.BaseEventLoop)
    _patch_module_create_task(True)


class _LoaderThenPatch:
    """Runs the real loader of a watched module, then hooks it with `patch`; everything else
    is the real loader's."""

    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        if _TAGGER is not None:
            self._patch(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


#: The modules hooked when they are imported after the agent starts, and how. ``asyncio`` is
#: hooked once its package has run, so ``asyncio.create_task`` (re-exported from ``tasks``)
#: is there to replace.
_WATCHED = {"asyncio": _patch_asyncio, "uvloop": _patch_uvloop}


class _ImportWatcher:
    """A ``sys.meta_path`` finder that finds nothing itself: when a module of ``_WATCHED`` is
    imported, it asks the finders after it and wraps the loader they return."""

    def find_spec(self, fullname, path=None, target=None):
        patch = _WATCHED.get(fullname)
        if patch is None or _TAGGER is None:
            return None
        finders = sys.meta_path
        after = finders[finders.index(self) + 1:] if self in finders else finders
        for finder in after:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderThenPatch(spec.loader, patch)
                return spec
        return None


_WATCHER = _ImportWatcher()


def _tasks_create_task(coro, *, name=None, **kwargs):
    """``asyncio.create_task`` of 3.9-3.12, except that the name goes to ``loop.create_task``
    (which takes it since 3.8) instead of being set after the task factory ran, so the task's
    tag can carry it."""
    import asyncio.events

    loop = asyncio.events.get_running_loop()
    return loop.create_task(coro, name=name, **kwargs)


def _patch_module_create_task(install):
    """Before 3.13, ``asyncio.create_task`` sets the name after creating the task; route it
    through ``loop.create_task`` instead while an agent runs."""
    global _ORIGINAL_MODULE_CREATE
    import asyncio
    import asyncio.tasks as tasks

    if sys.version_info >= (3, 13):
        return
    if install:
        if tasks.create_task is not _tasks_create_task:
            _ORIGINAL_MODULE_CREATE = tasks.create_task
            tasks.create_task = asyncio.create_task = _tasks_create_task
    elif _ORIGINAL_MODULE_CREATE is not None:
        if tasks.create_task is _tasks_create_task:
            tasks.create_task = _ORIGINAL_MODULE_CREATE
        if asyncio.create_task is _tasks_create_task:
            asyncio.create_task = _ORIGINAL_MODULE_CREATE


_ORIGINAL_MODULE_CREATE = None


def install(native, tag_var, slot_var, current_active):
    """Tags tasks created by asyncio's own event loops (and their subclasses) and by uvloop's
    for `native`, and hands the submitter's span (``current_active(native)``) to
    ``run_in_executor`` workers in `slot_var`."""
    global _TAGGER, _TAG_VAR, _SLOT_VAR, _CURRENT
    _TAG_VAR, _SLOT_VAR = tag_var, slot_var
    _CURRENT = functools.partial(current_active, native)
    _TAGGER = _make_tagger(native)
    for name, patch in _WATCHED.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    if _WATCHER not in sys.meta_path:
        sys.meta_path.insert(0, _WATCHER)


def uninstall():
    """Stops tagging; restores the loops' methods unless something wrapped them in turn."""
    global _TAGGER, _CURRENT
    _TAGGER = None
    _CURRENT = None
    if _WATCHER in sys.meta_path:
        sys.meta_path.remove(_WATCHER)
    if "asyncio.base_events" not in sys.modules:
        return
    _patch_module_create_task(False)
    _unpatch_all()
