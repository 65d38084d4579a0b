"""System checks for the engine's settings. Ids are stable: jobsapp.E001 onwards.

``runworkers`` runs the checks tagged ``jobsapp`` before it starts (an error stops it); ``manage.py
check`` and ``runserver`` run them all. Every key of ``settings.JOBSAPP`` is checked against its
default in ``jobsapp/conf.py``: an unknown key is E001; a value whose type is not the default's
(a string where a list is expected, ``"2"`` for a number) is E005; a negative number, or zero
where at least one is needed, is E006. A setting added to ``conf.DEFAULTS`` is covered at once
(its default's type is the rule; a ``None`` default accepts anything); give it a custom rule here
only when that is not enough.

| id | what |
|---|---|
| jobsapp.E001 | unknown JOBSAPP key |
| jobsapp.E002 | FETCH is neither "reliable" nor "basic" |
| jobsapp.E003 | MAX_PAYLOAD_BYTES is not a positive int |
| jobsapp.E004 | CONCURRENCY is not a positive int |
| jobsapp.E005 | a JOBSAPP value of the wrong type |
| jobsapp.E006 | a JOBSAPP number out of range (CONCURRENCY and ASYNC_CONCURRENCY also above ``runworkers``' maxima) |
| jobsapp.E007 | QUEUES names no queue, or a queue entry that ``-q`` would refuse |
| jobsapp.E008 | LOG_FORMAT is neither "text" nor "json" |
| jobsapp.E010 | a bad PERIODIC entry or ``@periodic_job`` (the workers refuse to start) |
| jobsapp.E011 | QUEUE_LIMITS is not {queue name: most jobs at once (>= 1)} |
| jobsapp.E020 | TIMEOUT_HARD_LIMIT_SECONDS is neither None nor a positive number of seconds |
| jobsapp.W001 | the dashboard is in the URLs but no login page exists for anonymous visitors |
| jobsapp.W002 | DEFAULT_QUEUE is not in QUEUES: ``runworkers`` without ``-q`` never takes jobs pushed there |
| jobsapp.W050 | OUTBOX on, the outbox table missing (``migrate jobsapp``); a database check (``check --database default``) |
| jobsapp.E040-E042, E044 | Sentinel, ENQUEUE_REPLICAS and SHARDS (``check_connection_settings``; E043 is unused) |
| jobsapp.W045 | a class routed to a shard whose workers do not serve its queue (its jobs would sit unrun) |
| jobsapp.E046 | REDIS_CLUSTER not a bool, or with REDIS_CACHE_ALIAS (django-redis has no cluster client) or SENTINELS |
| jobsapp.W046 | REDIS_CLUSTER with Ruby-style job class names: Ruby Sidekiq cannot run on a cluster |
| jobsapp.E047 | the server REDIS_URL names is a cluster node and REDIS_CLUSTER is off, or the reverse (tag ``jobsapp_redis``: asks Redis) |
| jobsapp.E048 | a cluster master whose maxmemory-policy is not noeviction (tag ``jobsapp_redis``) |
| jobsapp.W048 | CLUSTER_PARTITIONS leaves masters of the cluster without a partition, or puts two on one master (tag ``jobsapp_redis``) |
| jobsapp.E201-E205, W201 | the Django tasks backend's TASKS entry (``jobsapp.django_tasks.JobsBackend.check``) |

tests/jobsapp/test_check_ids.py pins every id: an id is never renumbered or reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.recorder import MigrationRecorder
from redis.connection import parse_url
from redis.crc import key_slot

from . import keys, outbox, registry, shards
from .client import job_template
from .conf import DEFAULTS, jobs_settings
from .redaction import redact_url
from .settings_validation import settings_problems

SETTING_IDS = {"unknown": "jobsapp.E001", "type": "jobsapp.E005", "range": "jobsapp.E006"}

#: Numbers that must be at least 1 (all other numbers must be at least 0).
AT_LEAST_ONE = frozenset(
    {
        "CONCURRENCY",
        "ASYNC_CONCURRENCY",
        "PROCESSES",
        "FETCH_BATCH_SIZE",
        "POISON_RECOVERY_LIMIT",
        "MAX_PAYLOAD_BYTES",
        "ERROR_MESSAGE_MAX_CHARS",
        "CLUSTER_PARTITIONS",
    }
)
#: Checked by their own, older ids (kept stable).
OWN_CHECKS = frozenset(
    {
        "FETCH",
        "MAX_PAYLOAD_BYTES",
        "CONCURRENCY",
        # check_connection_settings (E040-E044) and jobsapp.shards judge these
        "SENTINELS",
        "SENTINEL_SERVICE",
        "SENTINEL_OPTIONS",
        "ENQUEUE_REPLICAS",
        "ENQUEUE_REPLICAS_TIMEOUT_SECONDS",
        "SHARDS",
        "REDIS_CLUSTER",  # check_cluster_settings (E046)
        "PERIODIC",  # check_periodic
        "QUEUE_LIMITS",  # E011 below
        "TIMEOUT_HARD_LIMIT_SECONDS",  # E020 below
    }
)


def queue_problems(queues: Any) -> list[checks.CheckMessage]:
    """QUEUES must name queues as ``-q`` takes them: ``"name"`` or ``"name,weight"``."""
    if not isinstance(queues, (list, tuple)):
        return []  # E005 already says so
    from .worker.fetch import QueueOrder

    hint = 'Use a list of queue names, each optionally with a weight: ["critical,3", "default"].'
    if not queues:
        return [checks.Error("JOBSAPP['QUEUES'] is empty: workers would listen on no queue.", hint=hint, id="jobsapp.E007")]
    if not all(isinstance(entry, str) and entry.strip() for entry in queues):
        return [
            checks.Error(f"JOBSAPP['QUEUES'] is {list(queues)!r}: every entry must be a non-empty string.", hint=hint, id="jobsapp.E007")
        ]
    try:
        QueueOrder.parse(list(queues))
    except ValueError as error:
        return [checks.Error(f"JOBSAPP['QUEUES'] is {list(queues)!r}: {error}.", hint=hint, id="jobsapp.E007")]
    return []


@checks.register("jobsapp")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    user = getattr(settings, "JOBSAPP", None)
    # PROCESSES defaults to None (one process per CPU); a value given is a whole number >= 1
    judged = {**DEFAULTS, "PROCESSES": 1}
    skip = OWN_CHECKS | ({"PROCESSES"} if isinstance(user, Mapping) and user.get("PROCESSES") is None else set())
    messages = settings_problems("JOBSAPP", user, judged, ids=SETTING_IDS, at_least_one=AT_LEAST_ONE, skip=frozenset(skip))
    if user is not None and not isinstance(user, Mapping):
        return messages
    if jobs_settings.FETCH not in ("reliable", "basic"):
        messages.append(
            checks.Error(
                f"JOBSAPP['FETCH'] is {jobs_settings.FETCH!r}.",
                hint='Use "reliable" (the default, nothing lost on SIGKILL) or "basic" (Sidekiq\'s BRPOP).',
                id="jobsapp.E002",
            )
        )
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        messages.append(
            checks.Error(
                f"JOBSAPP['MAX_PAYLOAD_BYTES'] is {limit!r}.",
                hint="Use a positive number of bytes (default 1 MiB).",
                id="jobsapp.E003",
            )
        )
    concurrency = jobs_settings.CONCURRENCY
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        messages.append(
            checks.Error(
                f"JOBSAPP['CONCURRENCY'] is {concurrency!r}.",
                hint="Use a positive number of processor threads (default 10).",
                id="jobsapp.E004",
            )
        )
    messages.extend(_above_worker_maxima())
    messages.extend(check_periodic())
    from .limiter import queue_limits_problem

    problem = queue_limits_problem(jobs_settings.QUEUE_LIMITS)
    if problem:
        messages.append(checks.Error(problem, hint='Use {"queue name": most jobs at once (>= 1)}.', id="jobsapp.E011"))
    messages.extend(queue_problems(jobs_settings.QUEUES))
    hard_limit = jobs_settings.TIMEOUT_HARD_LIMIT_SECONDS
    if hard_limit is not None and not (_is_number(hard_limit) and 0 < hard_limit < float("inf")):
        messages.append(
            checks.Error(
                f"JOBSAPP['TIMEOUT_HARD_LIMIT_SECONDS'] is {hard_limit!r}.",
                hint="Use None (no hard limit, the default) or the seconds a job may outlive its timeout before its process is recycled.",
                id="jobsapp.E020",
            )
        )
    if isinstance(jobs_settings.LOG_FORMAT, str) and jobs_settings.LOG_FORMAT not in ("text", "json"):
        messages.append(
            checks.Error(
                f"JOBSAPP['LOG_FORMAT'] is {jobs_settings.LOG_FORMAT!r}.", hint='Use "text" (the default) or "json".', id="jobsapp.E008"
            )
        )
    return messages


def _above_worker_maxima() -> list[checks.CheckMessage]:
    """CONCURRENCY and ASYNC_CONCURRENCY above what ``runworkers`` accepts: said here, naming
    the setting, rather than by ``runworkers`` refusing a flag the user never typed."""
    from .worker.launcher import MAX_ASYNC_CONCURRENCY, MAX_CONCURRENCY

    messages: list[checks.CheckMessage] = []
    for key, maximum in (("CONCURRENCY", MAX_CONCURRENCY), ("ASYNC_CONCURRENCY", MAX_ASYNC_CONCURRENCY)):
        value = getattr(jobs_settings, key)
        if _is_number(value) and value > maximum:
            messages.append(
                checks.Error(
                    f"JOBSAPP[{key!r}] is {value!r}: runworkers runs at most {maximum:,} per process.",
                    hint=f"Use at most {maximum:,} (default {DEFAULTS[key]!r}); for more, run more processes (-P) or hosts.",
                    id=SETTING_IDS["range"],
                )
            )
    return messages


@checks.register("jobsapp")
def check_default_queue(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A DEFAULT_QUEUE the default workers do not serve: jobs without a queue of their own would
    wait for ever (a warning: ``runworkers -q`` may still name it)."""
    default_queue, queues = jobs_settings.DEFAULT_QUEUE, jobs_settings.QUEUES
    if not isinstance(default_queue, str) or not isinstance(queues, (list, tuple)):
        return []  # E005 already says so
    served = {entry.split(",")[0].strip() for entry in queues if isinstance(entry, str)}
    if default_queue in served:
        return []
    return [
        checks.Warning(
            f"JOBSAPP['DEFAULT_QUEUE'] is {default_queue!r}, which JOBSAPP['QUEUES'] ({list(queues)!r}) does not list: "
            "jobs whose class names no queue go there, and runworkers without -q never takes them.",
            hint=f"Add {default_queue!r} to JOBSAPP['QUEUES'], or run the workers with -q {default_queue}.",
            id="jobsapp.W002",
        )
    ]


