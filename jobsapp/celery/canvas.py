"""Celery's canvas on the engine: ``Signature`` (``s``, ``si``, ``signature``), ``chain``,
``group`` and ``chord``.

A signature is a dict, as Celery's (``task``, ``args``, ``kwargs``, ``options``, ``immutable``,
``subtask_type``), so it rides inside a job's payload. Nothing runs a canvas centrally: every id
is chosen when it is applied, and each task's job carries what follows it.

- ``chain(a, b, c)``: ``a`` is pushed with ``[b, c]``; when ``a`` succeeds its worker pushes ``b``
  with ``a``'s value prepended to its args (unless immutable) and ``[c]``, and so on. The chain's
  ``AsyncResult`` is ``c``'s; if a step fails, the later steps are marked failed with its error.
- ``group(a, b)``: each is pushed at once; a ``GroupResult`` gets their values in order.
- ``chord(group, callback)``: the header tasks carry the chord (id, their ids in order, the
  callback); the worker that stores the last header value pushes the callback with the list of
  values in header order. A header task failing for good marks the callback failed (``ChordError``).
- ``group | callback`` is a chord, ``chain(group, callback, ...)`` too (the rest of the chain
  follows the callback). Other nestings (a chord inside a group, a group in the middle of a
  chain) raise ``NotImplementedError`` when applied.
"""

from __future__ import annotations

import copy
import datetime as dt
import secrets
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from .options import check_options
from .result import AsyncResult, GroupResult

Returned = TypeVar("Returned", covariant=True)

#: Options a signature keeps and honours; anything else is checked by ``check_options``.
HONOURED_OPTIONS = ("task_id", "countdown", "eta", "expires", "queue", "headers", "ignore_result")


def new_id() -> str:
    """A task id in the jid format (24 lowercase hex)."""
    return secrets.token_hex(12)


def _eta(options: dict[str, Any]) -> Any:
    eta = options.get("eta")
    if isinstance(eta, str):
        return dt.datetime.fromisoformat(eta)
    return eta


class Signature(dict[str, Any], Generic[Returned]):
    """One task call, not yet applied: name, args, kwargs and options."""

    def __init__(
        self,
        task: Any = None,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        type: Any = None,
        subtask_type: str | None = None,
        immutable: bool = False,
        app: Any = None,
        **ex: Any,
    ) -> None:
        if isinstance(task, dict):  # a signature's dict (from a payload, or another signature)
            super().__init__(task)
            self.setdefault("options", {})
            return
        name = task if isinstance(task, str) or task is None else getattr(task, "name", None)
        merged = {**(options or {}), **ex}
        unknown = {key: value for key, value in merged.items() if key not in HONOURED_OPTIONS}
        if unknown:
            check_options(unknown, where="signature()")
        super().__init__(
            task=name,
            args=list(args or ()),
            kwargs=dict(kwargs or {}),
            options={key: value for key, value in merged.items() if key in HONOURED_OPTIONS},
            subtask_type=subtask_type,
            immutable=immutable,
        )

    # --- fields ------------------------------------------------------------------------

    @property
    def task(self) -> str:
        return str(self["task"])

    @property
    def args(self) -> list[Any]:
        return list(self.get("args") or [])

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.get("kwargs") or {})

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.get("options") or {})

    @property
    def immutable(self) -> bool:
        return bool(self.get("immutable"))

    @property
    def id(self) -> str | None:
        return self.options.get("task_id")

    def __repr__(self) -> str:
        marker = "" if not self.immutable else "!"
        arguments = ", ".join([*(repr(arg) for arg in self.args), *(f"{key}={value!r}" for key, value in self.kwargs.items())])
        return f"{self.task}{marker}({arguments})"

    # --- building ----------------------------------------------------------------------

    def clone(self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any) -> Signature[Returned]:
        """A copy with ``args`` prepended (unless immutable), ``kwargs`` and ``options`` merged."""
        copy: Signature[Returned] = Signature(dict(self))
        copy["args"] = list(self.args) if self.immutable or not args else [*args, *self.args]
        copy["kwargs"] = self.kwargs if self.immutable else {**self.kwargs, **(kwargs or {})}
        copy["options"] = {**self.options, **options}
        return copy

    def set(self, immutable: bool | None = None, **options: Any) -> Signature[Returned]:
        """Change options in place (Celery's ``sig.set(queue=...)``); returns the signature."""
        unknown = {key: value for key, value in options.items() if key not in HONOURED_OPTIONS}
        if unknown:
            check_options(unknown, where="Signature.set()")
        self["options"] = {**self.options, **{key: value for key, value in options.items() if key in HONOURED_OPTIONS}}
        if immutable is not None:
            self["immutable"] = immutable
        return self

    def freeze(self) -> str:
        """Give the signature its task id now (kept when applied); returns it."""
        options = self.options
        if not options.get("task_id"):
            options["task_id"] = new_id()
            self["options"] = options
        return str(options["task_id"])

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        return chain(self, other)

    # --- applying ----------------------------------------------------------------------

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> AsyncResult[Returned]:
        """Push the task with ``args`` prepended and ``options`` over the signature's."""
        if route_name is not None:
            check_options({"route_name": route_name}, where="Signature.apply_async()")
        clone = self.clone(args, kwargs, **options)
        task_id = clone.freeze()
        push_step(clone, [], rest=[])
        return AsyncResult(task_id, task_name=clone.task)

    def delay(self, *partial_args: Any, **partial_kwargs: Any) -> AsyncResult[Returned]:
        return self.apply_async(partial_args, partial_kwargs)

    def __call__(self, *partial_args: Any, **partial_kwargs: Any) -> Returned:
        """Run the task here and now (a plain call, as Celery's)."""
        from .task import lookup

        clone = self.clone(partial_args, partial_kwargs)
        return lookup(clone.task)(*clone.args, **clone.kwargs)


