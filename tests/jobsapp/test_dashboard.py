"""The dashboard through Django's test client: access rules, every page with data in every
state, every action, escaping of hostile job data, redaction, CSRF, and Redis going away."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client
from django.urls import reverse

from jobsapp import connection, keys
from tests.jobsapp import sidekiq_data as data
from tests.testapp.jobs import Record

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert('x')</script>"
HOSTILE_ESCAPED = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"


@pytest.fixture
def staff(django_user_model) -> Client:
    user = django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def member(django_user_model) -> Client:
    user = django_user_model.objects.create_user("member", password="pw-member-123")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def populated(redis):
    return data.populate(redis)


def page_urls(ids):
    return [
        reverse("jobsapp:overview"),
        reverse("jobsapp:overview") + "?days=7",
        reverse("jobsapp:stats_json"),
        reverse("jobsapp:queues"),
        reverse("jobsapp:queue", args=["default"]),
        reverse("jobsapp:queue", args=["imports"]) + "?page=2",
        reverse("jobsapp:busy"),
        reverse("jobsapp:job_set", args=["scheduled"]),
        reverse("jobsapp:job_set", args=["retries"]) + "?class=FlakyJob&q=timed",
        reverse("jobsapp:job_set", args=["dead"]),
        reverse("jobsapp:job", args=[ids["retry"]]),
        reverse("jobsapp:metrics"),
    ]


ACTION_URLS = [
    ("jobsapp:queue_action", []),
    ("jobsapp:process_action", []),
    ("jobsapp:set_action", ["retries"]),
]


# --- access -------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_login_for_every_page_and_action(client, populated, redis):
    for url in page_urls(populated):
        response = client.get(url)
        if url == reverse("jobsapp:metrics"):  # a scraper gets 401, not a login page (test_metrics)
            assert response.status_code == 401, url
            continue
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/?next="), url
    for name, args in ACTION_URLS:
        response = client.post(reverse(name, args=args), {"action": "clear", "queue": "default"})
        assert response.status_code == 302
    assert redis.llen(keys.queue("default")) == 30, "nothing was changed"


def test_non_staff_users_get_403_everywhere(member, populated, redis):
    for url in page_urls(populated):
        assert member.get(url).status_code == 403, url
    for name, args in ACTION_URLS:
        assert member.post(reverse(name, args=args), {"action": "clear", "queue": "default"}).status_code == 403
    assert redis.llen(keys.queue("default")) == 30


def test_mutations_need_post_and_a_csrf_token(django_user_model, populated, redis):
    user = django_user_model.objects.create_user("strict", password="pw-strict-123", is_staff=True)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert strict.post(reverse("jobsapp:queue_action"), {"action": "clear", "queue": "default"}).status_code == 403
    assert strict.get(reverse("jobsapp:queue_action") + "?action=clear&queue=default").status_code == 405
    assert redis.llen(keys.queue("default")) == 30
    # With the token from a rendered page the same POST works.
    page = strict.get(reverse("jobsapp:queues"))
    token = page.cookies["csrftoken"].value
    response = strict.post(reverse("jobsapp:queue_action"), {"action": "clear", "queue": "default", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert redis.llen(keys.queue("default")) == 0


def dashboard_action_urls() -> list[str]:
    """Every POST endpoint of the dashboard's URLconf (``*_action``), so a new one is covered too."""
    from jobsapp.urls import urlpatterns

    names = [pattern.name for pattern in urlpatterns if pattern.name and pattern.name.endswith("_action")]
    return [reverse(f"jobsapp:{name}", args=["retries"] if name == "set_action" else []) for name in names]


