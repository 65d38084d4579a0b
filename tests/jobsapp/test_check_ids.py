"""System check ids are stable (users silence them by id in SILENCED_SYSTEM_CHECKS): every id the
code can emit is pinned here and documented in its module's table (jobsapp/checks.py,
tracking/checks.py); every setting OWN_CHECKS exempts from the generic type checks exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from jobsapp.checks import OWN_CHECKS
from jobsapp.conf import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
CHECK_ID = re.compile(r"(jobsapp|tracking)\.[EWI]\d{3}")

PINNED = {
    "jobsapp.E001", "jobsapp.E002", "jobsapp.E003", "jobsapp.E004", "jobsapp.E005", "jobsapp.E006",
    "jobsapp.E007", "jobsapp.E008", "jobsapp.E010", "jobsapp.E011", "jobsapp.E020", "jobsapp.W001", "jobsapp.W002",
    "jobsapp.E040", "jobsapp.E041", "jobsapp.E042", "jobsapp.E044", "jobsapp.W045", "jobsapp.W050",
    "jobsapp.E046", "jobsapp.W046", "jobsapp.E047", "jobsapp.E048", "jobsapp.W048",
    "jobsapp.E201", "jobsapp.E202", "jobsapp.E203", "jobsapp.E204", "jobsapp.E205", "jobsapp.W201",
    "tracking.E001", "tracking.E002", "tracking.E003", "tracking.E004", "tracking.E005", "tracking.E006",
}  # fmt: skip


def ids_in_code() -> set[str]:
    """Every string literal in jobsapp/ and tracking/ that is exactly a check id."""
    found: set[str] = set()
    for package in ("jobsapp", "tracking"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and CHECK_ID.fullmatch(node.value):
                    found.add(node.value)
    return found


def documented(module: Path) -> set[str]:
    """The ids in a module docstring's table, ranges (E040-E044) and short forms (W201) expanded."""
    docstring = ast.get_docstring(ast.parse(module.read_text())) or ""
    prefix = module.parent.name
    ids: set[str] = set()
    for row in docstring.splitlines():
        if not row.startswith(f"| {prefix}."):
            continue
        for first, last in re.findall(r"([EWI]\d{3})(?:-[EWI]?(\d{3}))?", row.split("|")[1]):
            for number in range(int(first[1:]), int(last or first[1:]) + 1):
                ids.add(f"{prefix}.{first[0]}{number:03d}")
    return ids


def test_every_check_id_the_code_emits_is_pinned_and_none_disappeared():
    # When the code's check ids are collected, Then they are exactly the pinned ones
    assert ids_in_code() == PINNED


def test_every_pinned_id_is_documented_in_its_checks_module():
    table = documented(ROOT / "jobsapp" / "checks.py") | documented(ROOT / "tracking" / "checks.py")
    assert PINNED - table == set(), "add these to the id table of jobsapp/checks.py or tracking/checks.py"
    assert table - PINNED == set(), "documented ids the code no longer emits"


def test_own_checks_name_real_settings():
    assert OWN_CHECKS <= set(DEFAULTS), sorted(OWN_CHECKS - set(DEFAULTS))