def signature(varies: Any, *args: Any, **kwargs: Any) -> Signature[Any]:
    """Celery's ``signature(name_or_sig_or_dict, args=..., kwargs=..., **options)``."""
    if isinstance(varies, Signature):
        return varies.clone()
    return Signature(varies, *args, **kwargs)


subtask = signature


def push_step(step: dict[str, Any], prepend: list[Any], *, rest: list[dict[str, Any]]) -> str:
    """Push one signature dict (a chain or chord dict too) with ``prepend`` before its args and
    ``rest`` to follow it; returns the pushed task's id. Used by workers for follow-ups."""
    from .task import lookup

    kind = step.get("subtask_type")
    if kind == "chain":
        steps = list(step["kwargs"]["tasks"])
        return push_step(steps[0], prepend, rest=[*steps[1:], *rest])
    if kind == "chord":
        if rest:
            body = dict(step["kwargs"]["body"])
            body_options = dict(body.get("options") or {})
            body = {"subtask_type": "chain", "kwargs": {"tasks": [body, *rest]}, "options": body_options}
            step = {**step, "kwargs": {**step["kwargs"], "body": body}}
        return _apply_chord(step["kwargs"]["header"], step["kwargs"]["body"], prepend)
    if kind == "group":
        raise NotImplementedError("a group inside a chain is only supported first, followed by a callback (a chord)")
    signature_step: Signature[Any] = Signature(dict(step))
    options = signature_step.options
    immutable = signature_step.immutable
    args = signature_step.args if immutable or not prepend else [*prepend, *signature_step.args]
    task = lookup(signature_step.task)
    return task._push(
        args,
        signature_step.kwargs,
        task_id=options.get("task_id"),
        countdown=options.get("countdown"),
        eta=_eta(options),
        expires=options.get("expires"),
        queue=options.get("queue"),
        headers=options.get("headers"),
        ignore_result=options.get("ignore_result"),
        chain=[dict(each) for each in rest],
    )


def _last_id(step: dict[str, Any]) -> str:
    """The id whose result is a step's outcome (a chain's last task, a chord's callback), frozen."""
    kind = step.get("subtask_type")
    if kind == "chain":
        return _last_id(step["kwargs"]["tasks"][-1])
    if kind == "chord":
        return _last_id(step["kwargs"]["body"])
    options = step.setdefault("options", {})
    if not options.get("task_id"):
        options["task_id"] = new_id()
    return str(options["task_id"])


def _freeze_all(step: dict[str, Any]) -> None:
    kind = step.get("subtask_type")
    if kind in ("chain", "group"):
        for each in step["kwargs"]["tasks"]:
            _freeze_all(each)
    elif kind == "chord":
        for each in step["kwargs"]["header"]:
            _freeze_all(each)
        _freeze_all(step["kwargs"]["body"])
    else:
        _last_id(step)


def _apply_chord(header: list[dict[str, Any]], body: dict[str, Any], prepend: list[Any]) -> str:
    for each in header:
        if each.get("subtask_type"):
            raise NotImplementedError("a chord's header must be plain task signatures")
    _freeze_all(body)
    body_id = _last_id(body)
    if not header:
        push_step(body, [[]], rest=[])
        return body_id
    frozen: list[Signature[Any]] = [Signature(dict(each)) for each in header]
    header_ids = [each.freeze() for each in frozen]
    chord_info = {"id": new_id(), "header": header_ids, "body": body}
    from .task import lookup

    for each in frozen:
        options = each.options
        args = each.args if each.immutable or not prepend else [*prepend, *each.args]
        lookup(each.task)._push(
            args,
            each.kwargs,
            task_id=options["task_id"],
            countdown=options.get("countdown"),
            eta=_eta(options),
            expires=options.get("expires"),
            queue=options.get("queue"),
            headers=options.get("headers"),
            chord=chord_info,
        )
    return body_id