def test_actions_refuse_a_cross_site_post_without_the_csrf_middleware(django_user_model, populated, redis, settings):
    # Given a project without CsrfViewMiddleware (API-only projects remove it) and a signed-in staff user
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name != "django.middleware.csrf.CsrfViewMiddleware"]
    user = django_user_model.objects.create_user("victim", password="pw-victim-123", is_staff=True)
    browser = Client(enforce_csrf_checks=True)  # a browser: Django's test client skips the check otherwise
    browser.force_login(user)
    urls = dashboard_action_urls()
    assert len(urls) >= 4
    # When another site's page makes the browser POST to every dashboard action
    forged = {"action": "clear", "queue": "default", "scope": "all", "name": "nightly", "identity": "x"}
    for url in urls:
        response = browser.post(url, forged, HTTP_ORIGIN="https://evil.example", HTTP_REFERER="https://evil.example/")
        # Then each is refused, and nothing changed
        assert response.status_code == 403, url
        assert browser.post(url, forged).status_code == 403, url  # no Origin, no token: refused too
    assert redis.llen(keys.queue("default")) == 30
    # When the dashboard's own form posts with the token its page set
    page = browser.get(reverse("jobsapp:queues"))
    token = page.cookies["csrftoken"].value
    response = browser.post(reverse("jobsapp:queue_action"), {"action": "clear", "queue": "default", "csrfmiddlewaretoken": token})
    # Then it works
    assert response.status_code == 302
    assert redis.llen(keys.queue("default")) == 0


def test_relative_times_count_seconds_under_a_minute():
    from jobsapp.templatetags.jobs_dashboard import epoch_time

    # Given the present at 1,000,000 s, Then times within a minute read in seconds, later ones in words
    now = 1_000_000.0
    assert ">12 s ago</time>" in epoch_time(now - 12.7, now=now)
    assert ">0 s ago</time>" in epoch_time(now, now=now)
    assert ">in 5 s</time>" in epoch_time(now + 5.2, now=now)
    assert ">1\xa0minute ago</time>" in epoch_time(now - 90, now=now)
    assert ">in 2\xa0hours</time>" in epoch_time(now + 7200, now=now)


def test_a_job_page_says_how_many_seconds_ago_it_was_enqueued(staff, redis):
    import re

    # Given a job enqueued 12 seconds ago
    enqueued, jid = time.time() - 12, "0123456789abcdef01234567"
    job = {"class": "Noop", "args": [], "queue": "default", "jid": jid, "created_at": enqueued, "enqueued_at": enqueued}
    redis.lpush(keys.queue("default"), json.dumps(job))
    redis.sadd(keys.QUEUES, "default")
    # When its page is shown, Then it reads "12 s ago", not "0 minutes ago"
    page = staff.get(reverse("jobsapp:job", args=[jid])).content.decode()
    assert re.search(r">1[2-9] s ago</time>", page) and "0\xa0minutes" not in page, page


def test_a_failed_python_jobs_page_shows_its_backtrace_by_default(staff, redis):
    import re

    from jobsapp.payload import decode
    from jobsapp.worker.fetch import UnitOfWork
    from jobsapp.worker.retry import RetryPolicy
    from tests.testapp.jobs import ExplodeToDead

    # Given a job pushed without any backtrace option, whose perform raised in a worker (to the dead set)
    jid = ExplodeToDead.perform_async()
    inflight = "jobsapp:inflight:dashboard-test"
    raw = redis.lmove(keys.queue("default"), inflight, "RIGHT", "LEFT")
    try:
        ExplodeToDead().perform()
    except RuntimeError as exc:
        RetryPolicy(connection.get_redis(), inflight).handle(UnitOfWork(raw, "default"), decode(raw), ExplodeToDead, exc)
    assert redis.zcard("dead") == 1
    # When its page is shown
    page = staff.get(reverse("jobsapp:job", args=[jid])).content.decode()
    # Then it shows where it failed: the job's perform, innermost first
    backtrace = page.split('<pre class="backtrace">', 1)[1].split("</pre>", 1)[0]
    assert re.search(r"tests/testapp/jobs\.py:\d+:in `perform&#x27;$", backtrace.splitlines()[0]), backtrace