@checks.register(checks.Tags.database)
def check_outbox_table(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """jobsapp.W050: OUTBOX is on and its table is missing. A warning, not an error: the engine
    runs without the outbox (pushes wait for the commit alone) until the migration is applied.
    A database check, as Django's: run when the command names the database (``check --database
    default``, ``migrate``), never by a plain ``check``, which must not need a database."""
    if jobs_settings.OUTBOX is not True or DEFAULT_DB_ALIAS not in (kwargs.get("databases") or ()):
        return []
    try:
        tables = connections[DEFAULT_DB_ALIAS].introspection.table_names()
    except DatabaseError as exc:
        return [
            checks.Warning(
                f"JOBSAPP['OUTBOX'] is on but the database could not be asked whether the table {outbox.TABLE} exists ({exc}).",
                hint="Check DATABASES, then run `python manage.py migrate jobsapp` if the table is missing.",
                id="jobsapp.W050",
            )
        ]
    if outbox.TABLE in tables or MigrationRecorder.Migration._meta.db_table not in tables:
        return []  # present, or a database never migrated at all (its first migrate creates it)
    problem = f"the table {outbox.TABLE} does not exist"
    return [
        checks.Warning(
            f"JOBSAPP['OUTBOX'] is on but {problem}: pushes inside transactions wait for the commit without the outbox, "
            "so a job is lost if Redis is down at commit or the process dies right after it.",
            hint="Run `python manage.py migrate jobsapp`.",
            id="jobsapp.W050",
        )
    ]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_sentinel_list(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(
            isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], int) for pair in value
        )
    )