def _flatten(tasks: tuple[Any, ...]) -> list[Signature[Any]]:
    if len(tasks) == 1 and not isinstance(tasks[0], dict) and isinstance(tasks[0], Iterable):
        return [each if isinstance(each, Signature) else Signature(dict(each)) for each in tasks[0]]
    return [each if isinstance(each, Signature) else Signature(dict(each)) for each in tasks]


class chain(Signature[Any]):
    """Tasks run one after another, each given the previous one's value first."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        steps = _flatten(tasks)
        # chain(group, callback, ...) is a chord followed by the rest (as Celery upgrades it)
        if len(steps) >= 2 and steps[0].get("subtask_type") == "group":
            steps = [chord(steps[0], steps[1]), *steps[2:]]
        super().__init__("celery.chain", (), {"tasks": [dict(each) for each in steps]}, subtask_type="chain", **options)

    @property
    def tasks(self) -> tuple[Signature[Any], ...]:
        return tuple(Signature(dict(each)) for each in self["kwargs"]["tasks"])

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        return chain(*self.tasks, other)

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> AsyncResult[Any]:
        steps = copy.deepcopy(list(self["kwargs"]["tasks"]))  # ids are chosen per application
        if not steps:
            raise ValueError("an empty chain has nothing to run")
        for step in steps:
            _freeze_all(step)
        last = _last_id(steps[-1])
        first = dict(steps[0])
        if kwargs or options:
            first = dict(Signature(first).clone((), kwargs, **options))
        push_step(first, list(args or ()), rest=steps[1:])
        return AsyncResult(last)

    def __call__(self, *args: Any, **kwargs: Any) -> AsyncResult[Any]:
        return self.apply_async(args, kwargs)


class group(Signature[Any]):
    """Tasks run in parallel; their values come back as a list in the group's order."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        steps = _flatten(tasks)
        super().__init__("celery.group", (), {"tasks": [dict(each) for each in steps]}, subtask_type="group", **options)

    @property
    def tasks(self) -> list[Signature[Any]]:
        return [Signature(dict(each)) for each in self["kwargs"]["tasks"]]

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        return chord(self, other)

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> GroupResult:
        members: list[AsyncResult[Any]] = []
        for each in self.tasks:
            if each.get("subtask_type"):
                raise NotImplementedError("a group of chains, groups or chords is not supported; use plain task signatures")
            clone = each.clone(args, kwargs, **options)
            task_id = clone.freeze()
            push_step(clone, [], rest=[])
            members.append(AsyncResult(task_id, task_name=clone.task))
        return GroupResult(new_id(), members)

    def __call__(self, *args: Any, **kwargs: Any) -> GroupResult:
        return self.apply_async(args, kwargs)


class chord(Signature[Any]):
    """A group whose values, in order, are given to a callback once every task has succeeded."""

    def __init__(self, header: Any, body: Any = None, **options: Any) -> None:
        if isinstance(header, dict) and header.get("subtask_type") == "group":
            tasks: list[Signature[Any]] = [Signature(dict(each)) for each in header["kwargs"]["tasks"]]
        else:
            tasks = _flatten((header,))
        super().__init__(
            "celery.chord",
            (),
            {"header": [dict(each) for each in tasks], "body": dict(body) if body is not None else None},
            subtask_type="chord",
            **options,
        )

    @property
    def tasks(self) -> list[Signature[Any]]:
        return [Signature(dict(each)) for each in self["kwargs"]["header"]]

    @property
    def body(self) -> Signature[Any] | None:
        body = self["kwargs"]["body"]
        return Signature(dict(body)) if body is not None else None

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        route_name: str | None = None,
        body: Any = None,
        **options: Any,
    ) -> AsyncResult[Any]:
        callback = body if body is not None else self["kwargs"]["body"]
        if callback is None:
            raise ValueError("a chord needs a callback: chord(header, callback) or chord(header)(callback)")
        callback = copy.deepcopy(dict(callback))  # ids are chosen per application
        body_id = _apply_chord(copy.deepcopy(list(self["kwargs"]["header"])), callback, list(args or ()))
        return AsyncResult(body_id)

    def __call__(self, body: Any = None, **options: Any) -> AsyncResult[Any]:
        return self.apply_async((), {}, body=body, **options)
