"""Start JupyterLab on the learner's working copy of the workbook.

The recorded chapters (the repository's ``notebooks/``, which nbval checks) are mounted
read-only at ``/workspace/recorded``. Lab opens ``/workspace``, where ``notebooks/`` is a named
volume owned by the container's user: the learner runs, edits and saves there, on any host (a
bind mount would be read-only to uid 1000 wherever the checkout belongs to another user) and
without ever touching the recorded originals.

On every start the working copy is brought up to date, chapter by chapter, without losing work:
- a chapter missing from the working copy is copied in;
- a chapter the learner has not changed since it was copied follows the recorded one;
- a chapter the learner changed is kept, and the log says the newer recording is in
  ``recorded/`` (delete the working copy's file and restart ``jupyter`` to take it).
What was copied is remembered by hash in ``notebooks/.recorded.json``.

Usage: ``python jupyter_start.py [jupyter lab arguments...]`` (stdlib only; runs in the image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

RECORDED = Path(os.environ.get("OSL_RECORDED_NOTEBOOKS", "/workspace/recorded"))
WORK = Path(os.environ.get("OSL_WORK_NOTEBOOKS", "/workspace/notebooks"))
STATE = ".recorded.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sync(recorded: Path, work: Path) -> dict[str, list[str]]:
    """Bring ``work`` up to date with ``recorded`` as the module docstring says; return what happened."""
    if not recorded.is_dir():
        raise SystemExit(
            f"jupyter_start: the recorded chapters are not mounted at {recorded}: "
            f"run from the checkout with `docker compose up` (docker-compose.yml mounts ./notebooks there)"
        )
    work.mkdir(parents=True, exist_ok=True)
    state_file = work / STATE
    try:
        copied: dict[str, str] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        copied = {}
    done: dict[str, list[str]] = {"new": [], "updated": [], "kept": [], "same": []}
    for source in sorted(recorded.glob("*.ipynb")):
        target = work / source.name
        now = _sha(source)
        if not target.exists():
            outcome = "new"
        elif copied.get(source.name) == now:
            outcome = "same"
        elif _sha(target) in (copied.get(source.name), now):
            outcome = "updated"
        else:
            done["kept"].append(source.name)
            continue
        if outcome != "same":
            shutil.copyfile(source, target)
        copied[source.name] = now
        done[outcome].append(source.name)
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(copied, indent=1, sort_keys=True))
    tmp.replace(state_file)
    return done


def main(argv: list[str]) -> None:
    done = sync(RECORDED, WORK)
    print(
        f"jupyter_start: working copy {WORK}: {len(done['new'])} chapters copied, "
        f"{len(done['updated'])} updated to the recording, {len(done['same'])} unchanged",
        flush=True,
    )
    for name in done["kept"]:
        print(
            f"jupyter_start: kept your edited {WORK / name}; a newer recording is at {RECORDED / name} "
            f"(delete yours and restart jupyter to take it)",
            flush=True,
        )
    os.execvp("jupyter", ["jupyter", "lab", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