def _connection_problems(shard: str) -> list[tuple[str, str, str]]:
    """(id, message, hint) for one shard's Sentinel and replication settings."""
    where = "JOBSAPP" if shard == shards.DEFAULT else f"JOBSAPP['SHARDS'][{shard!r}]"
    found: list[tuple[str, str, str]] = []
    sentinels = shards.setting(shard, "SENTINELS")
    service = shards.setting(shard, "SENTINEL_SERVICE")
    if sentinels is not None and not _is_sentinel_list(sentinels):
        hint = 'Use a list of [host, port] pairs: [["10.0.0.1", 26379], ...].'
        found.append(("jobsapp.E040", f"{where}['SENTINELS'] is {sentinels!r}.", hint))
    elif sentinels is not None and (not isinstance(service, str) or not service):
        hint = "Name the master as the Sentinels know it (sentinel monitor <name> ...)."
        found.append(("jobsapp.E040", f"{where}['SENTINEL_SERVICE'] is {service!r}.", hint))
    options = shards.setting(shard, "SENTINEL_OPTIONS")
    if not isinstance(options, dict):
        hint = 'Use a dict of connection options for the Sentinels, e.g. {"password": "..."}.'
        found.append(("jobsapp.E041", f"{where}['SENTINEL_OPTIONS'] is {options!r}.", hint))
    replicas = shards.setting(shard, "ENQUEUE_REPLICAS")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        hint = "Use a number of replicas >= 0 (0, the default, does not wait)."
        found.append(("jobsapp.E042", f"{where}['ENQUEUE_REPLICAS'] is {replicas!r}.", hint))
    timeout = shards.setting(shard, "ENQUEUE_REPLICAS_TIMEOUT_SECONDS")
    if not _is_number(timeout) or timeout <= 0:
        found.append(("jobsapp.E042", f"{where}['ENQUEUE_REPLICAS_TIMEOUT_SECONDS'] is {timeout!r}.", "Use a positive number of seconds."))
    return found


