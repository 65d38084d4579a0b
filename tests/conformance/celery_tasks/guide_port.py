"""The code blocks of Celery's tasks guide (``docs/userguide/tasks.rst`` in the pinned Celery sdist)
assembled into one module, ``celery_guide.tasks``, at run time.

The guide's blocks are fragments. The module is built in guide order from two kinds of part:
``Block`` (a guide block taken by number, its first line checked, with ``celery`` imports changed
to ``jobsapp.celery`` and the edits listed) and ``given`` (our code: the names a block leaves
undefined, ``app``, ``User``, a Twitter client, a renderer, a database, stand-ins that record what
the tasks did in the test's Redis under ``guide:*`` keys). Blocks that reuse a function name get a
numbered suffix so they live in one module. Run by test_tasks_guide.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.conformance import upstream
from tests.conformance.upstream import Block, Substitution

PACKAGE = "celery_guide"
GUIDE = "docs/userguide/tasks.rst"


def rename(old: str, new: str, *, count: int | None = 1) -> Substitution:
    return Substitution(old, new, count=count, reason="the guide reuses the name; one module holds every block")


def given(code: str) -> str:
    return code.strip("\n") + "\n"


PARTS: list[Block | str] = [
    given(
        """
import errno
import functools
import json

from django.contrib.auth.models import User

from jobsapp.celery import Celery, Task
from jobsapp.connection import get_redis

# given: the guide's app
app = Celery("guide")


def _note(*fields):
    get_redis().rpush("guide:notes", json.dumps(fields))
"""
    ),
    # Basics
    Block(1, "from .models import User", [Substitution("from .models import User", "# given: User, the auth model (imported above)")]),
    Block(2, "@app.task(serializer='json')", [rename("def create_user(", "def create_user_2(")]),
    Block(3, "from celery import shared_task"),
    # Multiple decorators
    given(
        """
def decorator1(function):  # given: two decorators that keep the function's name (functools.wraps)
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs) * 10

    return wrapper


def decorator2(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs) + 1

    return wrapper
"""
    ),
    Block(4, "@app.task", [rename("def add(", "def add_2(")]),
    # Bound tasks
    given("from jobsapp.celery.utils.log import get_task_logger  # given: the guide's import, shown later"),
    Block(5, "logger = get_task_logger(__name__)", [rename("def add(", "def add_3(")]),
    # Task inheritance
    Block(6, "import celery", [rename("def add(", "def add_4(")]),
    # Names
    Block(
        7, ">>> @app.task(name='sum-of-two-numbers')", [rename("def add(", "def add_5("), rename("add.name", "add_5.name")], console=True
    ),
    Block(8, ">>> @app.task(name='tasks.add')", [rename("def add(", "def add_6(")], console=True),
    # Changing the automatic naming behavior
    Block(13, "from celery import Celery", [rename("app = MyCelery('main')", "main_app = MyCelery('main')")]),
    given(
        """
@main_app.task  # given: a task of that app, in this module (the guide's moduleA.tasks)
def taskA():
    return "A"
"""
    ),
    # Task request
    Block(14, "@app.task(bind=True)"),
    # Logging
    Block(15, "from celery.utils.log import get_task_logger", [rename("def add(", "def add_7(")]),
    # Retrying
    given(
        """
class Twitter:  # given: a Twitter client whose first call for each tweet fails with FailWhaleError
    class FailWhaleError(Exception):
        pass

    class LoginError(Exception):
        pass

    def __init__(self, oauth):
        self.oauth = oauth

    def update_status(self, tweet):
        if get_redis().incr(f"guide:twitter:{tweet}") == 1:
            raise Twitter.FailWhaleError("fail whale")
        _note("tweeted", tweet)

    def refresh_timeline(self, user):
        if get_redis().incr(f"guide:timeline:{user}") == 1:
            raise Twitter.FailWhaleError("fail whale")
        return [f"{user}'s tweet"]

    def get_timeline(self, user):
        return [f"{user}'s tweet", f"{user}'s other tweet"]


twitter = Twitter("token")
"""
    ),
    Block(22, "@app.task(bind=True)"),
    given(
        """
def something_raising():  # given
    raise ValueError("something raised")
