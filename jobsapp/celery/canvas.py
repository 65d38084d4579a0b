"""Celery's canvas on the engine: ``Signature`` (``s``, ``si``, ``signature``), ``chain``,
``group``, ``chord``, ``xmap`` / ``xstarmap`` (``task.map`` / ``task.starmap``) and ``chunks``.

A signature is a dict, as Celery's (``task``, ``args``, ``kwargs``, ``options``, ``immutable``,
``subtask_type``), so it rides inside a job's payload. Nothing runs a canvas centrally: every id
is chosen (frozen) when it is applied, and each task's job carries what follows it.

- ``chain(a, b, c)``: ``a`` is pushed with ``[b, c]``; when ``a`` succeeds its worker pushes ``b``
  with ``a``'s value prepended to its args (unless immutable) and ``[c]``, and so on. The chain's
  result is ``c``'s, its ``parent`` ``b``'s, and so on up. A step that fails for good marks the
  later steps failed with its error.
- ``group(a, b)``: each is pushed at once (with the partial args given to all); a ``GroupResult``
  gets their values in order. A one-task group in a chain is that task (Celery 5's unrolling).
- ``chord(group, callback)``: the header tasks carry the chord (id, their ids in order, the
  callback); the worker that records the last header value pushes, in the same Lua script,
  ``celery.chord_unlock``, which gives the values in header order to the callback. A group
  followed by anything in a chain is upgraded to a chord, as Celery does; a group that ends a
  chain gets the previous value in each of its tasks.
- ``link`` callbacks each get the task's value; ``link_error`` errbacks run when it fails for
  good, as Celery 5 calls them (``jobsapp.celery.follow_up``).

A chord's header part may be a task, a chain or a chord (its value is its final task's, which
carries the chord); a group in a header is unrolled, each of its tasks a part, and a part that
ends in a group (a chain's last step, a chord's callback) gives the group's values as one list
(``celery.accumulate``). Tasks may join a chord after it was applied (``add_to_chord``, a
generator header read as the chord is applied): chord_part.lua counts them. Not supported,
refused with ``NotImplementedError`` when applied: ``chunks`` in a chord's header.

``stamp`` labels a signature and, for a group, chain or chord, every task in it, as Celery 5.3's
stamping does (the merge rules and ``StampingVisitor`` are ``jobsapp.celery.stamping``'s); a
task's stamps ride in its payload (``stamping.STAMPS_KEY``).
"""

from __future__ import annotations

import copy
import datetime as dt
import secrets
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from .. import client, registry
from ..payload import new_jid, now
from . import current, lineage, stamping
from .options import check_options
from .result import AsyncResult, GroupResult, ResultBase
from .stamping import StampingVisitor
from .values import RESULT_EXPIRES_SECONDS, _jsonable

Returned = TypeVar("Returned", covariant=True)

#: Options a signature keeps and honours; anything else is checked by ``check_options``.
HONOURED_OPTIONS = (
    "task_id",
    "group_id",
    "countdown",
    "eta",
    "expires",
    "queue",
    "headers",
    "ignore_result",
    "link",
    "link_error",
    "soft_time_limit",
    "time_limit",
    "priority",  # Celery's 0..9, lower first (jobsapp.priority.from_celery)
    # the request's lineage and message properties (lineage.py)
    "root_id",
    "parent_id",
    "replaced_task_nesting",
    "group_index",
    "app_id",
    "correlation_id",
    "reply_to",
    "content_type",
    "content_encoding",
)

#: Payload extras (the worker side reads them in ``jobsapp.celery.follow_up``).
CHAIN_KEY = "celery_chain"  # the steps to push after this one succeeds (signature dicts)
CHORD_KEY = "celery_chord"  # {"id", "header": [jids], "body": signature dict}
LINK_KEY = "celery_link"  # callbacks, each pushed with this task's value (signature dicts)
ERRBACK_KEY = "celery_link_error"  # errbacks, called when this task fails for good (signature dicts)
#: A signature option (not a Celery one): the chord whose header part this task ends (a chain's last task).
CHORD_OPTION = "chord"
#: A signature option (not a Celery one): the run of a chord (or of a group a chain turns into one) being applied.
RUN_OPTION = "chord_run"
EXPIRES_KEY = "celery_expires_at"  # epoch seconds after which the task is revoked unrun
HEADERS_KEY = "celery_headers"

#: The engine's retry limit for Celery jobs: the task itself enforces ``max_retries``.
ENGINE_RETRY_LIMIT = 10_000


def new_id() -> str:
    """A task id in the jid format (24 lowercase hex)."""
    return secrets.token_hex(12)


def _eta(options: dict[str, Any]) -> Any:
    eta = options.get("eta")
    if isinstance(eta, str):
        return dt.datetime.fromisoformat(eta)
    return eta


def _epoch(when: float | dt.datetime) -> float:
    if isinstance(when, dt.datetime):
        return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
    return float(when)