def test_a_failed_jobs_page_without_a_backtrace_says_how_to_get_one(staff, redis):
    # Given a failed job pushed with backtrace=False
    job = {"class": "X", "args": [], "queue": "default", "jid": "abcdefabcdefabcdefabcdef", "backtrace": False}
    job |= {"error_class": "RuntimeError", "error_message": "no", "failed_at": time.time(), "retry_count": 0}
    redis.zadd("dead", {json.dumps(job): time.time()})
    # When its page is shown, Then it says why there is none and how to get one
    page = staff.get(reverse("jobsapp:job", args=[job["jid"]])).content.decode()
    assert "No backtrace" in page and "backtrace=True" in page


# --- pages --------------------------------------------------------------------------------


def test_every_page_renders_with_data_in_every_state(staff, populated):
    for url in page_urls(populated):
        response = staff.get(url)
        assert response.status_code == 200, url
    overview = staff.get(reverse("jobsapp:overview")).content.decode()
    assert "123\u2009456" in overview and 'id="history-data"' in overview and "redis_version" in overview
    busy = staff.get(reverse("jobsapp:busy")).content.decode()
    assert populated["identity"] in busy and "LongJob" in busy and ">Quiet<" in busy and ">Stop<" in busy
    retries = staff.get(reverse("jobsapp:job_set", args=["retries"])).content.decode()
    assert "Net::ReadTimeout" in retries and "timed out" in retries and "app/jobs.py:10" in retries
    queues = staff.get(reverse("jobsapp:queues")).content.decode()
    assert "paused" in queues and ">Resume<" in queues


def test_stats_json_has_the_counters(staff, populated):
    stats = staff.get(reverse("jobsapp:stats_json")).json()
    assert (stats["processed"], stats["failed"], stats["enqueued"]) == (123456, 789, 31)
    assert (stats["scheduled"], stats["retries"], stats["dead"], stats["busy"], stats["processes"]) == (1, 1, 1, 1, 1)
    assert {"name": "imports", "size": 1, "paused": True} == {key: value for key, value in stats["queues"][1].items() if key != "latency"}


def test_queue_summaries_count_prioritised_jobs(staff, redis):
    # Given a queue holding one plain job and two prioritised ones
    Record.set(queue="urgent").perform_async("plain")
    Record.set(queue="urgent", priority=5).perform_async("five")
    Record.set(queue="urgent", priority=-5).perform_async("minus-five")
    # When the queues page and the overview's stats are read, Then the queue's size counts all three
    queues = staff.get(reverse("jobsapp:queues")).content.decode()
    row = queues[queues.index('<tr data-queue="urgent">') :]
    assert row[: row.index("</tr>")].count('<td class="num">3</td>') == 1
    stats = staff.get(reverse("jobsapp:stats_json")).json()
    assert stats["enqueued"] == 3
    assert [(queue["name"], queue["size"]) for queue in stats["queues"]] == [("urgent", 3)]


def test_queue_page_paginates_newest_first(staff, populated):
    first = staff.get(reverse("jobsapp:queue", args=["default"])).content.decode()
    assert "Page 1 of 2" in first and '<code>29, {"password"' in first.replace("&quot;", '"')
    second = staff.get(reverse("jobsapp:queue", args=["default"]) + "?page=2").content.decode()
    second = second.replace("&quot;", '"')
    assert '<code>0, {"password"' in second and "<code>29," not in second


def test_set_filters_by_class_and_substring(staff, redis):
    now = time.time()
    data.add_to_set(redis, keys.DEAD, data.failed(data.job("Alpha", ["one"]), message="disk full"), now)
    data.add_to_set(redis, keys.DEAD, data.failed(data.job("Beta", ["two"]), message="disk full"), now - 1)
    data.add_to_set(redis, keys.DEAD, data.failed(data.job("Alpha", ["three"]), message="timeout"), now - 2)
    url = reverse("jobsapp:job_set", args=["dead"])
    alpha = staff.get(url + "?class=Alpha").content.decode()
    assert "one" in alpha and "three" in alpha and "Beta" not in alpha
    disk = staff.get(url + "?class=Alpha&q=DISK").content.decode()
    assert "one" in disk and "three" not in disk


