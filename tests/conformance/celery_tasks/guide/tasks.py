"""The code blocks of Celery's tasks guide (docs/userguide/tasks.rst at the commit in
UPSTREAM.md), in guide order, with ``celery`` changed to ``jobsapp.celery`` in the imports.

The guide's blocks are fragments: the names they leave undefined (``app``, ``User``, a Twitter
client, a renderer, a database) are defined in the "given" lines before them, and blocks that
reuse a function name get a numbered suffix so that they live in one module. Nothing else is
changed. The stand-ins record what the tasks did in the test's Redis (``guide:*`` keys).
Run by tests/conformance/celery_tasks/test_tasks_guide.py; the refused blocks are there.
"""

import errno
import functools
import json

from django.contrib.auth.models import User

import jobsapp.celery as celery
from jobsapp.celery import Celery, Task, shared_task, states
from jobsapp.celery.app import task
from jobsapp.celery.exceptions import Ignore, Reject
from jobsapp.celery.utils.log import get_task_logger
from jobsapp.connection import get_redis

# given: the guide's app
app = Celery("guide")


def _note(*fields):
    get_redis().rpush("guide:notes", json.dumps(fields))


# --- Basics ------------------------------------------------------------------------------------


@app.task
def create_user(username, password):
    User.objects.create(username=username, password=password)


@app.task(serializer="json")
def create_user_2(username, password):
    User.objects.create(username=username, password=password)


@shared_task
def add(x, y):
    return x + y


# --- Multiple decorators -------------------------------------------------------------------------


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


@app.task
@decorator2
@decorator1
def add_2(x, y):
    return x + y


# --- Bound tasks ---------------------------------------------------------------------------------

logger = get_task_logger(__name__)


@app.task(bind=True)
def add_3(self, x, y):
    logger.info(self.request.id)


# --- Task inheritance ----------------------------------------------------------------------------


