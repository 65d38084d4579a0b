"""``celery.utils.serialization``: how a task's exception travels as data.

A failure is stored in Celery's shape, ``{"exc_type", "exc_message", "exc_module"}`` (the
exception's class name, its ``args`` as JSON, its module). Reading it back rebuilds the
exception only when the class is already importable in the reader's process from that module,
is a ``BaseException`` subclass, and accepts those ``args``: nothing is imported because a
result named it, and no other code runs. Otherwise the reader gets an
``UnpickleableExceptionWrapper`` naming the class and carrying the arguments, as Celery does for
an exception it cannot rebuild.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any

from ..exceptions import TaskFailure


class UnpickleableExceptionWrapper(Exception):
    """Stands for an exception that could not be rebuilt: ``exc_module``, ``exc_cls_name``, ``exc_args``, ``text``."""

    def __init__(self, exc_module: str, exc_cls_name: str, exc_args: tuple[Any, ...], text: str | None = None) -> None:
        self.exc_module = exc_module
        self.exc_cls_name = exc_cls_name
        self.exc_args = tuple(exc_args)
        self.text = text
        super().__init__(exc_module, exc_cls_name, self.exc_args, text)

    def __str__(self) -> str:
        return self.text or f"{self.exc_cls_name}({', '.join(map(repr, self.exc_args))})"

    def restore(self) -> BaseException:
        """The original exception, when its class is importable here and takes these arguments (else self)."""
        return rebuild_exception(self.exc_module, self.exc_cls_name, self.exc_args, self.text)

    @classmethod
    def from_exception(cls, exc: BaseException) -> UnpickleableExceptionWrapper:
        return cls(type(exc).__module__, type(exc).__name__, tuple(exc.args), str(exc))


def rebuild_exception(module_name: str, class_name: str, args: Any, text: str | None = None) -> BaseException:
    """The exception ``module_name.class_name(*args)`` when that class is already loaded in this
    process (nothing is imported because a result named it) and is a ``BaseException`` subclass;
    else an ``UnpickleableExceptionWrapper`` naming it. Stopping exceptions (``SystemExit``,
    ``KeyboardInterrupt``) are described by ``TaskFailure``: raised in a caller they would stop it."""
    arguments = tuple(args) if isinstance(args, (list, tuple)) else (args,)
    module = builtins if module_name in ("builtins", "") else sys.modules.get(module_name)
    candidate: Any = module
    for part in class_name.split("."):
        candidate = getattr(candidate, part, None)
    path = class_name if module is builtins else f"{module_name}.{class_name}"
    if isinstance(candidate, type) and issubclass(candidate, BaseException) and not issubclass(candidate, Exception):
        return TaskFailure(path, text if text is not None else ", ".join(map(str, arguments)))
    if isinstance(candidate, type) and issubclass(candidate, BaseException):
        try:
            return candidate(*arguments)
        except (TypeError, ValueError, AttributeError, LookupError, ArithmeticError, AssertionError):
            # a constructor that refuses these arguments: described by the wrapper below
            return UnpickleableExceptionWrapper(module_name, class_name, arguments, text)
    return UnpickleableExceptionWrapper(module_name, class_name, arguments, text)