def reprcall(name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    """``name(1, 2, key=3)``, as kombu prints a call."""
    arguments = [*(repr(arg) for arg in args), *(f"{key}={value!r}" for key, value in (kwargs or {}).items())]
    return f"{name}({', '.join(arguments)})"


def remove_repeating_from_task(task_name: str, text: str) -> str:
    """Celery's shortening: the task's module prefix is kept on its first occurrence only."""
    module = str(task_name).rpartition(".")[0] + "."
    index = text.find(module)
    if index < 0:
        return text
    return text[: index + len(module)] + text[index + len(module) :].replace(module, "")


def _list_option(value: Any) -> list[dict[str, Any]]:
    """A ``link`` / ``link_error`` option (one signature, a list of them, or None) as a list of dicts."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [dict(value)]
    return [dict(each) for each in value]


def _known_options(options: dict[str, Any], *, where: str, stamped: Sequence[str] = ()) -> dict[str, Any]:
    """The options a signature keeps: Celery's honoured ones and its stamps (``stamped_headers``
    and each header it or ``stamped`` names); ``check_options`` judges the others."""
    allowed = {*HONOURED_OPTIONS, *stamped, *stamping.immutable_options(options)}
    unknown = {key: value for key, value in options.items() if key not in allowed}
    if unknown:
        check_options(unknown, where=where)
    return {key: value for key, value in options.items() if key in allowed}


def _merged_options(own: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``own`` updated by ``given``, except its stamps: a stamped header keeps its value (Celery's
    immutable options)."""
    immutable = stamping.immutable_options(own)
    return {**own, **{key: value for key, value in given.items() if key not in immutable or key not in own}}


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
        kept = _known_options({**(options or {}), **ex}, where="signature()")
        for name_of_list in ("link", "link_error"):
            if name_of_list in kept:
                kept[name_of_list] = _list_option(kept[name_of_list])
        super().__init__(
            task=name,
            args=list(args or ()),
            kwargs=dict(kwargs or {}),
            options=kept,
            subtask_type=subtask_type,
            immutable=immutable,
        )

    # --- fields ------------------------------------------------------------------------

    @property
    def task(self) -> str:
        return str(self["task"])

    name = task

    @property
    def args(self) -> tuple[Any, ...]:
        return tuple(self.get("args") or ())

    @args.setter
    def args(self, value: Sequence[Any]) -> None:
        self["args"] = list(value)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.get("kwargs") or {})

    @kwargs.setter
    def kwargs(self, value: dict[str, Any]) -> None:
        self["kwargs"] = dict(value)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.get("options") or {})

    @options.setter
    def options(self, value: dict[str, Any]) -> None:
        self["options"] = dict(value)

    @classmethod
    def from_dict(cls, d: dict[str, Any], app: Any = None) -> Signature[Any]:
        """The signature object of a signature dict (one passed as a task argument comes back as a
        dict), of the class its ``subtask_type`` names, nested canvases included."""
        return _signature_from_dict(d)

    @property
    def immutable(self) -> bool:
        return bool(self.get("immutable"))

    @property
    def subtask_type(self) -> str | None:
        return self.get("subtask_type")

    @property
    def id(self) -> str | None:
        return self.options.get("task_id")

    def __repr__(self) -> str:
        return reprcall(self.task, self.args, self.kwargs)

    def reprcall(self, *args: Any, **kwargs: Any) -> str:
        """The call as it would be made with ``args`` prepended and ``kwargs`` merged."""
        if self.immutable:
            return reprcall(self.task, self.args, self.kwargs)
        return reprcall(self.task, (*args, *self.args), {**self.kwargs, **kwargs})

    # --- building ----------------------------------------------------------------------

    def clone(self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any) -> Signature[Returned]:
        """A copy with ``args`` prepended (unless immutable), ``kwargs`` and ``options`` merged."""
        copied = from_dict(copy.deepcopy(dict(self)))
        copied["args"] = list(self.args) if self.immutable or not args else [*args, *self.args]
        copied["kwargs"] = self.kwargs if self.immutable else {**self.kwargs, **(kwargs or {})}
        copied["options"] = _merged_options(copy.deepcopy(self.options), options)
        return copied

    def set(self, immutable: bool | None = None, **options: Any) -> Signature[Returned]:
        """Change options in place (Celery's ``sig.set(queue=...)``, which may change a stamp too);
        returns the signature."""
        known = _known_options(options, where="Signature.set()", stamped=stamping.stamped_names(self.options))
        self["options"] = {**self.options, **known}
        if immutable is not None:
            self["immutable"] = immutable
        return self

    def _append_option(self, name: str, other: Any) -> None:
        options = self.options
        options[name] = [*_list_option(options.get(name)), dict(other)]
        self["options"] = options

    def link(self, callback: Signature[Any]) -> Signature[Any]:
        """Apply ``callback`` with this task's value when it succeeds; returns the callback."""
        self._append_option("link", callback)
        return callback

    def link_error(self, errback: Signature[Any]) -> Signature[Any]:
        """Call ``errback`` when this task fails for good (as Celery 5 does); returns the errback."""
        self._append_option("link_error", errback)
        return errback

    def on_error(self, errback: Signature[Any]) -> Signature[Returned]:
        """``link_error`` that returns this signature, for chaining."""
        self.link_error(errback)
        return self

    def freeze(self, _id: str | None = None, group_id: str | None = None, **options: Any) -> AsyncResult[Returned]:
        """Give the signature its ids now (kept when applied); returns its result."""
        if _id is not None and not self.id:
            self.set(task_id=_id)
        _freeze_all(self)
        return _result_for(self, None)  # type: ignore[return-value]  # a task's result is an AsyncResult

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        return chain(self, other)

    # --- stamping (Celery 5.3's, jobsapp.celery.stamping) ---------------------------------

    def _stamp_headers(
        self, visitor_headers: dict[str, Any] | None = None, append_stamps: bool = False, self_headers: bool = True, **headers: Any
    ) -> dict[str, Any]:
        """The stamps this node gets: ``headers``, the visitor's, and (``self_headers``) its own."""
        return stamping.stamp_headers(self.options, visitor_headers, headers, append_stamps=append_stamps, self_headers=self_headers)

    def _set_stamps(self, stamps: dict[str, Any]) -> None:
        self["options"] = {**self.options, **stamps}

    def stamp(self, visitor: StampingVisitor | None = None, append_stamps: bool = False, **headers: Any) -> Signature[Returned]:
        """Stamp ``headers`` and the visitor's ``on_signature`` headers onto this task (each an
        option, listed in ``options["stamped_headers"]``) and its callbacks and errbacks; a stamp
        given again is replaced, or with ``append_stamps`` both values are kept in a list."""
        self.stamp_links(visitor, append_stamps, **headers)
        visitor_headers = None if visitor is None else (visitor.on_signature(self, **headers) or {})
        self._set_stamps(self._stamp_headers(visitor_headers, append_stamps, **headers))
        return self

    def stamp_links(self, visitor: StampingVisitor | None, append_stamps: bool = False, **headers: Any) -> None:
        """Stamp this task's ``link`` callbacks (``on_callback``) and ``link_error`` errbacks
        (``on_errback``), a signature or a plain dict each, with ``headers`` and the visitor's,
        not with this task's own stamps."""
        options = self.options
        for name, hook in (("link", "on_callback"), ("link_error", "on_errback")):
            if not options.get(name):
                continue
            linked = [from_dict(each) for each in _list_option(options[name])]
            given = copy.deepcopy(headers)
            for each in linked:
                visitor_headers = None if visitor is None else (getattr(visitor, hook)(each, **given) or {})
                given = self._stamp_headers(visitor_headers, append_stamps, self_headers=False, **given)
                each.stamp(visitor, append_stamps, **given)
            options[name] = [dict(each) for each in linked]
        self["options"] = options

    def __invert__(self) -> Returned:
        """``sig.apply_async().get()`` (a shell shortcut, as Celery's)."""
        return self.apply_async().get()

    def __deepcopy__(self, memo: dict[int, Any]) -> Signature[Returned]:
        copied = from_dict({key: copy.deepcopy(value, memo) for key, value in self.items()})
        return copied

    # --- applying ----------------------------------------------------------------------

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> AsyncResult[Returned]:
        """Push the task with ``args`` prepended and ``options`` over the signature's."""
        if route_name is not None:
            check_options({"route_name": route_name}, where="Signature.apply_async()")
        options = _known_options(options, where="Signature.apply_async()", stamped=stamping.stamped_names(self.options))
        for name_of_list in ("link", "link_error"):
            if name_of_list in options:
                options[name_of_list] = [*_list_option(self.options.get(name_of_list)), *_list_option(options[name_of_list])]
        clone = self.clone(args, kwargs, **options)
        if always_eager():
            return apply_eagerly(clone, [])
        _freeze_all(clone)
        result = _result_for(clone, None)
        push_step(clone, [], rest=[])
        return result  # type: ignore[return-value]  # a task's result is an AsyncResult

    def apply(self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any) -> Any:
        """Run here and now, in this thread (Celery's eager ``apply``): an ``EagerResult`` (a
        ``GroupResult`` of them for a group; a chain's is its last task's, ``parent`` walking back)."""
        if self.subtask_type:  # a chain, group or chord: partial args go to its first tasks
            return apply_eagerly(copy.deepcopy(dict(self)), list(args or ()))
        return apply_eagerly(self.clone(args, kwargs, **options), [])

    def delay(self, *partial_args: Any, **partial_kwargs: Any) -> AsyncResult[Returned]:
        return self.apply_async(partial_args, partial_kwargs)

    def __call__(self, *partial_args: Any, **partial_kwargs: Any) -> Returned:
        """Run the task here and now (a plain call, as Celery's)."""
        clone = self.clone(partial_args, partial_kwargs)
        return lookup_task(clone.task)(*clone.args, **clone.kwargs)


