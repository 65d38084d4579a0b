"""The install guide names every extra and what ``all`` brings: a user reading it knows that
``[all]`` also installs the tracing package (opentelemetry-api)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_install_guide_names_every_extra_that_all_installs_and_its_packages():
    # Given the extras pyproject.toml declares, and the "all" extra's members
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (all_spec,) = extras["all"]
    members = re.fullmatch(r"jobsapp\[(.+)\]", all_spec).group(1).split(",")
    assert set(members) == set(extras) - {"all"}, "the all extra installs every other extra"
    # When the install guide is read
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    paragraph = guide[guide.index("Extras: ") :].split("\n\n")[0]
    # Then it names each extra, the package each brings, and says all is every one of them
    letters = re.sub(r"[^a-z]", "", paragraph.lower())  # "Django REST framework" names djangorestframework
    for extra in members:
        assert f"`{extra}`" in paragraph, extra
        for requirement in extras[extra]:
            package = re.split(r"[<>=\[ ]", requirement)[0]
            assert re.sub(r"[^a-z]", "", package.lower()) in letters, package
    assert re.search(r"`all` \(the (four|\w+)\)", paragraph)
    assert "opentelemetry-api" in paragraph
