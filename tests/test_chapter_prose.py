"""A chapter's prose cannot state a figure its run did not produce.

A number with a unit in a chapter's markdown ("the catch-up took 18.8 s", "65 MB") is either a
setting the chapter declares in a code cell (the trigger, the cap, the hold: the experiment's
input) or a figure of the run, which a cell prints; typed into the prose by hand, the next
recording makes it false without anyone noticing. This test finds each such number and fails on
one that is neither a literal in the chapter's code nor in its stored outputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))

UNITS = r"records/s|msg/s|records|messages|ms|s|seconds|minutes|min|hours|h|MB|GB|%|x"
FIGURE = re.compile(rf"(?<![\w.$/-])(\d[\d,_]*(?:\.\d+)?)\s?({UNITS})(?![\w/])")


def _text(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _plain(number: str) -> str:
    return number.replace(",", "").replace("_", "")


def unbound_figures(nb: dict) -> list[str]:
    """The figures with a unit in ``nb``'s markdown that its code does not declare and its stored
    outputs do not show (each as written, with its unit)."""
    code = "\n".join(_text(c) for c in nb["cells"] if c["cell_type"] == "code")
    outputs = []
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            outputs.append("".join(o.get("text", "")))
            outputs.append("".join(o.get("data", {}).get("text/plain", "")))
            outputs.append("".join(o.get("data", {}).get("text/html", "")))
    known = set(re.findall(r"\d[\d,_]*(?:\.\d+)?", code + "\n" + "\n".join(outputs)))
    known = {_plain(n) for n in known}
    fractions = {float(n) for n in known if n.replace(".", "", 1).isdigit()}
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        prose = re.sub(r"`[^`]*`", "", _text(cell))  # inline code names a setting or a command, not a figure
        for m in FIGURE.finditer(prose):
            number, unit = _plain(m.group(1)), m.group(2)
            if number in known or (unit == "%" and float(number) / 100 in fractions):  # 0.5 % declared as 0.005
                continue
            found.append(m.group(0))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_figure_in_a_chapter_s_prose_is_declared_or_printed_by_its_run(path):
    found = unbound_figures(json.loads(path.read_text()))
    assert not found, (
        f"{path.name} states {found} in its prose, which neither a code cell declares nor its run printed: print "
        f"the figure from the data (or assert it), or declare the setting in a code cell"
    )


def test_a_figure_typed_into_the_prose_is_caught():
    def nb(markdown: str) -> dict:
        code = {
            "cell_type": "code",
            "source": "TRIGGER = '2 seconds'\nCAP = 1_000\nP = 0.005\n",
            "outputs": [{"output_type": "stream", "text": "caught up in 18.8 s\n"}],
        }
        return {"cells": [{"cell_type": "markdown", "source": markdown}, code]}

    assert unbound_figures(nb("The capped run caught up in 18.8 s, a batch every 2 s of at most 1,000 records.")) == []
    assert unbound_figures(nb("Each fault strikes 0.5 % of the messages, not 5 %.")) == ["5 %"]
    assert unbound_figures(nb("The uncapped run caught up in 4.8 s and used 65 MB.")) == ["4.8 s", "65 MB"]
    assert unbound_figures(nb("Set `--max-offsets-per-trigger 300` and look.")) == []