class NotRegistered(KeyError):
    """A signature names a task this process has not defined: nothing is pushed."""


def lookup_task(name: str) -> Any:
    """The Celery-style task defined under ``name`` in this process (its job class carries it);
    ``NotRegistered`` if none."""
    job_class = registry.lookup(name) if registry.is_registered(name) else None
    task = getattr(job_class, "task", None)
    if task is None:
        raise NotRegistered(f"no Celery-style task named {name!r} is defined in this process")
    return task


def from_dict(data: dict[str, Any]) -> Signature[Any]:
    """The signature object of a signature dict, of the class its ``subtask_type`` names."""
    kind = data.get("subtask_type")
    cls: type[Signature[Any]] = _TYPES.get(kind, Signature) if isinstance(kind, str) else Signature
    made = cls.__new__(cls)
    dict.__init__(made, data)
    made.setdefault("options", {})
    return made


_signature_from_dict = from_dict


def signature(varies: Any, *args: Any, **kwargs: Any) -> Signature[Any]:
    """Celery's ``signature(name_or_sig_or_dict, args=..., kwargs=..., **options)``."""
    if isinstance(varies, Signature):
        return varies.clone()
    if isinstance(varies, dict):
        return from_dict(copy.deepcopy(varies))
    return Signature(varies, *args, **kwargs)


subtask = signature


def maybe_signature(varies: Any, *args: Any, **kwargs: Any) -> Signature[Any] | None:
    """``signature(varies)``, or None for None (Celery's)."""
    return None if varies is None else signature(varies, *args, **kwargs)


# --- ids and results ------------------------------------------------------------------------


def _freeze_all(step: dict[str, Any], _seen: set[int] | None = None) -> None:
    """Give every task of a step its id (in place), and every group its group id. A signature
    repeated in a canvas (``group((sig,) * 3)``: its copies share one options dict) gets an id per
    place it holds: a shared options dict is copied, without the ids the first place took."""
    seen: set[int] = set() if _seen is None else _seen
    kind = step.get("subtask_type")
    options = step.setdefault("options", {})
    if id(options) in seen:
        options = step["options"] = {key: value for key, value in options.items() if key not in ("task_id", "group_id", "chunk_ids")}
    seen.add(id(options))
    if kind in ("chain", "group"):
        if kind == "group" and not options.get("group_id"):
            options["group_id"] = new_id()
        for each in step["kwargs"]["tasks"]:
            _freeze_all(each, seen)
    elif kind == "chord":
        if not options.get("group_id"):
            options["group_id"] = new_id()
        for each in step["kwargs"]["header"]:
            _freeze_all(each, seen)
        if step["kwargs"]["body"] is not None:
            _freeze_all(step["kwargs"]["body"], seen)
    elif kind == "chunks":
        if not options.get("group_id"):
            options["group_id"] = new_id()
        ids = options.get("chunk_ids")
        if not ids:
            options["chunk_ids"] = [new_id() for _ in _chunk_args(step)]
    else:
        if not options.get("task_id"):
            options["task_id"] = new_id()
        if options.get("link"):
            options["link"] = _list_option(options["link"])
            for each in options["link"]:
                _freeze_all(each, seen)


def _result_for(step: dict[str, Any], parent: ResultBase | None) -> ResultBase:
    """The result handle of a frozen step, its ``parent`` set (a chain's previous step)."""
    kind = step.get("subtask_type")
    options = step.get("options") or {}
    if kind == "chain":
        result = parent
        for each in step["kwargs"]["tasks"]:
            result = _result_for(each, result)
        if result is None:
            raise ValueError("an empty chain has nothing to run")
        return result
    if kind == "group":
        members: list[Any] = [_result_for(each, None) for each in step["kwargs"]["tasks"]]
        return GroupResult(options["group_id"], members, parent=parent)
    if kind == "chord":
        header_results: list[Any] = [_result_for(each, None) for each in header_parts(step["kwargs"]["header"])]
        header = GroupResult(options["group_id"], header_results, parent=parent)
        return _result_for(step["kwargs"]["body"], header)
    if kind == "chunks":
        return GroupResult(options["group_id"], [AsyncResult(each) for each in options["chunk_ids"]], parent=parent)
    task_result: AsyncResult[Any] = AsyncResult(options["task_id"], task_name=step.get("task"), parent=parent)
    task_result._children = [_result_for(each, None) for each in _list_option(options.get("link"))]
    task_result.ignored = _ignores_result(step)
    return task_result


def _ignores_result(step: dict[str, Any]) -> bool:
    """Whether a task's result is not stored (``get()`` then returns None at once, as Celery's)."""
    ignored = (step.get("options") or {}).get("ignore_result")
    if ignored is None:
        try:
            ignored = getattr(lookup_task(str(step.get("task"))), "ignore_result", False)
        except NotRegistered:  # not defined here: its result is stored
            ignored = False
    return bool(ignored)


def result_ids(step: dict[str, Any]) -> list[str]:
    """The task ids whose results stand for a step (every task it would run)."""
    kind = step.get("subtask_type")
    options = step.get("options") or {}
    if kind in ("chain", "group"):
        return [each_id for each in step["kwargs"]["tasks"] for each_id in result_ids(each)]
    if kind == "chord":
        body = step["kwargs"]["body"]
        return [each_id for each in step["kwargs"]["header"] for each_id in result_ids(each)] + (result_ids(body) if body else [])
    if kind == "chunks":
        return list(options.get("chunk_ids") or [])
    return [options["task_id"]] if options.get("task_id") else []


# --- pushing ------------------------------------------------------------------------------


def push_step(step: dict[str, Any], prepend: Sequence[Any], *, rest: Sequence[dict[str, Any]]) -> None:
    """Push one frozen signature dict (of any kind) with ``prepend`` before its args and ``rest``
    to follow it. Used by producers and by workers for follow-ups."""
    kind = step.get("subtask_type")
    rest = list(rest)
    if kind == "chain":
        steps = list(step["kwargs"]["tasks"])
        if not steps:
            raise ValueError("an empty chain has nothing to run")
        push_step(steps[0], prepend, rest=[*steps[1:], *rest])
        return
    if kind == "group":
        members = list(step["kwargs"]["tasks"])
        group_errbacks = _list_option((step.get("options") or {}).get("link_error"))
        if group_errbacks:  # a group's own errbacks are each of its tasks', as Celery applies them
            linked = [from_dict(dict(each)) for each in members]
            for member in linked:
                for errback in group_errbacks:
                    member.link_error(from_dict(copy.deepcopy(errback)))
            members = [dict(each) for each in linked]
        if rest:  # a group followed by more: a chord whose callback is the rest (as Celery upgrades it)
            push_step(_chord_dict(members, _chain_dict(rest), step.get("options") or {}), prepend, rest=[])
            return
        for each in members:
            push_step(each, prepend, rest=[])
        return
    if kind == "chord":
        body = step["kwargs"]["body"]
        if rest:
            body = _chain_dict([body, *rest])
        own = step.get("options") or {}
        delivery = {name: own[name] for name in ("countdown", "eta", "expires") if own.get(name) is not None}
        for each in step["kwargs"]["header"] if delivery else []:  # a chord's countdown delays its header (Celery #7851)
            _merged_into_header(each, {}, delivery)
        _apply_chord(list(step["kwargs"]["header"]), body, list(prepend), run=(step.get("options") or {}).get(RUN_OPTION))
        return
    if kind == "chunks":
        for chunk_id, arguments in zip(step["options"]["chunk_ids"], _chunk_args(step), strict=True):
            push_step(xstarmap(step["kwargs"]["task"], arguments).set(task_id=chunk_id), [], rest=[])
        if rest:
            raise NotImplementedError("chunks followed by more steps in a chain is not supported")
        return
    _push_task(step, prepend, rest=rest)


