"""The workbook's stored outputs come from one execution of the chapters as they are now.

nbval compares a chapter's outputs with the stored ones, but it cannot tell outputs that an
execution produced from ones edited in by hand, nor a code cell changed after the recording.
``scripts/record-notebooks.sh`` stamps every chapter (``scripts/notebook_stamp.py``); this
checks the stamps: every code cell executed, in order, by one kernel; the code fingerprint
equal to the code now; one recording run for the whole workbook.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
_spec = importlib.util.spec_from_file_location("notebook_stamp", ROOT / "scripts" / "notebook_stamp.py")
stamp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stamp)  # type: ignore[union-attr]

FIX = "re-record the workbook: bash scripts/record-notebooks.sh (all chapters, one run)"

#: An absolute path of the machine that recorded a chapter: a reader's machine has none of them.
MACHINE_PATH = re.compile(r"(?<![\w.:/])/(?:tmp|work|root|home|check|var/folders)/[^\s'\")]+")


def problems(nb: dict) -> list[str]:
    """Why ``nb``'s stored outputs are not one execution of its code as it is now."""
    out = []
    counts = [c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code"]
    if counts != list(range(1, len(counts) + 1)):
        out.append(f"execution counts are {counts}, not 1..{len(counts)} in order: not one run of every code cell")
    recording = nb.get("metadata", {}).get(stamp.KEY)
    if not recording:
        out.append("no recording stamp: its outputs were not stored by scripts/record-notebooks.sh")
    elif recording.get("code_sha256") != stamp.code_fingerprint(nb):
        out.append(f"a code cell changed after the recording of {recording.get('at')}")
    elif recording.get("outputs_sha256") != stamp.outputs_fingerprint(nb):
        out.append(
            f"an output or a cell's tags changed after the recording of {recording.get('at')} (outputs are "
            f"stored by executing the chapter, never edited by hand)"
        )
    return out


def _recorded(outputs: list[dict], tags: list[str] | None = None) -> dict:
    cell = {
        "cell_type": "code",
        "execution_count": 1,
        "source": ["print('x')"],
        "outputs": outputs,
        "metadata": {"tags": tags} if tags else {},
    }
    nb = {"cells": [cell], "metadata": {}}
    nb["metadata"][stamp.KEY] = {
        "at": "then",
        "code_sha256": stamp.code_fingerprint(nb),
        "outputs_sha256": stamp.outputs_fingerprint(nb),
    }
    return nb


def test_an_output_edited_by_hand_or_a_silencing_tag_after_the_recording_is_caught():
    nb = _recorded([{"output_type": "stream", "name": "stdout", "text": ["lost: 3\n"]}])
    assert problems(nb) == []
    nb["cells"][0]["outputs"][0]["text"] = ["lost: 0\n"]  # a hand edit
    assert [p for p in problems(nb) if "an output or a cell's tags changed" in p]
    nb = _recorded([])
    nb["cells"][0]["metadata"]["tags"] = ["raises-exception"]  # a tag that would swallow a failure
    assert [p for p in problems(nb) if "an output or a cell's tags changed" in p]


def machine_paths(nb: dict) -> list[str]:
    """Absolute paths of the recording machine in ``nb``'s text outputs, as ``cell N: path``."""
    found = []
    for number, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
            found += [f"cell {number}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)]
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapters_outputs_come_from_an_execution_of_its_code_as_it_is(path):
    found = problems(json.loads(path.read_text()))
    assert not found, f"{path.name}: " + "; ".join(found) + f"; {FIX}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapters_outputs_name_no_folder_of_the_recording_machine(path):
    found = machine_paths(json.loads(path.read_text()))
    assert not found, (
        f"{path.name} prints paths of the machine that recorded it: {found[:5]}; print them with "
        f"sandbox.settings.shown and keep a chapter's files in settings.scratch_dir(...), then {FIX}"
    )


def test_a_machine_path_in_an_output_is_caught():
    def nb(text):
        return {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "text": [text]}]}]}

    assert machine_paths(nb("ledger:   /tmp/ledger-vwlvujw1/run\n")) == ["cell 0: /tmp/ledger-vwlvujw1/run"]
    assert machine_paths(nb("sandbox: /work/main/.sandbox-test (ports +10000)")) == ["cell 0: /work/main/.sandbox-test"]
    assert machine_paths(nb("ledger:   ../.sandbox-test/checkpoints/scratch/nb01-x/run\n")) == []
    assert machine_paths(nb("output s3a://lake/tmp/x and http://127.0.0.1:9001/work/y")) == []


def test_every_chapter_comes_from_the_same_recording_run():
    runs = {p.name: json.loads(p.read_text())["metadata"].get(stamp.KEY, {}).get("run") for p in CHAPTERS}
    assert len(set(runs.values())) == 1, f"chapters from different recording runs: {runs}; {FIX}"


def test_a_hand_edited_or_stale_chapter_is_caught():
    code = {"cell_type": "code", "source": ["print(1)\n"], "outputs": [], "metadata": {}}
    nb = {"cells": [dict(code, execution_count=1), dict(code, execution_count=2)], "metadata": {}}
    nb["metadata"][stamp.KEY] = {
        "run": "r",
        "at": "t",
        "code_sha256": stamp.code_fingerprint(nb),
        "outputs_sha256": stamp.outputs_fingerprint(nb),
    }
    assert problems(nb) == []
    edited = json.loads(json.dumps(nb))
    edited["cells"][1]["source"] = ["print(2)\n"]
    assert any("changed after the recording" in p for p in problems(edited))
    skipped = json.loads(json.dumps(nb))
    skipped["cells"][1]["execution_count"] = 3
    assert any("not 1..2" in p for p in problems(skipped))
    unstamped = json.loads(json.dumps(nb))
    del unstamped["metadata"][stamp.KEY]
    assert any("no recording stamp" in p for p in problems(unstamped))
