"""Only registered job classes ever run: no payload field is imported, unpickled or evaluated.

Two proofs. A static scan of ``jobsapp/`` and ``tracking/`` (the AST, not grep) for every way
Python turns data into code: pickle/marshal/shelve/dill, yaml loading, eval/exec/compile,
``__import__``, importlib and ``import_string``. The only allowed uses are listed with the reason
(each loads a dotted path from Django settings, which an attacker who can write to Redis does not
control). And a dynamic one: hostile class strings run through the real processor import nothing.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobsapp", "tracking")

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "yaml", "jsonpickle", "importlib"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "import_module", "import_string", "load", "loads", "unsafe_load"}

# (file, name) -> why it is safe. A new entry needs the same justification in review.
ALLOWED = {
    ("jobsapp/chains.py", "import_string"): "CLIENT_MIDDLEWARE / SERVER_MIDDLEWARE / DEATH_HANDLERS dotted paths from Django settings",
    ("jobsapp/worker/retry.py", "import_string"): "ERROR_HANDLERS / DEATH_HANDLERS dotted paths from Django settings",
    ("jobsapp/celery/app.py", "import_string"): "Celery(task_cls='module:Class'): a path in the project's own code, as Celery takes it",
    ("jobsapp/celery/contrib/pytest.py", "import_module"): (
        "celery_includes: module paths a test suite's own conftest gives, as Celery's fixture takes them"
    ),
}
# json.loads is data, not code: it is how every payload is read.
SAFE_LOADERS = {"json"}


def python_files() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts)


def findings(path: Path) -> list[tuple[str, int, str]]:
    relative = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=relative)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append((relative, node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            names = {alias.name for alias in node.names}
            # importlib's import_module itself, where ALLOWED names the file's use of it
            allowed_importlib = node.module == "importlib" and names == {"import_module"} and (relative, "import_module") in ALLOWED
            if module in FORBIDDEN_MODULES and not allowed_importlib:
                found.append((relative, node.lineno, f"from {node.module} import ..."))
            for name in names & {"import_string", "import_module"}:
                if (relative, name) not in ALLOWED:
                    found.append((relative, node.lineno, f"from {node.module} import {name}"))
        elif isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name):
                name, owner = function.id, ""
            elif isinstance(function, ast.Attribute):
                name = function.attr
                owner = function.value.id if isinstance(function.value, ast.Name) else ""
            else:
                continue
            if name not in FORBIDDEN_CALLS or owner in SAFE_LOADERS or (relative, name) in ALLOWED:
                continue
            builtin = isinstance(function, ast.Name) and name in {"eval", "exec", "compile", "__import__"}
            module_call = owner in FORBIDDEN_MODULES or name in {"import_module", "import_string", "__import__"}
            if builtin or module_call:  # re.compile, cache.load(...) and the like are not code loading
                found.append((relative, node.lineno, f"{owner + '.' if owner else ''}{name}(...)"))
    return found


def test_the_scan_catches_each_way_in():
    assert len(python_files()) > 30
    # (one file per process: .ci/run runs this test in two suites at once)
    planted = ROOT / "var" / f"planted_for_scan_{os.getpid()}.py"
    planted.parent.mkdir(exist_ok=True)
    planted.write_text(
        "import pickle\nimport yaml\nfrom importlib import import_module\nyaml.load(x)\npickle.loads(b)\n"
        "eval(s)\nexec(s)\ncompile(s, 'f', 'exec')\n__import__(n)\nimport_module(n)\nre.compile(p)\njson.loads(s)\n"
    )
    try:
        assert len(findings(planted)) == 11  # the importlib line counts as module and name
    finally:
        planted.unlink()


def test_no_payload_is_ever_turned_into_code():
    problems = [finding for path in python_files() for finding in findings(path)]
    assert problems == [], "code that can turn data into code:\n" + "\n".join(f"{f}:{line}: {what}" for f, line, what in problems)


def test_allowed_uses_still_exist_and_read_settings_only():
    for (relative, name), _reason in ALLOWED.items():
        text = (ROOT / relative).read_text(encoding="utf-8")
        assert f"{name}(" in text, f"{relative} no longer uses {name}: drop it from ALLOWED"
        for line in text.splitlines():
            if f"{name}(" in line and "import" not in line.split(f"{name}(")[0]:
                assert "path" in line, f"{relative}: {line.strip()} must only load a settings path"


HOSTILE = [
    "os.system",
    "builtins.eval",
    "builtins.exec",
    "subprocess.Popen",
    "posix.system",
    "__import__('os').system('id')",
    "tests.faults.sentinel.Boom",
    "tests.faults.sentinel",
    "..",
    "../../etc/passwd",
    "jobsapp.registry.lookup",
    "django.core.management.call_command",
    "tests.testapp.jobs.Record.__init_subclass__",
    "tests.testapp.jobs.Noop.perform",
    "tests.testapp.jobs",
    "a" * 10_000,
]


#: Not a name any class could have: dead at once. Well-formed names are unknown classes: retried.
NOT_CLASS_NAMES = {"__import__('os').system('id')", "..", "../../etc/passwd", "a" * 10_000}


def warm_up(redis) -> None:
    """Handle one unknown class first, so what any first job of a process loads (the configured
    middleware's modules) is loaded before the check below, which must see only what a payload caused."""
    raw = json.dumps({"class": "tests.never.Registered", "args": [], "jid": "1" * 24, "queue": "default"}).encode()
    redis.lpush("jobsapp:inflight:warm-up", raw)
    Processor(RetryPolicy(redis, "jobsapp:inflight:warm-up")).process(UnitOfWork(raw, "default"))
    redis.delete("retry", "dead", "jobsapp:inflight:warm-up")


@pytest.mark.parametrize("class_name", HOSTILE, ids=[name[:40] for name in HOSTILE])
def test_hostile_class_strings_import_nothing_and_are_filed_once(redis, class_name):
    # Given a payload naming something that is not a registered job class, in a process that has run a job before
    warm_up(redis)
    before = set(sys.modules)
    raw = json.dumps({"class": class_name, "args": ["id"], "jid": "0" * 24, "queue": "default"}).encode()
    redis.lpush("jobsapp:inflight:security", raw)
    # When the real processor handles it
    result = Processor(RetryPolicy(redis, "jobsapp:inflight:security")).process(UnitOfWork(raw, "default"))
    # Then nothing was imported, and it is filed once: dead when it is no class name at all,
    # in the retry set (as Sidekiq's NameError) when it is only unknown to this worker
    assert result.failed and not result.acknowledge
    assert set(sys.modules) - before == set()
    target = "dead" if class_name in NOT_CLASS_NAMES else "retry"
    filed = [json.loads(member) for member in redis.zrange(target, 0, -1)]
    assert redis.zcard("dead") + redis.zcard("retry") == 1
    assert len(filed) == 1 and filed[0]["error_class"] == "jobsapp.errors.UnknownJobClass"
    assert "nothing was imported or run" in filed[0]["error_message"].lower()
    assert redis.llen("jobsapp:inflight:security") == 0
