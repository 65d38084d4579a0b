"""Lua runs only through ``jobsapp/scripts.py`` (STYLE: each script has one typed keyword-only
function there, the only place that builds KEYS and ARGV).

An AST scan of ``jobsapp/`` and ``tracking/``: outside scripts.py, no call to the loader
(``script("...")``, ``scripts.script``, ``Runner``), to redis-py's ``register_script`` /
``Script``, or to raw ``eval`` / ``evalsha`` / ``script_load`` / ``fcall`` on a client, and no
import of the loader's names. A module that needs a script calls its function in scripts.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {ROOT / "jobsapp" / "scripts.py"}
#: Attribute calls that run or load Lua on a client, a pipeline or the loader module.
FORBIDDEN_METHODS = {"script", "register_script", "eval", "evalsha", "eval_ro", "evalsha_ro", "script_load", "fcall", "fcall_ro"}
#: Plain-name calls (imported from scripts.py or redis-py).
FORBIDDEN_NAMES = {"script", "Runner", "Script"}
#: Names no other module may import from jobsapp.scripts (the loader itself).
LOADER_NAMES = {"script", "Runner", "source"}


def script_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Attribute) and function.attr in FORBIDDEN_METHODS:
                found.append(f"line {node.lineno}: .{function.attr}(...)")
            elif isinstance(function, ast.Name) and function.id in FORBIDDEN_NAMES:
                found.append(f"line {node.lineno}: {function.id}(...)")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("scripts"):
            found.extend(f"line {node.lineno}: imports {alias.name}" for alias in node.names if alias.name in LOADER_NAMES)
        elif isinstance(node, ast.ImportFrom) and node.module == "redis.commands.core":
            found.extend(f"line {node.lineno}: imports {alias.name}" for alias in node.names if alias.name == "Script")
    return found


def test_no_module_but_scripts_py_loads_or_runs_lua():
    # When every module of jobsapp/ and tracking/ is scanned
    offenders = {
        str(path.relative_to(ROOT)): calls
        for package in ("jobsapp", "tracking")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in ALLOWED and (calls := script_calls(path))
    }
    # Then none calls the loader or redis-py's scripting directly
    assert offenders == {}, f"call the script's function in jobsapp/scripts.py instead: {offenders}"


def test_the_scan_finds_what_it_forbids(tmp_path):
    # Given a module that loads and runs Lua by hand, the ways the scan must catch
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from jobsapp.scripts import script\n"
        "from redis.commands.core import Script\n"
        "script('fetch')(client, keys=[], args=[])\n"
        "scripts.script('ack')\n"
        "client.register_script('return 1')\n"
        "client.evalsha(sha, 0)\n"
        "pipe.eval('return 1', 0)\n"
        "scripts.fetch(client, queue='default')\n"  # the allowed way
    )
    # Then each forbidden use is reported, and the allowed call is not
    assert len(script_calls(sample)) == 7


def test_every_script_wrapper_returns_a_typed_value():
    # Given the wrappers of jobsapp/scripts.py (every public function but the loader's and preload)
    tree = ast.parse((ROOT / "jobsapp" / "scripts.py").read_text(encoding="utf-8"))
    wrappers = [node for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
    wrappers = [node for node in wrappers if node.name not in {*LOADER_NAMES, "preload"} and not node.name.endswith("_reply")]
    parsers = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.endswith("_reply")}
    # When their return annotations are read
    untyped = [node.name for node in wrappers if node.returns is None or ast.unparse(node.returns) == "Any"]
    queued = [node.name for node in wrappers if ast.unparse(node.returns) == "None"]
    # Then each parses its script's reply into a typed value; one queued on a pipeline (whose reply
    # comes with the pipeline's) takes a pipeline and has a *_reply parser in the same module
    assert untyped == []
    assert len(wrappers) >= 20
    for name in queued:
        node = next(node for node in wrappers if node.name == name)
        assert ast.unparse(node.args.args[0].annotation) == "redis.client.Pipeline", name
    assert {"unique_push_reply", "moved_reply"} <= parsers