@checks.register("jobsapp")
def check_connection_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Sentinel, ENQUEUE_REPLICAS and SHARDS (ids jobsapp.E040-E049)."""
    messages: list[checks.CheckMessage] = [
        checks.Error(f"JOBSAPP['SHARDS']: {problem}.", hint="See jobsapp/shards.py for the form of a shard.", id="jobsapp.E044")
        for problem in shards.problems()
    ]
    if messages:
        return messages
    for shard in shards.names():
        messages += [checks.Error(message, hint=hint, id=check_id) for check_id, message, hint in _connection_problems(shard)]
    return messages


def _cluster_problems(shard: str) -> list[checks.CheckMessage]:
    where = "JOBSAPP" if shard == shards.DEFAULT else f"JOBSAPP['SHARDS'][{shard!r}]"
    cluster = shards.setting(shard, "REDIS_CLUSTER")
    if not isinstance(cluster, bool):
        return [checks.Error(f"{where}['REDIS_CLUSTER'] is {cluster!r}.", hint="Use True or False.", id="jobsapp.E046")]
    if not cluster:
        return []
    messages: list[checks.CheckMessage] = []
    if shards.setting(shard, "REDIS_CACHE_ALIAS"):
        messages.append(
            checks.Error(
                f"{where}['REDIS_CLUSTER'] is on with REDIS_CACHE_ALIAS: django-redis has no Redis Cluster client, "
                "so the alias cannot reach a cluster.",
                hint=f"Remove {where}['REDIS_CACHE_ALIAS'] and give REDIS_URL naming any node of the cluster "
                "(a managed service's configuration endpoint).",
                id="jobsapp.E046",
            )
        )
    if shards.setting(shard, "SENTINELS"):
        messages.append(
            checks.Error(
                f"{where}['REDIS_CLUSTER'] is on with SENTINELS: a cluster fails over by itself, without Sentinel.",
                hint=f"Remove {where}['SENTINELS'] and give REDIS_URL naming any node of the cluster.",
                id="jobsapp.E046",
            )
        )
    return messages


@checks.register("jobsapp")
def check_cluster_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """jobsapp.E046: REDIS_CLUSTER with a setting that cannot reach a cluster; jobsapp.W046: Ruby
    Sidekiq's job names on a cluster (Sidekiq cannot run there: interop is out of scope)."""
    if shards.problems():
        return []  # E044 already says what is wrong
    messages: list[checks.CheckMessage] = []
    for shard in shards.names():
        messages += _cluster_problems(shard)
    if any(shards.setting(shard, "REDIS_CLUSTER") is True for shard in shards.names()):
        ruby_style = sorted(name for name in registry.names() if "." not in name or "::" in name)
        if ruby_style:
            messages.append(
                checks.Warning(
                    f"REDIS_CLUSTER is on and job classes are named as Ruby Sidekiq names its workers ({', '.join(ruby_style[:5])}): "
                    "Ruby Sidekiq cannot run on a Redis Cluster, and the cluster's key names carry hash tags Sidekiq does not read, "
                    "so no Ruby process will take or push these jobs.",
                    hint="Run Ruby Sidekiq against a standalone Redis (a shard of its own, JOBSAPP['SHARDS']), "
                    "or silence jobsapp.W046 if only Python runs these classes.",
                    id="jobsapp.W046",
                )
            )
    return messages


