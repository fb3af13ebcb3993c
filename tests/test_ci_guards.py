"""What keeps CI from passing by accident: skips it has not accepted, and chapter cells tagged to
swallow their own failure."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests.ci_skips import ALLOWED_SKIPS, allowed_skip_rules, skips_not_allowed

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
#: Cell tags with which nbval or the notebook runner lets a failing cell pass, or runs none of it.
SILENCING_TAGS = {"raises-exception", "nbval-skip", "skip-execution", "nbval-raises-exception"}


def _skipped(nodeid: str, reason: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, longrepr=("t.py", 3, f"Skipped: {reason}"))


def test_a_skip_whose_reason_no_rule_allows_is_reported_with_its_reason():
    rules = allowed_skip_rules("# a comment\nno jcmd in \\S+  # a JRE only\n\n")
    reports = [_skipped("t.py::a", "no jcmd in /usr/lib/jvm/x: a JRE"), _skipped("t.py::b", "browser test skipped: no chromium")]
    assert skips_not_allowed(reports, rules) == [("t.py::b", "Skipped: browser test skipped: no chromium")]


def test_an_empty_allow_list_reports_every_skip():
    assert skips_not_allowed([_skipped("t.py::a", "anything")], allowed_skip_rules("# nothing\n")) == [
        ("t.py::a", "Skipped: anything")
    ]


def test_every_rule_of_the_allow_list_says_why():
    for line in ALLOWED_SKIPS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "  # " in line and line.split("  # ", 1)[1].strip(), f"{ALLOWED_SKIPS.name}: {line!r} does not say why"


def test_no_chapter_cell_carries_a_tag_that_silences_its_failure():
    tagged = [
        (nb.name, i, sorted(set(cell.get("metadata", {}).get("tags", [])) & SILENCING_TAGS))
        for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
        for i, cell in enumerate(json.loads(nb.read_text())["cells"])
        if set(cell.get("metadata", {}).get("tags", [])) & SILENCING_TAGS
    ]
    assert len(list(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))) == 11
    assert tagged == [], f"chapter cells tagged to pass whatever they do: {tagged}"


def test_the_tests_that_need_no_service_run_first_and_the_rest_keep_their_order():
    from tests.order import units_first

    class Item(SimpleNamespace):
        def get_closest_marker(self, name):
            return name if name in self.marks else None

    items = [
        Item(nodeid="a::integ", marks={"integration"}),
        Item(nodeid="a::unit", marks=set()),
        Item(nodeid="b::integ", marks={"integration", "slow"}),
        Item(nodeid="b::unit", marks={"slow"}),
        Item(nodeid="01.ipynb::Cell 0", marks={"integration", "notebook"}),
    ]
    assert [i.nodeid for i in units_first(items)] == ["a::unit", "b::unit", "a::integ", "b::integ", "01.ipynb::Cell 0"]