"""
    ),
    Block(24, "@app.task(bind=True, default_retry_delay=30 * 60)  # retry in 30 minutes.", [rename("def add(", "def add_8(")]),
    Block(
        25,
        "from twitter.exceptions import FailWhaleError",
        [Substitution("from twitter.exceptions import FailWhaleError", "FailWhaleError = Twitter.FailWhaleError  # given")],
    ),
    Block(26, "@app.task(autoretry_for=(FailWhaleError,),", [rename("def refresh_timeline(", "def refresh_timeline_2(")]),
    Block(
        27,
        "@app.task",
        [
            rename("def refresh_timeline(", "def refresh_timeline_3("),
            rename("raise refresh_timeline.retry", "raise refresh_timeline_3.retry"),
        ],
    ),
    Block(28, "@app.task(autoretry_for=(Exception,))"),
    Block(30, "class BaseTaskWithRetry(Task):"),
    given(
        """
@app.task(base=BaseTaskWithRetry, bind=True)  # given: a task on the guide's class-based retry options
def fails_once_with_type_error(self):
    if self.request.retries == 0:
        raise TypeError("first attempt")
    return self.request.retries
"""
    ),
    # Custom states
    Block(36, "@app.task(bind=True)"),
    # Ignore
    given(
        """
class _Redis:  # given: the guide's "redis" with its ismember (redis-py's sismember)
    def ismember(self, key, member):
        return get_redis().sismember(key, member)


redis = _Redis()
"""
    ),
    Block(39, "from celery.exceptions import Ignore"),
    Block(40, "from celery import states"),
    # Reject
    given(
        """
def get_file(path):  # given
    return path


class _Renderer:  # given: a renderer that runs out of memory on "huge" scenes, fails on "broken" ones
    def render_scene(self, file):
        if "huge" in file:
            raise MemoryError()
        if "nomem" in file:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        if "broken" in file:
            raise ValueError("broken scene")
        _note("rendered", file)


renderer = _Renderer()
"""
    ),
    Block(41, "import errno"),
    Block(42, "from celery.exceptions import Reject"),
    # Custom task classes
    Block(45, "from celery import Task"),
    given(
        """
class Database:  # given: a database whose connections are counted, with a table of rows
    connections = 0

    @classmethod
    def connect(cls):
        cls.connections += 1
        return cls()

    @property
    def table(self):
        return self

    def all(self):
        return [Database.connections]


def process_row(row):  # given: records the row, the connection count when it was read
    _note("row", row)
"""
    ),
    Block(46, "from celery import Task"),
    Block(47, "from celery.app import task"),
    Block(
        48,
        "from celery import Celery",
        [
            Substitution("app = Celery(", "app_wide = Celery(", reason="one module: the guide's app stays"),
            Substitution("'your.module.path:DatabaseTask'", f"'{PACKAGE}.tasks:DatabaseTask'", reason="this module's path"),
        ],
    ),
    given(
        """
@app_wide.task(bind=True)  # given: a task of that app
def app_wide_rows(self):
    return [row for row in self.db.table.all()]
"""
    ),
    # Handlers
    Block(50, "import time", [rename("MyTask", "MyTask_2", count=2)]),
    # Ignore results you don't want
    given(
        """
def something():  # given
    _note("mytask")
"""
    ),
    Block(53, "@app.task(ignore_result=True)"),
    Block(54, "@app.task", [rename("mytask", "mytask_2")], stop_before="# No result will be stored"),
    # Avoid launching synchronous subtasks
    given(
        """
class myhttplib:  # given: an HTTP client, a parser and a model that records what was stored
    @staticmethod
    def get(url):
        return f"<html>{url}</html>"


class myparser:
    @staticmethod
    def parse_document(page):
        return page.upper()


class PageInfo:
    class objects:
        @staticmethod
        def create(url, info):
            _note("page", url, info)
"""
    ),
    Block(55, "@app.task"),
    Block(
        57,
        "@app.task",
        [
            rename("update_page_info", "update_page_info_2"),
            rename("fetch_page", "fetch_page_2", count=2),
            rename("parse_page", "parse_page_2", count=2),
            rename("store_page_info", "store_page_info_2", count=2),
        ],
    ),
]


def module_text(root: Path) -> str:
    blocks = upstream.code_blocks(upstream.read(root, GUIDE))
    parts = [
        upstream.celery_imports_to_jobsapp(part.take(blocks, origin=f"celery {GUIDE}")) if isinstance(part, Block) else part
        for part in PARTS
    ]
    return "\n\n".join(parts)


def ported_dir() -> Path:
    """The directory holding the package ``celery_guide`` (its ``tasks`` module is the guide's
    blocks); skipped, or failing under CI=true, without the Celery sdist."""
    root = upstream.require(upstream.CELERY)
    return upstream.materialize("celery-guide", {f"{PACKAGE}/__init__.py": "", f"{PACKAGE}/tasks.py": module_text(root)})