class MyTask(celery.Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        print("{0!r} failed: {1!r}".format(task_id, exc))  # noqa: UP030, UP032  # as the guide writes it


@app.task(base=MyTask)
def add_4(x, y):
    raise KeyError()


# --- Names ---------------------------------------------------------------------------------------


@app.task(name="sum-of-two-numbers")
def add_5(x, y):
    return x + y


@app.task(name="tasks.add")
def add_6(x, y):
    return x + y


# --- Changing the automatic naming behavior --------------------------------------------------------


class MyCelery(Celery):
    def gen_task_name(self, name, module):
        if module.endswith(".tasks"):
            module = module[:-6]
        return super().gen_task_name(name, module)


main_app = MyCelery("main")  # the guide's "app = MyCelery('main')"


@main_app.task
def taskA():
    return "A"


# --- Task request --------------------------------------------------------------------------------


@app.task(bind=True)
def dump_context(self, x, y):
    print("Executing task id {0.id}, args: {0.args!r} kwargs: {0.kwargs!r}".format(self.request))  # noqa: UP032


# --- Logging -------------------------------------------------------------------------------------


@app.task
def add_7(x, y):
    logger.info("Adding {0} + {1}".format(x, y))  # noqa: UP030, UP032
    return x + y


# --- Retrying ------------------------------------------------------------------------------------


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
FailWhaleError = Twitter.FailWhaleError


@app.task(bind=True)
def send_twitter_status(self, oauth, tweet):
    try:
        twitter = Twitter(oauth)
        twitter.update_status(tweet)
    except (Twitter.FailWhaleError, Twitter.LoginError) as exc:
        raise self.retry(exc=exc)


def something_raising():  # given
    raise ValueError("something raised")


@app.task(bind=True, default_retry_delay=30 * 60)  # retry in 30 minutes.
def add_8(self, x, y):
    try:
        something_raising()
    except Exception as exc:
        # overrides the default delay to retry after 1 minute
        raise self.retry(exc=exc, countdown=60)


@app.task(autoretry_for=(FailWhaleError,))
def refresh_timeline(user):
    return twitter.refresh_timeline(user)


@app.task(autoretry_for=(FailWhaleError,), retry_kwargs={"max_retries": 5})
def refresh_timeline_2(user):
    return twitter.refresh_timeline(user)


@app.task
def refresh_timeline_3(user):
    try:
        twitter.refresh_timeline(user)
    except FailWhaleError as exc:
        raise refresh_timeline_3.retry(exc=exc, max_retries=5)


@app.task(autoretry_for=(Exception,))
def x(): ...


class BaseTaskWithRetry(Task):
    autoretry_for = (TypeError,)
    max_retries = 5
    retry_backoff = True
    retry_backoff_max = 700
    retry_jitter = False


@app.task(base=BaseTaskWithRetry, bind=True)  # given: a task on the guide's class-based retry options
def fails_once_with_type_error(self):
    if self.request.retries == 0:
        raise TypeError("first attempt")
    return self.request.retries


# --- Custom states -------------------------------------------------------------------------------


@app.task(bind=True)
def upload_files(self, filenames):
    for i, file in enumerate(filenames):
        if not self.request.called_directly:
            self.update_state(state="PROGRESS", meta={"current": i, "total": len(filenames)})


# --- Ignore --------------------------------------------------------------------------------------


class _Redis:  # given: the guide's "redis" with its ismember (redis-py's sismember)
    def ismember(self, key, member):
        return get_redis().sismember(key, member)


redis = _Redis()


@app.task(bind=True)
def some_task(self):
    if redis.ismember("tasks.revoked", self.request.id):
        raise Ignore()


@app.task(bind=True)
def get_tweets(self, user):
    timeline = twitter.get_timeline(user)
    if not self.request.called_directly:
        self.update_state(state=states.SUCCESS, meta=timeline)
    raise Ignore()


# --- Reject --------------------------------------------------------------------------------------


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


@app.task(bind=True, acks_late=True)
def render_scene(self, path):
    file = get_file(path)
    try:
        renderer.render_scene(file)

    # if the file is too big to fit in memory
    # we reject it so that it's redelivered to the dead letter exchange
    # and we can manually inspect the situation.
    except MemoryError as exc:
        raise Reject(exc, requeue=False)
    except OSError as exc:
        if exc.errno == errno.ENOMEM:
            raise Reject(exc, requeue=False)

    # For any other error we retry after 10 seconds.
    except Exception as exc:
        raise self.retry(exc, countdown=10)


@app.task(bind=True, acks_late=True)
def requeues(self):
    if not self.request.delivery_info["redelivered"]:
        raise Reject("no reason", requeue=True)
    print("received two times")


# --- Custom task classes -------------------------------------------------------------------------


class Database:  # given: a database whose connections are counted
    connections = 0

    @classmethod
    def connect(cls):
        cls.connections += 1
        return cls()

    def process_rows(self):
        return Database.connections


class DatabaseTask(Task):
    _db = None

    @property
    def db(self):
        if self._db is None:
            self._db = Database.connect()
        return self._db


@app.task(base=DatabaseTask, bind=True)
def process_rows(self: task):
    return self.db.process_rows()  # the guide iterates over self.db.table.all()


# App-wide usage: task_cls, as the guide's "app = Celery('tasks', task_cls='your.module.path:DatabaseTask')"
app_wide = Celery("tasks", task_cls="tests.conformance.celery_tasks.guide.tasks:DatabaseTask")


@app_wide.task(bind=True)  # given: a task of that app
def app_wide_rows(self):
    return self.db.process_rows()


# --- Handlers ------------------------------------------------------------------------------------


class MyTask_2(Task):  # the guide's second MyTask
    def before_start(self, task_id, args, kwargs):
        print(f"Task {task_id} starting with args {args}")
        # This blocks - run() won't start until this returns

    def on_success(self, retval, task_id, args, kwargs):
        print(f"Task {task_id} succeeded with result: {retval}")
        # Result is already visible to clients at this point

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        print(f"Task {task_id} failed: {exc}")
        # Task state is already FAILURE in backend

    def after_return(self, status, retval, task_id, args, kwargs, einfo):
        print(f"Task {task_id} finished with status: {status}")
        # Always runs last


@app.task(base=MyTask_2)
def my_task(x, y):
    return x + y


# --- Ignore results you don't want -----------------------------------------------------------------


@app.task(ignore_result=True)
def mytask():
    _note("mytask")


@app.task
def mytask_2(x, y):
    return x + y


# --- Avoid launching synchronous subtasks ------------------------------------------------------------


@app.task
def fetch_page(url):
    return f"<html>{url}</html>"  # the guide's myhttplib.get(url)


@app.task
def update_page_info(url):
    page = fetch_page.delay(url).get()
    return page


@app.task
def update_page_info_2(url):
    page = fetch_page.delay(url).get(disable_sync_subtasks=False)
    return page
