"""No Redis key literal outside ``jobsapp/keys.py`` and ``jobsapp/lua/`` (docs/redis-layout.md).

An AST scan of ``jobsapp/`` and ``tracking/``: a string literal (or the text of an f-string) that
starts with a key prefix of the layout, or ends as an identity's key does, is a key name spelled
outside keys.py. Docstrings are prose and are skipped. Plain words that are also key names
(``retry``, ``dead``, ``schedule``, ``queues``) are payload fields and vocabularies too, so only
the prefixes and suffixes are matched.
"""

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = ("queue:", "stat:", "jobsapp:", "cron_job:", "cron_jobs")
SUFFIXES = (":workers", ":work", "-signals", ":enqueued", ":jid_history", ":holders", ":failed")
ALLOWED = {ROOT / "jobsapp" / "keys.py"}


def url_names() -> set[str]:
    """``jobsapp:<name>`` of the dashboard's URL patterns: Django URL names, not keys."""
    tree = ast.parse((ROOT / "jobsapp" / "urls.py").read_text(encoding="utf-8"))
    return {
        f"jobsapp:{keyword.value.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant)
    }


URL_NAMES = url_names()


def docstring_nodes(tree: ast.AST) -> set[int]:
    nodes = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                nodes.add(id(first.value))
    return nodes


def literal_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return None


def key_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = docstring_nodes(tree)
    inside_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped or id(node) in inside_fstrings:
            continue
        text = literal_text(node)
        if text is not None and text not in URL_NAMES and (text.startswith(PREFIXES) or text.endswith(SUFFIXES)):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text!r}")
    return found


def test_no_key_literal_outside_keys_py():
    # Given every Python module of the engine and of tracking, less keys.py and migrations
    modules = [
        path
        for package in ("jobsapp", "tracking")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in ALLOWED and "migrations" not in path.parts
    ]
    # When their string literals are scanned for key names
    found = [hit for path in modules for hit in key_literals(path)]
    # Then none spells a key: each goes through jobsapp.keys
    assert found == []


def test_the_scan_finds_a_key_literal():
    # Given a module that spells a queue key by hand (the scan must not pass vacuously)
    # (one file per process: .ci/run runs this test in two suites at once)
    sample = ROOT / "var" / f"key_literal_sample_{os.getpid()}.py"
    sample.parent.mkdir(exist_ok=True)
    source = '"""queue:prose is fine"""\nQUEUE = "queue:default"\nWORK = f"{identity}:work"\nURL = "jobsapp:overview"\n'
    sample.write_text(source, encoding="utf-8")
    try:
        # When it is scanned, Then both keys are found, and neither the docstring nor the URL name
        assert [hit.split(": ", 1)[1] for hit in key_literals(sample)] == ["'queue:default'", "'{}:work'"]
    finally:
        sample.unlink()