def test_job_page_finds_the_job_wherever_it_is(staff, populated):
    for key, expected in (
        ("running", "Running in"),
        ("scheduled", "Scheduled to run"),
        ("retry", "Next retry"),
        ("dead", "Dead since"),
    ):
        body = staff.get(reverse("jobsapp:job", args=[populated[key]])).content.decode()
        assert expected in body, key
    queued = json.loads(populated["queued"][0])["jid"]
    assert "Waiting in queue" in staff.get(reverse("jobsapp:job", args=[queued])).content.decode()
    assert staff.get(reverse("jobsapp:job", args=["0" * 24])).status_code == 404


def test_hostile_strings_render_escaped_on_every_page(staff, redis):
    # Given jobs whose class, queue, args, error and process fields are markup
    hostile_job = data.job(HOSTILE, [HOSTILE, {"note": HOSTILE}], queue=HOSTILE)
    data.enqueue(redis, hostile_job)
    data.add_to_set(
        redis,
        keys.RETRY,
        data.failed(data.job(HOSTILE, [HOSTILE], queue=HOSTILE), error_class=HOSTILE, message=HOSTILE, backtrace=[HOSTILE]),
        time.time() + 60,
    )
    data.add_to_set(redis, keys.DEAD, data.failed(data.job(HOSTILE, jid="a/b"), message=HOSTILE), time.time())
    data.add_to_set(redis, keys.SCHEDULE, data.job(HOSTILE, [HOSTILE], queue=""), time.time() + 60)
    data.process(redis, tag=HOSTILE, queues=[HOSTILE], running=[hostile_job])
    redis.sadd(keys.QUEUES, "")
    urls = [
        reverse("jobsapp:overview"),
        reverse("jobsapp:queues"),
        reverse("jobsapp:queue", args=[HOSTILE]),
        reverse("jobsapp:busy"),
        reverse("jobsapp:job", args=[hostile_job["jid"]]),
    ]
    urls += [reverse("jobsapp:job_set", args=[slug]) for slug in ("scheduled", "retries", "dead")]
    for url in urls:
        # When a staff user opens the page
        response = staff.get(url)
        body = response.content.decode()
        # Then it renders, and the markup only ever appears escaped
        assert response.status_code == 200, url
        assert "<script>alert" not in body, url
        assert HOSTILE_ESCAPED in body, url


def test_args_are_truncated_and_secrets_redacted_everywhere(staff, redis):
    long_job = data.job("Big", ["x" * 5000, {"password": "hunter2", "api_token": "tok-999"}])
    data.enqueue(redis, long_job)
    data.add_to_set(redis, keys.RETRY, data.failed(data.job("Big", [{"Authorization": "Bearer sekrit"}])), time.time())
    data.process(redis, running=[data.job("Run", [{"secret": "s3cr3t"}])])
    for url in (
        reverse("jobsapp:queue", args=["default"]),
        reverse("jobsapp:job", args=[long_job["jid"]]),
        reverse("jobsapp:job_set", args=["retries"]),
        reverse("jobsapp:busy"),
    ):
        body = staff.get(url).content.decode()
        for secret in ("hunter2", "tok-999", "sekrit", "s3cr3t"):
            assert secret not in body, (url, secret)
    queue_page = staff.get(reverse("jobsapp:queue", args=["default"])).content.decode()
    assert "x" * 300 not in queue_page and "…" in queue_page