def _push_task(step: dict[str, Any], prepend: Sequence[Any], *, rest: Sequence[dict[str, Any]], chord: dict[str, Any] | None = None) -> str:
    """Push one task signature; a task this process does not define is pushed by name (the
    workers that define it run it; the others file it as an unknown class)."""
    signature_step = from_dict(dict(step))
    options = signature_step.options
    args = list(signature_step.args) if signature_step.immutable or not prepend else [*prepend, *signature_step.args]
    try:
        task = lookup_task(signature_step.task)
    except NotRegistered:  # not defined here (a rolling deploy): pushed by name below
        task = None
    push_options: dict[str, Any] = {
        "task_id": options.get("task_id"),
        "countdown": options.get("countdown"),
        "eta": _eta(options),
        "expires": options.get("expires"),
        "queue": options.get("queue"),
        "headers": options.get("headers"),
        "ignore_result": options.get("ignore_result"),
        "chain": [dict(each) for each in rest],
        "chord": chord if chord is not None else options.get(CHORD_OPTION),
        "link": _list_option(options.get("link")),
        "link_error": _list_option(options.get("link_error")),
        "request": lineage.request_fields(options.get("task_id"), options),
        "stamps": stamping.stamps_of(options),
    }
    if task is not None:
        limits = {name: options[name] for name in ("soft_time_limit", "time_limit", "priority") if options.get(name) is not None}
        return str(task._push(args, signature_step.kwargs, **push_options, **limits))
    return push_by_name(signature_step.task, args, signature_step.kwargs, **push_options)