#: How long the checks that ask Redis wait for it (a Redis that does not answer is not a settings
#: problem: those checks then say nothing, and the workers wait for it as usual).
CHECK_TIMEOUT_SECONDS = 2.0


@checks.register("jobsapp_redis")
def check_redis_mode(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """jobsapp.E047: the server REDIS_URL names disagrees with REDIS_CLUSTER (a cluster node given
    as a plain URL answers MOVED for most keys; a plain server has no slot map); jobsapp.E048: a
    cluster master that may evict jobs. Asks Redis, with a short timeout; says nothing when
    Redis does not answer. Tagged ``jobsapp_redis``, so ``runworkers`` does not wait on it."""
    if shards.problems():
        return []
    messages: list[checks.CheckMessage] = []
    for shard in shards.names():
        if shards.setting(shard, "REDIS_CACHE_ALIAS") or shards.setting(shard, "SENTINELS"):
            continue
        url = shards.setting(shard, "REDIS_URL") or jobs_settings.REDIS_URL
        if not url:
            continue
        messages += _redis_mode_problems(shard, str(url), cluster=shards.setting(shard, "REDIS_CLUSTER") is True)
    return messages


def _redis_mode_problems(shard: str, url: str, *, cluster: bool) -> list[checks.CheckMessage]:
    where = "JOBSAPP" if shard == shards.DEFAULT else f"JOBSAPP['SHARDS'][{shard!r}]"
    shown = redact_url(url)
    client = redis.Redis.from_url(url, socket_timeout=CHECK_TIMEOUT_SECONDS, socket_connect_timeout=CHECK_TIMEOUT_SECONDS)
    try:
        enabled = str(client.info("cluster").get("cluster_enabled", 0)) == "1"
        if not enabled or not cluster:
            return _mode_mismatch(where, shown, enabled=enabled, cluster=cluster)
        slot_map = client.execute_command("CLUSTER", "SLOTS")
        masters = [(_text(host), int(port)) for host, port, *_ in (entry[2] for entry in slot_map)]
    except redis.ResponseError:  # INFO restricted (managed Redis): nothing to judge
        return []
    except (redis.ConnectionError, redis.TimeoutError, OSError):  # not answering: not a settings problem
        return []
    finally:
        client.close()
    messages: list[checks.CheckMessage] = _partition_spread_problems(shard, where, slot_map)
    for host, port in sorted(set(masters)):
        node = redis.Redis(
            host=host, port=port, socket_timeout=CHECK_TIMEOUT_SECONDS, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, **_credentials(url)
        )
        try:
            policy = str(node.info("memory").get("maxmemory_policy", "noeviction"))
        except (redis.RedisError, OSError):  # restricted or away: nothing to judge on this master
            continue
        finally:
            node.close()
        if policy != "noeviction":
            messages.append(
                checks.Error(
                    f"The cluster master {host}:{port} ({shown}) has maxmemory-policy {policy!r}: "
                    "under memory pressure it may evict queued jobs, retries and locks.",
                    hint="Set maxmemory-policy noeviction on every master (a managed service's parameter group).",
                    id="jobsapp.E048",
                )
            )
    return messages


def _partition_spread_problems(shard: str, where: str, slot_map: list[Any]) -> list[checks.CheckMessage]:
    """jobsapp.W048: the partitions' slots (``keys.partition_tag``) do not land one per master."""
    count = shards.setting(shard, "CLUSTER_PARTITIONS")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return []  # E005/E006 say so
    owners = {}
    for low, high, master, *_ in slot_map:
        owners[(int(low), int(high))] = f"{_text(master[0])}:{int(master[1])}"
    masters = set(owners.values())
    used = []
    for index in range(count):
        slot = key_slot(keys.partition_tag(index, count).encode("ascii"))
        used += [owner for (low, high), owner in owners.items() if low <= slot <= high]
    if len(set(used)) == len(used) == len(masters):
        return []
    if count < len(masters):
        what = f"leaves {len(masters) - len(set(used))} of the cluster's {len(masters)} masters without a partition"
    elif count > len(masters):
        what = f"puts more than one partition on a master of the cluster's {len(masters)}"
    else:
        what = f"puts its partitions on {len(set(used))} of the cluster's {len(masters)} masters (its slots are not split evenly)"
    return [
        checks.Warning(
            f"{where}['CLUSTER_PARTITIONS'] is {count}, which {what}: a busy queue's commands do not spread over every master.",
            hint=f"Set {where}['CLUSTER_PARTITIONS'] to the number of masters ({len(masters)}) on every producer and worker; "
            "`manage.py jobs cluster` shows which master holds each partition (docs/operations/cluster.md).",
            id="jobsapp.W048",
        )
    ]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _credentials(url: str) -> dict[str, Any]:
    options = parse_url(url)
    return {key: options[key] for key in ("username", "password") if options.get(key)}


def _mode_mismatch(where: str, shown: str, *, enabled: bool, cluster: bool) -> list[checks.CheckMessage]:
    if enabled and not cluster:
        return [
            checks.Error(
                f"The Redis at {shown} is a Redis Cluster node (cluster_enabled:1) but {where}['REDIS_CLUSTER'] is off: "
                "commands on keys of other nodes' slots fail with MOVED, and the scripts' keys span slots (CROSSSLOT).",
                hint=f"Set {where}['REDIS_CLUSTER'] = True (REDIS_URL may name any node).",
                id="jobsapp.E047",
            )
        ]
    if cluster and not enabled:
        return [
            checks.Error(
                f"{where}['REDIS_CLUSTER'] is on but the Redis at {shown} is not a cluster node (cluster_enabled:0).",
                hint=f"Remove {where}['REDIS_CLUSTER'] for a standalone Redis, or point REDIS_URL at a node of the cluster.",
                id="jobsapp.E047",
            )
        ]
    return []


@checks.register("jobsapp")
def check_shard_classes(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """jobsapp.W045: a class listed in a shard's CLASSES whose queue ``runworkers --shard`` does
    not serve by default (the shard's QUEUES, else JOBSAPP['QUEUES']): its jobs would sit unrun."""
    if shards.problems():
        return []  # E044 already says what is wrong
    messages: list[checks.CheckMessage] = []
    for shard in shards.names()[1:]:
        served = shards.routed_queues(shard) or [str(entry).split(",")[0].strip() for entry in jobs_settings.QUEUES or []]
        for class_name in shards.setting_list(shard, "CLASSES"):
            if not registry.is_registered(class_name):
                continue
            queue = job_template(class_name).queue
            if queue in served:
                continue
            messages.append(
                checks.Warning(
                    f"Job class {class_name!r} is routed to shard {shard!r}, whose workers serve {', '.join(served)} "
                    f"by default, not its queue {queue!r}: its jobs would sit unrun.",
                    hint=f"Add {queue!r} to JOBSAPP['SHARDS'][{shard!r}]['QUEUES'], give the class one of those queues, "
                    f"or run `runworkers --shard {shard} -q {queue}`.",
                    id="jobsapp.W045",
                )
            )
    return messages


def check_periodic() -> list[checks.CheckMessage]:
    """jobsapp.E010: a bad JOBSAPP["PERIODIC"] entry or @periodic_job (the workers refuse to
    start), one message per bad entry: a cron no date matches (30 February) is one."""
    from .periodic import validate

    _, problems = validate()
    return [checks.Error(problem, hint="See the Periodic jobs page of the documentation.", id="jobsapp.E010") for problem in problems]


@checks.register(checks.Tags.urls)
def check_login_page(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """jobsapp.W001: the dashboard is in the URLs but anonymous visitors would be sent to a login
    page that does not exist (no LOGIN_URL and no admin URLs). Tagged ``urls``: runworkers skips it."""
    from django.conf import global_settings
    from django.urls import NoReverseMatch, Resolver404, resolve, reverse

    if not getattr(settings, "ROOT_URLCONF", None):  # a worker-only settings module: no URLs, no dashboard
        return []
    try:
        reverse("jobsapp:overview")
    except NoReverseMatch:
        return []
    try:
        reverse("admin:login")
        return []
    except NoReverseMatch:
        pass
    login_url = str(settings.LOGIN_URL)
    if login_url != global_settings.LOGIN_URL or "://" in login_url:
        return []
    try:
        resolve(login_url)
        return []
    except Resolver404:
        return [
            checks.Warning(
                f"The jobs dashboard sends anonymous visitors to LOGIN_URL, {login_url!r}, which no URL answers "
                "(and the admin's URLs, used when LOGIN_URL is not set, are not included).",
                hint='Set LOGIN_URL to your login page, or include admin.site.urls (path("admin/", admin.site.urls)).',
                id="jobsapp.W001",
            )
        ]