def test_hostile_query_parameters_never_500(staff, populated):
    for query in (
        "?page=-5",
        "?page=abc",
        "?page=99999999999999999999",
        "?per_page=100000",
        "?days=999999",
        "?class=" + "%2A" * 300,
        "?q=%5B%5C",
        "?page=&per_page=",
    ):
        for url in (
            reverse("jobsapp:overview"),
            reverse("jobsapp:queue", args=["default"]),
            reverse("jobsapp:job_set", args=["dead"]),
        ):
            assert staff.get(url + query).status_code == 200, url + query
    assert staff.get(reverse("jobsapp:job_set", args=["nope"])).status_code == 404


# --- actions ------------------------------------------------------------------------------


def test_queue_actions_pause_resume_delete_and_clear(staff, populated, redis):
    url = reverse("jobsapp:queue_action")
    response = staff.post(url, {"queue": "default", "action": "pause", "next": "/jobs/queues/"})
    assert response.status_code == 302 and response["Location"] == "/jobs/queues/"
    assert redis.sismember(keys.PAUSED, "default")
    staff.post(url, {"queue": "default", "action": "resume"})
    assert not redis.sismember(keys.PAUSED, "default")
    jids = [json.loads(raw)["jid"] for raw in populated["queued"][:2]]
    staff.post(url, {"queue": "default", "action": "delete", "jid": jids})
    assert redis.llen(keys.queue("default")) == 28
    staff.post(url, {"queue": "default", "action": "clear"})
    assert not redis.exists(keys.queue("default"))
    assert staff.post(url, {"queue": "default", "action": "explode"}).status_code == 400


def test_open_redirects_are_refused(staff, populated):
    for target in ("https://evil.example/", "//evil.example/jobs/", "/admin/"):
        response = staff.post(reverse("jobsapp:queue_action"), {"queue": "x", "action": "pause", "next": target})
        assert response["Location"] == reverse("jobsapp:queue", args=["x"]), target


def test_process_quiet_and_stop_push_signals(staff, populated, redis):
    identity = populated["identity"]
    url = reverse("jobsapp:process_action")
    staff.post(url, {"identity": identity, "action": "quiet"})
    staff.post(url, {"identity": identity, "action": "stop"})
    assert redis.lrange(keys.signals(identity), 0, -1) == [b"TERM", b"TSTP"]
    staff.post(url, {"identity": "queue:default", "action": "stop"})
    assert not redis.exists(keys.signals("queue:default"))
    assert staff.post(url, {"identity": identity, "action": "TTIN"}).status_code == 400


def test_set_actions_on_selected_entries(staff, redis):
    now = time.time()
    items = [data.failed(data.job(args=[index]), count=4) for index in range(3)]
    for index, item in enumerate(items):
        data.add_to_set(redis, keys.RETRY, item, now + index)
    page = staff.get(reverse("jobsapp:job_set", args=["retries"])).content.decode()
    entry_keys = [part.split('"')[0] for part in page.split('name="key" value="')[1:]]
    assert len(entry_keys) == 3
    url = reverse("jobsapp:set_action", args=["retries"])
    staff.post(url, {"action": "retry", "scope": "selected", "key": entry_keys[0]})
    assert json.loads(redis.lindex(keys.queue("default"), 0))["retry_count"] == 3
    staff.post(url, {"action": "kill", "scope": "selected", "key": entry_keys[1]})
    assert redis.zcard(keys.DEAD) == 1
    staff.post(url, {"action": "delete", "scope": "selected", "key": entry_keys[2]})
    assert redis.zcard(keys.RETRY) == 0
    dead_url = reverse("jobsapp:set_action", args=["dead"])
    assert staff.post(dead_url, {"action": "kill", "scope": "all"}).status_code == 400
    dead_key = staff.get(reverse("jobsapp:job_set", args=["dead"])).content.decode().split('name="key" value="')[1]
    staff.post(dead_url, {"action": "add_to_queue", "scope": "selected", "key": dead_key.split('"')[0]})
    assert redis.zcard(keys.DEAD) == 0 and redis.llen(keys.queue("default")) == 2


