"""``celery.backends.base``: the backend names Celery code imports. ``states`` is Celery's state
module; ``app.backend`` is a ``ResultBackend`` over the engine's result store, which is not one
of Celery's key/value backends (``BaseKeyValueStoreBackend``: its chord counters and ``get_many``
poll loop are Celery internals; chords here complete in one Lua script)."""

from __future__ import annotations

from .. import states as states
from ..result import ResultBackend as ResultBackend


class BaseBackend:
    """Celery's backend base class, for ``isinstance`` checks: the result store is not one."""


class BaseKeyValueStoreBackend(BaseBackend):
    """Celery's key/value backend base class, for ``isinstance`` checks: the result store is not one."""


Backend = BaseBackend
KeyValueStoreBackend = BaseKeyValueStoreBackend
