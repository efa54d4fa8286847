"""asyncio hooks. Task names for samples: while an agent runs, ``BaseEventLoop.create_task`` stores a
``TaskTag`` (the id of the task's folded name) in the new task's context, where the sampler
finds it next to the span slot. Default names (``Task-123``) fold to ``Task``, so a label gets
few distinct values; past ``MAX_NAMES`` names every new one is ``Task`` too.

Spans need no hook for tasks: each task runs in a copy of its creator's context, which carries
the span slot that the runtime-context hook keeps next to OpenTelemetry's current context.
``run_in_executor`` (unlike ``to_thread``) does not copy the context into the worker, so it
gets the submitter's span slot (only our ContextVar; the application's context is left alone).
"""
import functools
import re

MAX_NAMES = 256
DEFAULT_NAME = "Task"
_DEFAULT = re.compile(r"Task-\d+\Z")

_TAGGER = None  # name -> TaskTag of the running agent, or None
_ORIGINAL = None  # BaseEventLoop.create_task before install()
_TAG_VAR = None
_SLOT_VAR = None
_ORIGINAL_EXECUTOR = None  # BaseEventLoop.run_in_executor before install()


def _with_slot(slot, func, *args):
    token = _SLOT_VAR.set(slot)
    try:
        return func(*args)
    finally:
        _SLOT_VAR.reset(token)


def _run_in_executor(self, executor, func, *args):
    if _TAGGER is not None:
        slot = _SLOT_VAR.get()
        if slot is not None:
            func = functools.partial(_with_slot, slot, func)
    return _ORIGINAL_EXECUTOR(self, executor, func, *args)


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


def _create_task(self, coro, *args, **kwargs):
    tagger = _TAGGER
    if tagger is None:
        return _ORIGINAL(self, coro, *args, **kwargs)
    try:
        tag = tagger(kwargs.get("name"))
    except Exception:  # noqa: BLE001 - never break task creation
        return _ORIGINAL(self, coro, *args, **kwargs)
    context = kwargs.get("context")
    if context is not None:
        context.run(_TAG_VAR.set, tag)
        return _ORIGINAL(self, coro, *args, **kwargs)
    # The task copies the current context when it is created (eager tasks too): set the tag
    # for the copy, then restore ours.
    token = _TAG_VAR.set(tag)
    try:
        return _ORIGINAL(self, coro, *args, **kwargs)
    finally:
        _TAG_VAR.reset(token)


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
    import sys

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


def install(native, tag_var, slot_var):
    """Tags tasks created by asyncio's own event loops (and their subclasses) for `native`,
    and hands the span slot to ``run_in_executor`` workers."""
    global _TAGGER, _ORIGINAL, _TAG_VAR, _SLOT_VAR, _ORIGINAL_EXECUTOR
    import asyncio.base_events as base_events

    _TAG_VAR, _SLOT_VAR = tag_var, slot_var
    _TAGGER = _make_tagger(native)
    loop = base_events.BaseEventLoop
    if loop.create_task is not _create_task:
        _ORIGINAL = loop.create_task
        loop.create_task = _create_task
    if loop.run_in_executor is not _run_in_executor:
        _ORIGINAL_EXECUTOR = loop.run_in_executor
        loop.run_in_executor = _run_in_executor
    _patch_module_create_task(True)


def uninstall():
    """Stops tagging; restores ``create_task`` unless something wrapped it in turn."""
    global _TAGGER
    _TAGGER = None
    import sys

    base_events = sys.modules.get("asyncio.base_events")
    if base_events is None:
        return
    _patch_module_create_task(False)
    loop = base_events.BaseEventLoop
    if loop.create_task is _create_task:
        loop.create_task = _ORIGINAL
    if loop.run_in_executor is _run_in_executor:
        loop.run_in_executor = _ORIGINAL_EXECUTOR