def test_bulk_actions_respect_the_filter(staff, redis):
    now = time.time()
    for klass in ("Keep", "Go", "Go"):
        data.add_to_set(redis, keys.SCHEDULE, data.job(klass, queue="later"), now + 100)
    url = reverse("jobsapp:set_action", args=["scheduled"])
    staff.post(url, {"action": "add_to_queue", "scope": "all", "class": "Go"})
    assert redis.llen(keys.queue("later")) == 2 and redis.zcard(keys.SCHEDULE) == 1
    staff.post(url, {"action": "delete", "scope": "all"})
    assert redis.zcard(keys.SCHEDULE) == 0


# --- Redis down ---------------------------------------------------------------------------


def test_redis_down_answers_503_not_500(staff, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_SOCKET_TIMEOUT_SECONDS": 0.5}
    connection.reset()
    for url in (
        reverse("jobsapp:overview"),
        reverse("jobsapp:queues"),
        reverse("jobsapp:busy"),
        reverse("jobsapp:job_set", args=["dead"]),
        reverse("jobsapp:job", args=["a" * 24]),
        reverse("jobsapp:metrics"),
    ):
        assert staff.get(url).status_code == 503, url
    response = staff.get(reverse("jobsapp:stats_json"))
    assert response.status_code == 503 and response.json()["error"] == "redis_unavailable"
    post = staff.post(reverse("jobsapp:queue_action"), {"queue": "default", "action": "clear"})
    assert post.status_code == 503
    assert "Redis is unavailable" in staff.get(reverse("jobsapp:queues")).content.decode()


def test_hostile_numbers_and_backtrace_bombs_never_500(staff, redis):
    # Given jobs and a process whose numbers no sane client writes, and a backtrace that would
    # inflate to far more than a page may hold
    import base64
    import json as json_module
    import zlib

    redis.lpush("queue:default", '{"class":"X","args":[],"jid":"a","enqueued_at":' + "9" * 400 + "}")
    redis.lpush("queue:weird", '{"class":"X","args":[],"jid":"b","enqueued_at":-1e999}')
    redis.sadd("queues", "default", "weird")
    bomb = base64.b64encode(zlib.compress(b'["' + b"x" * 20_000_000 + b'"]')).decode()
    redis.zadd("retry", {json_module.dumps({"class": "X", "args": [], "jid": "c", "error_backtrace": bomb}): 1})
    redis.sadd("processes", "host:1:abc")
    redis.hset("host:1:abc", mapping={"info": '{"hostname":"host","pid":1}', "busy": "1e999", "rss": "nan", "beat": "x"})
    # When an operator opens the pages, Then each answers 200
    for url in ("/jobs/", "/jobs/stats.json", "/jobs/queues/", "/jobs/queues/weird", "/jobs/sets/retries/", "/jobs/busy/", "/jobs/metrics"):
        response = staff.get(url)
        assert response.status_code == 200, url
    assert "NaN" not in staff.get("/jobs/stats.json").content.decode()


def test_without_login_url_anonymous_visitors_go_to_the_admin_login_that_exists(client, settings, django_user_model):
    # Given a project that never set LOGIN_URL (Django's default /accounts/login/ is a 404 there)
    from django.conf import global_settings

    settings.LOGIN_URL = global_settings.LOGIN_URL
    from tracking.models import Task

    task = Task.objects.create(name="t", owner=django_user_model.objects.create_user("ann"), total=0)
    # When an anonymous visitor opens the dashboard or a progress page, Then they go to the admin's login
    for url in ("/jobs/", "/jobs/queues/", f"/tasks/{task.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next="), (url, response["Location"])
    # And a project's own LOGIN_URL wins
    settings.LOGIN_URL = "/sign-in/"
    assert client.get("/jobs/")["Location"].startswith("/sign-in/?next=")