def build_item(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    task_id: str | None = None,
    countdown: float | None = None,
    eta: dt.datetime | float | None = None,
    expires: float | dt.datetime | None = None,
    queue: str | None = None,
    headers: dict[str, Any] | None = None,
    ignore_result: bool | None = None,
    chain: list[dict[str, Any]] | None = None,
    chord: dict[str, Any] | None = None,
    link: list[dict[str, Any]] | None = None,
    link_error: list[dict[str, Any]] | None = None,
    request: dict[str, Any] | None = None,
    stamps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Sidekiq item of one Celery task call (``at`` for a deferred one)."""
    item: dict[str, Any] = {"class": name, "args": _jsonable(list(args)), "retry": ENGINE_RETRY_LIMIT}
    item[lineage.REQUEST_KEY] = request if request is not None else lineage.request_fields(task_id)
    if kwargs:
        item["kwargs"] = _jsonable(dict(kwargs))
    if queue:
        item["queue"] = queue
    if task_id:
        item["jid"] = task_id
    if not ignore_result or chord is not None or chain or link:
        item["retain"] = RESULT_EXPIRES_SECONDS
    if expires is not None:
        item[EXPIRES_KEY] = _epoch(expires) if isinstance(expires, dt.datetime) else now() + float(expires)
    if headers:
        item[HEADERS_KEY] = headers
    if chain:
        item[CHAIN_KEY] = _jsonable(chain)  # signatures inside become plain dicts
    if chord is not None:
        item[CHORD_KEY] = _jsonable(chord)
    if link:
        item[LINK_KEY] = _jsonable(link)
    if link_error:
        item[ERRBACK_KEY] = _jsonable(link_error)
    if stamps:
        item[stamping.STAMPS_KEY] = _jsonable(stamps)
    if eta is not None:
        item["at"] = _epoch(eta)
    elif countdown:
        item["at"] = now() + float(countdown)
    return item


def push_by_name(name: str, args: Sequence[Any], kwargs: dict[str, Any], **options: Any) -> str:
    """Push task ``name`` for the workers that define it; this process needs not."""
    item = build_item(name, args, kwargs, **options)
    item.setdefault("jid", new_jid())
    queue = str(item.get("queue") or "default")
    message, headers = lineage.before_publish(
        name,
        item["jid"],
        args,
        kwargs,
        queue=queue,
        request=item[lineage.REQUEST_KEY],
        headers=item.get(HEADERS_KEY),
        eta=item.get("at"),
        expires=item.get(EXPIRES_KEY),
        stamps=item.get(stamping.STAMPS_KEY),
    )
    if headers:
        item[HEADERS_KEY] = headers
    jid = client.push(item)
    if jid is None:
        raise RuntimeError(f"a client middleware stopped the push of {name}; nothing was enqueued")
    lineage.after_publish(name, message, args, kwargs, queue=queue)
    return jid


def _chain_dict(steps: list[dict[str, Any]]) -> dict[str, Any]:
    if len(steps) == 1:
        return steps[0]
    return {"task": "celery.chain", "args": [], "kwargs": {"tasks": steps}, "options": {}, "subtask_type": "chain", "immutable": False}


def _chord_dict(header: list[dict[str, Any]], body: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    return {
        "task": "celery.chord",
        "args": [],
        "kwargs": {"header": header, "body": body},
        "options": dict(options),
        "subtask_type": "chord",
        "immutable": False,
    }


def final_task(step: dict[str, Any]) -> dict[str, Any] | None:
    """The one task whose value is the step's (in place): a chain's last, a chord's callback's;
    None for a group (it has no single last task)."""
    kind = step.get("subtask_type")
    if kind == "chain":
        return final_task(step["kwargs"]["tasks"][-1]) if step["kwargs"]["tasks"] else None
    if kind == "chord":
        body = step["kwargs"]["body"]
        return final_task(body) if body else None
    if kind in ("group", "chunks"):
        return None
    return step


def _name_final(step: dict[str, Any], task_id: str) -> None:
    """Give ``task_id`` to the task whose value is the step's (in place); a group's id when it ends in a group."""
    final = final_task(step)
    if final is not None:
        final.setdefault("options", {})["task_id"] = task_id
        return
    while step.get("subtask_type") in ("chain", "chord"):
        step = step["kwargs"]["tasks"][-1] if step.get("subtask_type") == "chain" else step["kwargs"]["body"]
    if step.get("subtask_type") == "group":
        step.setdefault("options", {})["group_id"] = task_id


def tasks_of(step: dict[str, Any]) -> list[dict[str, Any]]:
    """Every task signature dict inside a step (in place: changing them changes the step)."""
    kind = step.get("subtask_type")
    if kind in ("chain", "group"):
        return [task for each in step["kwargs"]["tasks"] for task in tasks_of(each)]
    if kind == "chord":
        body = step["kwargs"]["body"]
        return [task for each in step["kwargs"]["header"] for task in tasks_of(each)] + (tasks_of(body) if body else [])
    return [step]


def header_parts(header: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chord's header with its groups unrolled: each task of a group in it is a part of its own."""
    parts: list[dict[str, Any]] = []
    for each in header:
        if each.get("subtask_type") == "group":
            parts.extend(header_parts(list(each["kwargs"]["tasks"])))
        elif not _is_empty(each):  # an empty chain in a header runs nothing and is not waited for
            parts.append(each)
    return parts


def final_tasks(step: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tasks whose values are the step's (in place): a chain's last step's, a chord's
    callback's, each member's of a group; None when one is ``chunks`` or an empty canvas."""
    kind = step.get("subtask_type")
    if kind == "chain":
        return final_tasks(step["kwargs"]["tasks"][-1]) if step["kwargs"]["tasks"] else None
    if kind == "chord":
        body = step["kwargs"]["body"]
        return final_tasks(body) if body else None
    if kind == "group":
        each_final = [final_tasks(each) for each in step["kwargs"]["tasks"]]
        if not each_final or any(finals is None for finals in each_final):
            return None
        return [task for finals in each_final if finals is not None for task in finals]
    if kind == "chunks":
        return None
    return [step]


def _check_header(header: list[dict[str, Any]]) -> None:
    """Each part of a chord's header ends in tasks (a task, a chain, a chord, a group); ``chunks`` are refused."""
    for each in header_parts(header):
        if not final_tasks(each):
            raise NotImplementedError(
                "a chord's header part must end in tasks (a task, a chain, a chord or a group): "
                "chunks, or an empty group or chain at the end of a part, are not supported there"
            )


def _send_part(part: dict[str, Any], prepend: Sequence[Any], chord_info: dict[str, Any]) -> None:
    """Push one header part (frozen) whose final tasks record their values in the chord."""
    finals = final_tasks(part) or []
    if finals == [part] and finals[0] is part:
        _push_task(part, prepend, rest=[], chord=chord_info)
        return
    for last in finals:
        last["options"][CHORD_OPTION] = chord_info
    push_step(part, prepend, rest=[])


def _mark_runs(step: dict[str, Any]) -> None:
    """Give every chord (and group, which a chain may turn into one) of a canvas being applied its
    own run (in place): its parts are recorded under the run, so applying a frozen chord again
    runs its callback again, while a follow-up pushed twice (same run) records nothing twice."""
    kind = step.get("subtask_type")
    if kind in ("group", "chord"):
        step.setdefault("options", {})[RUN_OPTION] = new_id()
    if kind in ("chain", "group"):
        for each in step["kwargs"]["tasks"]:
            _mark_runs(each)
    elif kind == "chord":
        for each in step["kwargs"]["header"]:
            _mark_runs(each)
        if step["kwargs"]["body"] is not None:
            _mark_runs(step["kwargs"]["body"])


def _merged_into_header(step: dict[str, Any], kwargs: dict[str, Any], options: dict[str, Any]) -> None:
    """Give the first tasks of a header part (in place) the chord's call kwargs and its delivery options."""
    kind = step.get("subtask_type")
    if kind == "chain":
        if step["kwargs"]["tasks"]:
            _merged_into_header(step["kwargs"]["tasks"][0], kwargs, options)
        return
    if kind == "group":
        for each in step["kwargs"]["tasks"]:
            _merged_into_header(each, kwargs, options)
        return
    if kind == "chord":
        for each in step["kwargs"]["header"]:
            _merged_into_header(each, kwargs, options)
        return
    if kwargs and not step.get("immutable"):
        step["kwargs"] = {**(step.get("kwargs") or {}), **kwargs}
    own = step.setdefault("options", {})
    for name, value in options.items():
        own.setdefault(name, value)


#: A lazy chord's (a generator header) marker: its last part is the seal, recorded once every task was pushed.
LAZY_FIELD = "lazy"
SEAL_PART = "+sealed"
#: The worker side's chord bookkeeping, ``(add_chord_part, chord_part_done)``: ``follow_up``, which
#: sits above this module, installs it when imported (``jobsapp.celery`` imports it on its own import).
_chord_bookkeeping: tuple[Callable[[str, str], None], Callable[..., None]] | None = None


def install_chord_bookkeeping(add_part: Callable[[str, str], None], part_done: Callable[..., None]) -> None:
    """Name how a lazy chord's parts are added and its seal recorded (``follow_up`` calls it)."""
    global _chord_bookkeeping
    _chord_bookkeeping = (add_part, part_done)


def _apply_lazy_chord(
    header: Iterator[Any], body: dict[str, Any], prepend: list[Any], options: dict[str, Any], task_id: str | None
) -> AsyncResult[Any]:
    """Apply a chord whose header is a generator: each task is pushed as the generator gives it
    (counted as a part added later), then a seal part is recorded, which completes the chord."""
    if _chord_bookkeeping is None:
        raise RuntimeError("jobsapp.celery.follow_up is not imported: import jobsapp.celery, which imports it")
    add_chord_part, chord_part_done = _chord_bookkeeping
    if task_id:
        _name_final(body, task_id)
    _freeze_all(body)
    chord_id = new_id()  # the run's: each application is a new run
    chord_info = {"id": chord_id, "header": [], LAZY_FIELD: True, "body": body}
    results: list[Any] = []
    for each in header:
        step = copy.deepcopy(dict(signature(each)))
        _check_header([step])
        _freeze_all(step)
        for part in [_gathered(each) for each in header_parts([step])]:
            for last in final_tasks(part) or []:
                add_chord_part(chord_id, str(last["options"]["task_id"]))
            _send_part(part, prepend, chord_info)
            results.append(_result_for(part, None))
    chord_part_done(chord_info, SEAL_PART, None, queue=str((body.get("options") or {}).get("queue") or "default"))
    return _result_for(body, GroupResult(str(options.get("group_id") or chord_id), results))  # type: ignore[return-value]


#: Celery's task that gathers a group's values into one (builtin_tasks.py defines it).
ACCUMULATE = "celery.accumulate"


def _gathered(part: dict[str, Any]) -> dict[str, Any]:
    """A header part whose value is a group's values (a chain or chord ending in a group) ends in
    ``celery.accumulate`` instead, which gives them as one list: the part's one value, as Celery's."""
    kind = part.get("subtask_type")
    if kind == "chain" and part["kwargs"]["tasks"]:
        last = part["kwargs"]["tasks"][-1]
        part["kwargs"]["tasks"][-1] = _gather_group(last) if last.get("subtask_type") == "group" else _gathered(last)
    elif kind == "chord" and part["kwargs"]["body"] is not None:
        body = part["kwargs"]["body"]
        part["kwargs"]["body"] = _gather_group(body) if body.get("subtask_type") == "group" else _gathered(body)
    return part


def _gather_group(step: dict[str, Any]) -> dict[str, Any]:
    return _chord_dict(list(step["kwargs"]["tasks"]), dict(Signature(ACCUMULATE, (), {"index": 0})), dict(step.get("options") or {}))


def _apply_chord(header: list[dict[str, Any]], body: dict[str, Any], prepend: list[Any], *, run: str | None = None) -> None:
    header = [_gathered(each) for each in header_parts(header)]
    _check_header(header)
    _freeze_all(body)
    if not header:
        push_step(body, [[]], rest=[])
        return
    for each in header:
        _freeze_all(each)
    # a part's values are its final tasks' (a chain's last, a chord's callback's, a group's members'):
    # those tasks carry the chord (CHORD_OPTION)
    finals = [task for each in header for task in final_tasks(each) or []]
    chord_info = {"id": run or new_id(), "header": [str(each["options"]["task_id"]) for each in finals], "body": body}
    for each in header:
        _send_part(each, prepend, chord_info)


# --- the primitives ---------------------------------------------------------------------------


def _live(steps: list[Any]) -> list[Signature[Any]]:
    """The signatures a canvas holds, themselves (made signature objects in place): changing one,
    as ``chord.tasks[0].link_error(...)`` does, changes the canvas, as in Celery."""
    for index, each in enumerate(steps):
        if not isinstance(each, Signature):
            steps[index] = from_dict(each)
    return list(steps)


def _flatten(tasks: tuple[Any, ...]) -> list[Signature[Any]]:
    if len(tasks) == 1 and not isinstance(tasks[0], dict) and isinstance(tasks[0], Iterable):
        return [signature(each) if not isinstance(each, Signature) else each for each in tasks[0]]
    return [signature(each) if not isinstance(each, Signature) else each for each in tasks]


def _unroll(step: Signature[Any]) -> Signature[Any]:
    """A one-task group is that task (Celery 5's group unrolling)."""
    if step.subtask_type == "group" and len(step["kwargs"]["tasks"]) == 1:
        return _unroll(from_dict(dict(step["kwargs"]["tasks"][0])))
    return step


def _is_empty(step: dict[str, Any]) -> bool:
    return step.get("subtask_type") in ("chain", "group") and not step["kwargs"]["tasks"]


def _without_empty_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chain's steps without its empty groups and chains (Celery skips them when the chain is
    applied); a chain of nothing else keeps its last one."""
    kept = [each for each in steps if not _is_empty(each)]
    return kept or steps[-1:]


class chain(Signature[Any]):
    """Tasks run one after another, each given the previous one's value first."""

    #: ``chain(group, task)`` is ``chord(group, task)`` from the start (Celery's ``chain`` builds
    #: itself with ``|``); ``_chain`` keeps the steps as given, and the upgrade is made when applied.
    _upgrades = True

    def __init__(self, *tasks: Any, **options: Any) -> None:
        steps: list[Signature[Any]] = []
        for each in _flatten(tasks):
            each = _unroll(each)
            if each.subtask_type == "chain":
                for inner in each["kwargs"]["tasks"]:
                    steps.append(from_dict(dict(inner)))
            elif self._upgrades and steps and steps[-1].subtask_type == "group" and each.subtask_type != "group":
                steps[-1] = chord(steps[-1], each)  # group | task -> chord, as Celery upgrades it
            else:
                steps.append(each)
        super().__init__("celery.chain", (), {"tasks": [dict(each) for each in steps]}, subtask_type="chain", **options)

    @property
    def tasks(self) -> tuple[Signature[Any], ...]:
        return tuple(_live(self["kwargs"]["tasks"]))

    def __repr__(self) -> str:
        tasks = self.tasks
        if not tasks:
            return f"<chain@{id(self):#x}: empty>"
        return remove_repeating_from_task(tasks[0].get("task") or "", " | ".join(repr(each) for each in tasks))

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        return chain(*self.tasks, other)

    def link(self, callback: Signature[Any]) -> Signature[Any]:
        """Link ``callback`` to the last task of the chain."""
        steps = list(self["kwargs"]["tasks"])
        last = from_dict(dict(steps[-1]))
        last.link(callback)
        steps[-1] = dict(last)
        self["kwargs"] = {**self["kwargs"], "tasks": steps}
        return callback

    def link_error(self, errback: Signature[Any]) -> Signature[Any]:
        """Link ``errback`` to every task of the chain (the one that fails calls it)."""
        steps = []
        for each in self["kwargs"]["tasks"]:
            step = from_dict(dict(each))
            step.link_error(errback)
            steps.append(dict(step))
        self["kwargs"] = {**self["kwargs"], "tasks": steps}
        return errback

    def stamp(self, visitor: StampingVisitor | None = None, append_stamps: bool = False, **headers: Any) -> None:  # type: ignore[override]  # Celery's chain.stamp returns None
        """Stamp every step (``on_chain_start`` headers added) and the chain's own links."""
        visitor_headers = None if visitor is None else (visitor.on_chain_start(self, **headers) or {})
        headers = self._stamp_headers(visitor_headers, append_stamps, **headers)
        self.stamp_links(visitor, **headers)  # without append_stamps, as Celery's chain
        for task in self.tasks:
            task.stamp(visitor, append_stamps, **headers)
        if visitor is not None:
            visitor.on_chain_end(self, **headers)

    @property
    def id(self) -> str | None:
        """The chain's id: None until it is frozen, then its last step's (as Celery's)."""
        return self.options.get("task_id")

    def freeze(self, _id: str | None = None, group_id: str | None = None, **options: Any) -> AsyncResult[Any]:
        """Give every task its id now (``_id`` goes to the last task, the chain's id, as Celery's)."""
        steps = list(self["kwargs"]["tasks"])
        if _id is not None and steps and not steps[-1].get("subtask_type"):
            last = from_dict(dict(steps[-1]))
            last.set(task_id=_id)
            steps[-1] = dict(last)
            self["kwargs"] = {**self["kwargs"], "tasks": steps}
        _freeze_all(self)
        result = _result_for(self, None)
        self.setdefault("options", {})["task_id"] = result.id  # type: ignore[attr-defined]
        return result  # type: ignore[return-value]

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> AsyncResult[Any]:
        steps = _without_empty_steps(copy.deepcopy(list(self["kwargs"]["tasks"])))  # ids are chosen per application, unless frozen
        if not steps:
            raise ValueError("an empty chain has nothing to run")
        for callback in _list_option(options.pop("link", None)):  # linked to the last task, as chain.link
            last = from_dict(steps[-1])
            last.link(from_dict(callback))
            steps[-1] = dict(last)
        for errback in _list_option(options.pop("link_error", None)):  # linked to every task, as chain.link_error
            linked = []
            for step in steps:
                each = from_dict(step)
                each.link_error(from_dict(copy.deepcopy(errback)))
                linked.append(dict(each))
            steps = linked
        task_id = options.pop("task_id", None)
        if task_id and not steps[-1].get("subtask_type"):  # a chain's id is its last task's (Celery 5.4)
            steps[-1] = dict(from_dict(steps[-1]).clone(task_id=task_id))
        elif task_id:
            raise ValueError("task_id= names a chain's last task: a chain ending in a group or chord has no single last task")
        if kwargs or options:
            steps[0] = dict(from_dict(steps[0]).clone((), kwargs, **options))
        frozen = _chain_dict(steps) if len(steps) > 1 else steps[0]
        if always_eager():
            return apply_eagerly(frozen, list(args or ()))
        _freeze_all(frozen)
        _mark_runs(frozen)
        result = _result_for(frozen, None)
        push_step(frozen, list(args or ()), rest=[])
        return result  # type: ignore[return-value]

    def __call__(self, *args: Any, **kwargs: Any) -> AsyncResult[Any]:
        return self.apply_async(args, kwargs)


class group(Signature[Any]):
    """Tasks run in parallel; their values come back as a list in the group's order."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        steps: list[Signature[Any]] = []
        for each in _flatten(tasks):
            if each.subtask_type == "group":  # a group in a group is its tasks, as Celery flattens it
                steps.extend(from_dict(dict(inner)) for inner in each["kwargs"]["tasks"])
            elif each.subtask_type == "chain" and not each["kwargs"]["tasks"]:  # an empty chain in a group runs nothing
                continue
            else:
                steps.append(each)
        super().__init__("celery.group", (), {"tasks": [dict(each) for each in steps]}, subtask_type="group", **options)

    @property
    def tasks(self) -> list[Signature[Any]]:
        return _live(self["kwargs"]["tasks"])

    def __repr__(self) -> str:
        tasks = self.tasks
        if not tasks:
            return "group(<empty>)"
        return remove_repeating_from_task(tasks[0].get("task") or "", f"group({tasks!r})")

    def __len__(self) -> int:
        return len(self["kwargs"]["tasks"])

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        return chord(self, other)

    def link(self, callback: Signature[Any]) -> Signature[Any]:
        """Celery links a group's callback to its first task only, made immutable."""
        steps = list(self["kwargs"]["tasks"])
        first = from_dict(dict(steps[0]))
        first.link(callback.clone().set(immutable=True))
        steps[0] = dict(first)
        self["kwargs"] = {**self["kwargs"], "tasks": steps}
        return callback

    def link_error(self, errback: Signature[Any]) -> Signature[Any]:
        """Every task of the group gets the errback (it may be called once per failing task)."""
        steps = []
        for each in self["kwargs"]["tasks"]:
            step = from_dict(dict(each))
            step.link_error(errback.clone())
            steps.append(dict(step))
        self["kwargs"] = {**self["kwargs"], "tasks": steps}
        return errback

    def stamp(self, visitor: StampingVisitor | None = None, append_stamps: bool = False, **headers: Any) -> None:  # type: ignore[override]  # Celery's group.stamp returns None
        """Stamp every task of the group (``on_group_start`` headers added) and the group's own links."""
        visitor_headers = None if visitor is None else (visitor.on_group_start(self, **headers) or {})
        headers = self._stamp_headers(visitor_headers, append_stamps, **headers)
        self.stamp_links(visitor, append_stamps, **headers)
        for task in self.tasks:
            task.stamp(visitor, append_stamps, **headers)
        if visitor is not None:
            visitor.on_group_end(self, **headers)

    def skew(self, start: float = 1.0, stop: float | None = None, step: float = 1.0) -> group:
        """Give the tasks countdowns ``start``, ``start + step``, ... (at most ``stop``)."""
        steps = []
        for index, each in enumerate(self["kwargs"]["tasks"]):
            countdown = start + index * step
            if stop is not None:
                countdown = min(countdown, stop)
            steps.append(dict(from_dict(dict(each)).clone(countdown=countdown)))
        self["kwargs"] = {**self["kwargs"], "tasks": steps}
        return self

    def freeze(self, _id: str | None = None, group_id: str | None = None, **options: Any) -> GroupResult:
        if (_id or group_id) and not self.options.get("group_id"):
            self.set(group_id=_id or group_id)
        _freeze_all(self)
        return _result_for(self, None)  # type: ignore[return-value]

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> GroupResult:
        frozen = copy.deepcopy(dict(self))
        members = []
        for each in frozen["kwargs"]["tasks"]:
            member = from_dict(each)
            if not member.subtask_type and (kwargs or options):
                member = member.clone((), kwargs, **options)
            members.append(dict(member))
        frozen["kwargs"]["tasks"] = members
        if always_eager():
            return apply_eagerly(frozen, list(args or ()))
        _freeze_all(frozen)
        _mark_runs(frozen)
        result = _result_for(frozen, None)
        push_step(frozen, list(args or ()), rest=[])
        if isinstance(result, GroupResult) and len(result.results) == 1 and isinstance(result.results[0], GroupResult):
            # Celery's special case: group(a | group(b, c)) is the inner group's result
            return result.results[0]
        return result  # type: ignore[return-value]

    def __call__(self, *args: Any, **kwargs: Any) -> GroupResult:
        return self.apply_async(args, kwargs)


class chord(Signature[Any]):
    """A group whose values, in order, are given to a callback once every task has succeeded."""

    def __init__(self, header: Any, body: Any = None, **options: Any) -> None:
        #: A generator header is read when the chord is applied, each task pushed as it comes (Celery's lazy header).
        self._lazy_header: Iterator[Any] | None = header if isinstance(header, Generator) else None
        if self._lazy_header is not None:
            tasks: list[Signature[Any]] = []
        elif isinstance(header, dict) and header.get("subtask_type") == "group":
            tasks = [from_dict(dict(each)) for each in header["kwargs"]["tasks"]]
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
    def tasks(self) -> tuple[Signature[Any], ...]:
        return tuple(_live(self["kwargs"]["header"]))

    @property
    def body(self) -> Signature[Any] | None:
        body = self["kwargs"]["body"]
        if body is not None and not isinstance(body, Signature):
            body = self["kwargs"]["body"] = from_dict(body)
        return body

    def __repr__(self) -> str:
        body = self.body
        if body is None:
            return f"<chord without body: {list(self.tasks)!r}>"
        if isinstance(body, chain):
            first, *others = body.tasks
            return remove_repeating_from_task(first.task, f"%({first.reprcall(self.tasks)} | {chain(*others)!r})")
        return "%" + remove_repeating_from_task(body.task, body.reprcall(self.tasks))

    def __or__(self, other: Signature[Any]) -> Signature[Any]:  # type: ignore[override]  # Celery's | builds a chain, not a merged dict
        body = self.body
        if body is None:
            return chord(self.tasks, other)
        return chord(self.tasks, chain(body, other))

    def link(self, callback: Signature[Any]) -> Signature[Any]:
        """Link ``callback`` to the chord's callback."""
        body = self.body
        if body is None:
            raise ValueError("a chord without a callback cannot be linked")
        body.link(callback)
        self["kwargs"] = {**self["kwargs"], "body": dict(body)}
        return callback

    def link_error(self, errback: Signature[Any]) -> Signature[Any]:
        """Link ``errback`` to the chord's callback (called once if a header task or the callback
        fails); with the app's ``task_allow_error_cb_on_chord_header``, to each header task too
        (immutable), as Celery's."""
        body = self.body
        if body is None:
            raise ValueError("a chord without a callback cannot be linked")
        app = current.current_app()
        if app is not None and app.conf.get("task_allow_error_cb_on_chord_header"):
            for task in self.tasks:
                task.link_error(errback.clone().set(immutable=True))
        body.link_error(errback)
        self["kwargs"] = {**self["kwargs"], "body": dict(body)}
        return errback

    def header_group(self) -> group:
        """The chord's header as a group of its own signatures (``StampingVisitor.on_chord_header_start``)."""
        made = group()
        made["kwargs"]["tasks"] = self["kwargs"]["header"]
        return made

    def stamp(self, visitor: StampingVisitor | None = None, append_stamps: bool = False, **headers: Any) -> None:  # type: ignore[override]  # Celery's chord.stamp returns None
        """Stamp the header's tasks (``on_chord_header_start`` headers added; a generator header as
        it is read), the chord's own links, then (with a visitor, as Celery's) the callback with
        ``on_chord_body``'s headers too."""
        visitor_headers = None if visitor is None else (visitor.on_chord_header_start(self, **headers) or {})
        headers = self._stamp_headers(visitor_headers, append_stamps, **headers)
        self.stamp_links(visitor, append_stamps, **headers)
        lazy = getattr(self, "_lazy_header", None)
        if lazy is not None:
            self._lazy_header = _stamped_as_read(lazy, visitor, append_stamps, headers)
        for task in self.tasks:
            task.stamp(visitor, append_stamps, **copy.deepcopy(headers))
        if visitor is not None:
            visitor.on_chord_header_end(self, **headers)
        body = self.body
        if visitor is not None and body is not None:
            body_headers = self._stamp_headers(visitor.on_chord_body(self, **headers) or {}, append_stamps, **headers)
            body.stamp(visitor, append_stamps, **body_headers)

    def freeze(self, _id: str | None = None, group_id: str | None = None, **options: Any) -> AsyncResult[Any]:
        """Give every task its id now (``_id`` goes to the callback's final task: the chord's id, as Celery's)."""
        if self.body is None:
            raise ValueError("a chord needs a callback to be frozen")
        if _id is not None:
            _name_final(self, _id)
        _freeze_all(self)
        return _result_for(self, None)  # type: ignore[return-value]

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
        callback = from_dict(copy.deepcopy(dict(callback)))
        for linked in _list_option(options.pop("link", None)):  # the call's callbacks and errbacks go to the chord's callback
            callback.link(from_dict(linked))
        for errback in _list_option(options.pop("link_error", None)):
            callback.link_error(from_dict(errback))
        lazy, self._lazy_header = getattr(self, "_lazy_header", None), None  # a generator is read once
        if lazy is not None and not always_eager():
            return _apply_lazy_chord(lazy, dict(callback), list(args or ()), self.options, options.get("task_id"))
        header = [dict(signature(each)) for each in lazy] if lazy is not None else list(self["kwargs"]["header"])
        frozen = _chord_dict(copy.deepcopy(header), dict(callback), {**self.options, **options})
        if options.get("task_id"):
            _name_final(frozen, str(options["task_id"]))
        if kwargs:  # the call's kwargs go to the header's tasks, as its args do
            for each in frozen["kwargs"]["header"]:
                _merged_into_header(each, dict(kwargs), {})
        if always_eager():
            return apply_eagerly(frozen, list(args or ()))
        _check_header(frozen["kwargs"]["header"])
        _freeze_all(frozen)
        _mark_runs(frozen)
        result = _result_for(frozen, None)
        push_step(frozen, list(args or ()), rest=[])
        return result  # type: ignore[return-value]

    def __call__(self, body: Any = None, **options: Any) -> AsyncResult[Any]:
        return self.apply_async((), {}, body=body, **options)


class xmap(Signature[Any]):
    """``task.map(items)``: one task calling ``task(item)`` for each item, in order."""

    task_name = "celery.map"

    def __init__(self, task: Any, it: Iterable[Any], **options: Any) -> None:
        # immutable, as Celery's: in a chain it does not take the previous value
        super().__init__(
            self.task_name, (), {"task": dict(signature(task)), "it": _jsonable(list(it))}, subtask_type=None, immutable=True, **options
        )

    def __repr__(self) -> str:
        return f"[{self['kwargs']['task']['task']}(x) for x in {_truncate(repr(self['kwargs']['it']))}]"


class xstarmap(xmap):
    """``task.starmap(items)``: one task calling ``task(*item)`` for each item, in order."""

    task_name = "celery.starmap"

    def __repr__(self) -> str:
        return f"[{self['kwargs']['task']['task']}(*x) for x in {_truncate(repr(self['kwargs']['it']))}]"


def _stamped_as_read(header: Iterator[Any], visitor: StampingVisitor | None, append_stamps: bool, headers: dict[str, Any]) -> Iterator[Any]:
    """A generator header's signatures, each stamped as the chord reads it (Celery's ``_regen`` map)."""
    for each in header:
        task = signature(each)
        task.stamp(visitor, append_stamps, **copy.deepcopy(headers))
        yield task


def _truncate(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _chunk_args(step: dict[str, Any]) -> list[list[Any]]:
    items = list(step["kwargs"]["it"])
    size = int(step["kwargs"]["n"])
    return [items[start : start + size] for start in range(0, len(items), size)]


class chunks(Signature[Any]):
    """``task.chunks(items, n)``: the items split in parts of ``n``, one ``starmap`` task per part."""

    def __init__(self, task: Any, it: Iterable[Any], n: int, **options: Any) -> None:
        if int(n) < 1:
            raise ValueError("chunks need a size of at least 1")
        items = _jsonable(list(it))
        super().__init__("celery.chunks", (), {"task": dict(signature(task)), "it": items, "n": int(n)}, subtask_type="chunks", **options)

    def group(self) -> group:
        """The group of ``starmap`` tasks, one per part."""
        task = self["kwargs"]["task"]
        return group(xstarmap(task, part) for part in _chunk_args(self))

    def freeze(self, _id: str | None = None, group_id: str | None = None, **options: Any) -> GroupResult:
        _freeze_all(self)
        return _result_for(self, None)  # type: ignore[return-value]

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, route_name: str | None = None, **options: Any
    ) -> GroupResult:
        return self.group().apply_async(args, kwargs, **options)

    def __call__(self, *args: Any, **kwargs: Any) -> GroupResult:
        return self.apply_async(args, kwargs)


_TYPES: dict[str, type[Signature[Any]]] = {"chain": chain, "group": group, "chord": chord, "chunks": chunks}

__all__ = [
    "Signature",
    "chain",
    "chord",
    "chunks",
    "group",
    "maybe_signature",
    "signature",
    "subtask",
    "xmap",
    "xstarmap",
]


class _chain(chain):
    """Celery's class behind ``chain``: its steps stay as given (a group followed by a task
    becomes a chord when the chain is applied, not when it is built)."""

    _upgrades = False


# --- eager application --------------------------------------------------------------------


def always_eager() -> bool:
    """Whether the current app says ``task_always_eager`` (tasks then run in the caller's thread)."""
    app = current.current_app()
    return bool(app is not None and app.conf.get("task_always_eager"))


def apply_eagerly(step: dict[str, Any], prepend: list[Any]) -> Any:
    """Run a signature of any kind here and now (``apply``), as Celery's eager canvas does: a
    chain passes each value on (a failed step raises, as Celery's ``chain.apply`` does on
    ``get()``), a group runs its tasks in order, a chord gives the header's values to its body."""
    from .result import EagerResult

    kind = step.get("subtask_type")
    options = dict(step.get("options") or {})
    if kind == "chain":
        result: Any = None
        values = list(prepend)
        for each in step["kwargs"]["tasks"]:
            current = apply_eagerly(each, values)
            current.parent = result
            result = current
            values = [current.get()]
        if result is None:
            raise ValueError("an empty chain has nothing to run")
        return result
    if kind == "group":
        members = [apply_eagerly(each, prepend) for each in step["kwargs"]["tasks"]]
        return GroupResult(options.get("group_id") or new_id(), members)
    if kind == "chord":
        header = GroupResult(options.get("group_id") or new_id(), [apply_eagerly(each, prepend) for each in step["kwargs"]["header"]])
        body = step["kwargs"]["body"]
        if body is None:
            return header
        result = apply_eagerly(body, [header.get()])
        result.parent = header
        return result
    signature_step = from_dict(dict(step))
    task = lookup_task(signature_step.task)
    args = list(signature_step.args) if signature_step.immutable or not prepend else [*prepend, *signature_step.args]
    eager_options = {name: options[name] for name in ("ignore_result", "headers", *stamping.immutable_options(options)) if name in options}
    result = task.apply(args, signature_step.kwargs, task_id=options.get("task_id"), **eager_options)
    for callback in _list_option(options.get("link")) if isinstance(result, EagerResult) and result.successful() else []:
        apply_eagerly(callback, [result.get()])
    return result
