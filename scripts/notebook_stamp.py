"""The recording stamp of a workbook chapter: which recording run produced its stored
outputs, when, in how long, and a fingerprint of the code it executed.

``scripts/record-notebooks.sh`` stamps each chapter right after executing it;
``tests/test_notebook_records.py`` recomputes both fingerprints, so a code cell edited after
the recording, an output edited by hand, or a cell tag added that would silence a failure
(``raises-exception``, ``nbval-skip``) fails a test instead of passing nbval on stale outputs.

    python scripts/notebook_stamp.py CHAPTER.ipynb RUN_ID SECONDS
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

KEY = "osl_recording"


def code_fingerprint(nb: dict) -> str:
    """sha256 of every code cell's source, in order (markdown may change without a re-run)."""
    h = hashlib.sha256()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            src = cell["source"]
            h.update(("".join(src) if isinstance(src, list) else src).encode())
            h.update(b"\0")
    return h.hexdigest()


def outputs_fingerprint(nb: dict) -> str:
    """sha256 of every code cell's outputs and tags, in order: what the recording stored."""
    h = hashlib.sha256()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            seen = {"outputs": cell.get("outputs", []), "tags": cell.get("metadata", {}).get("tags", [])}
            h.update(json.dumps(seen, sort_keys=True, ensure_ascii=False).encode())
            h.update(b"\0")
    return h.hexdigest()


def stamp(path: Path, run_id: str, seconds: float) -> None:
    nb = json.loads(path.read_text())
    nb["metadata"][KEY] = {
        "run": run_id,
        "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(seconds),
        "code_sha256": code_fingerprint(nb),
        "outputs_sha256": outputs_fingerprint(nb),
    }
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    stamp(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
