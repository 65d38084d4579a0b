"""``Task.replace`` and ``Task.add_to_chord``: a running task hands its place to other tasks.

``replace(sig)``, as Celery 5 does it: ``sig`` (a task, chain, group or chord) is pushed from
the running task with everything that was to follow the task: the rest of its chain (after
``sig``'s last task), its ``link`` callbacks and ``link_error`` errbacks, and its place in a
chord (``sig``'s last task records the chord part under the replaced task's id). A group is
given a body that gathers its values (``celery.accumulate``), so it has one last task, as in
Celery. The replaced task's result record points at ``sig``'s last task
(``REPLACED_FIELD``): ``AsyncResult`` of the replaced id follows it, so ``get()`` returns
``sig``'s value. Then ``Ignore`` ends the run: nothing else is recorded or pushed for it.
Before it is pushed, ``sig`` is stamped with the replaced task's stamps and handed to
``Task.on_replace`` (which may stamp it more, as Celery's ``on_replace`` hook does); its default
pushes it (``send_replacement``).
``request.replaced_task_nesting`` is one higher in every task of ``sig``. Run eagerly
(``apply``), ``sig`` is applied in the caller's thread and its value returned, as Celery's.

``add_to_chord(sig)``: ``sig`` joins the header of the chord the running task belongs to; the
chord's callback then waits for it too and gets its value after the others'.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import result_writer
from .canvas import (
    ACCUMULATE,
    CHAIN_KEY,
    CHORD_KEY,
    CHORD_OPTION,
    ERRBACK_KEY,
    LINK_KEY,
    RESULT_EXPIRES_SECONDS,
    Signature,
    _freeze_all,
    _result_for,
    chain,
    chord,
    final_task,
    from_dict,
    push_step,
    signature,
    tasks_of,
)
from .exceptions import Ignore, ImproperlyConfigured
from .result import REPLACED_FIELD
from .stamping import StampingVisitor


def replace(task: Any, request: Any, sig: Any) -> Any:
    replacement: Signature[Any] = sig if isinstance(sig, Signature) else signature(sig)
    if isinstance(replacement, chain) and not replacement.tasks:
        raise ImproperlyConfigured("Cannot replace with an empty chain")
    if request.called_directly:
        raise RuntimeError(f"{task.name}.replace() is called from the task a worker runs (or apply()), not from a direct call")
    if request.is_eager:
        _carry_stamps(replacement, request)
        return task.on_replace(replacement)
    item = request.item if request.item is not None else {}
    replacement = copy.deepcopy(replacement)
    if replacement.subtask_type == "group":  # a group gets a last task: its values, gathered
        replacement = chord(replacement, Signature(ACCUMULATE, (), {"index": 0}))
    elif replacement.subtask_type == "chain" and replacement["kwargs"]["tasks"][-1].get("subtask_type") == "group":
        steps = list(replacement["kwargs"]["tasks"])  # so does a chain's last group
        steps[-1] = dict(chord(from_dict(steps[-1]), Signature(ACCUMULATE, (), {"index": 0})))
        replacement["kwargs"] = {**replacement["kwargs"], "tasks": steps}
    for callback in item.get(LINK_KEY) or []:
        replacement.link(from_dict(dict(callback)))
    for errback in item.get(ERRBACK_KEY) or []:
        replacement.link_error(from_dict(dict(errback)))
    step = copy.deepcopy(dict(replacement))
    nesting = int(request.replaced_task_nesting or 0) + 1
    for each in tasks_of(step):
        each.setdefault("options", {})["replaced_task_nesting"] = nesting
    _freeze_all(step)
    final = final_task(step)
    chord_of_task = item.get(CHORD_KEY)
    if isinstance(chord_of_task, dict):
        if final is None:
            raise NotImplementedError("replacing a chord's header task by a group ending in a group is not supported")
        final.setdefault("options", {})[CHORD_OPTION] = {**chord_of_task, "part": request.id}
    prepared = from_dict(step)
    _carry_stamps(prepared, request)
    return task.on_replace(prepared)


class _CarriedStamps(StampingVisitor):
    """Stamps every task of a replacement with the replaced task's stamps."""

    def __init__(self, stamps: dict[str, Any]) -> None:
        self.stamps = stamps

    def on_signature(self, sig: Any, **headers: Any) -> dict[str, Any]:
        return copy.deepcopy(self.stamps)


def _carry_stamps(replacement: Signature[Any], request: Any) -> None:
    """The replacement carries the replaced task's stamps (``Task.on_replace`` may stamp more)."""
    names = list(getattr(request, "stamped_headers", None) or [])
    if names:
        stamps = getattr(request, "stamps", None) or {}
        replacement.stamp(_CarriedStamps({name: stamps.get(name) for name in names}))


def send_replacement(request: Any, replacement: Signature[Any]) -> Any:
    """``Task.on_replace``'s default: push the prepared replacement (eager: apply it here and return
    its value), point the replaced task's result at it, and end the run with ``Ignore``."""
    if request.is_eager:
        return replacement.apply().get()
    item = request.item if request.item is not None else {}
    step = dict(replacement)
    _freeze_all(step)
    final_id = _result_for(step, None).id  # type: ignore[attr-defined]
    retain = request.retain_seconds or RESULT_EXPIRES_SECONDS
    result_writer.write_fields(str(request.id), {REPLACED_FIELD: str(final_id)}, retain_seconds=retain, wait=True)
    rest = item.get(CHAIN_KEY)
    push_step(step, [], rest=list(rest) if isinstance(rest, list) else [])
    for key in (CHAIN_KEY, CHORD_KEY, LINK_KEY, ERRBACK_KEY):  # handed over: nothing follows this run
        item.pop(key, None)
    raise Ignore("Replaced by new task")


def add_to_chord(task: Any, request: Any, sig: Any, *, lazy: bool = False) -> Any:
    """``sig`` joins the header of the chord this running task is a part of: the callback also
    waits for it, and gets its value after the others'. Applied now, or returned frozen (``lazy``)."""
    from .follow_up import add_chord_part

    chord_of_task = (request.item or {}).get(CHORD_KEY) if request.item is not None else None
    if not isinstance(chord_of_task, dict):
        raise ValueError("Current task is not member of any chord")
    added: Signature[Any] = copy.deepcopy(sig if isinstance(sig, Signature) else signature(sig))
    step = dict(added)
    _freeze_all(step)
    final = final_task(step)
    if final is None:
        raise NotImplementedError("add_to_chord() takes a signature ending in one task (a task, a chain, a chord), not a group")
    chord_info = {key: value for key, value in chord_of_task.items() if key != "part"}
    final.setdefault("options", {})[CHORD_OPTION] = chord_info
    add_chord_part(str(chord_info["id"]), str(final["options"]["task_id"]))
    if lazy:
        return from_dict(step)
    result = _result_for(step, None)
    push_step(step, [], rest=[])
    return result
