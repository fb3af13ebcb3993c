"""The run's configuration, kept beside its checkpoint: ``<checkpoint>/job.json``.

:func:`job.spark.pipeline.start` writes the effective :class:`JobConfig` there before the first
batch, and every tool that acts on a run (``job run`` again, ``repair``, ``backfill``,
``verify``, ``watch``) starts from it, so they all run the job the user ran; a flag given on
the command line overrides the saved value and says so (:func:`resolve`). Settings a
checkpoint fixes for good (:data:`FIXED`) cannot be overridden: :func:`check_fixed` refuses
them with the way to a new checkpoint. Why: docs/job-config.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from job.engine.errors import ConfigError, JobError
from job.spark.config import JobConfig, job_config

__all__ = ["FILE", "FIXED", "FixedSettingError", "check_fixed", "from_args", "load", "resolve", "save", "to_json"]

FILE = "job.json"
#: Bumped when a field changes meaning; a file of another format is refused, not guessed at.
FORMAT = 1
#: What a checkpoint keeps for good: the state's partitions and its operator's layout, the file
#: sink whose log pairs with the checkpoint's batch ids, and the query names.
FIXED = ("state_partitions", "operator", "output", "name")


class FixedSettingError(JobError):
    """A run asked to change a setting its checkpoint keeps for good."""

    def __init__(self, checkpoint: Path, field_name: str, kept: object, asked: object, fix: str) -> None:
        self.checkpoint, self.field, self.kept, self.asked = checkpoint, field_name, kept, asked
        super().__init__(
            f"checkpoint {checkpoint} was started with {field_name}={kept!r} and keeps it for good; this run asks for "
            f"{asked!r}. {fix}"
        )


def path(checkpoint: Path) -> Path:
    return Path(checkpoint) / FILE


def _plain(cfg: JobConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(JobConfig):
        value = getattr(cfg, f.name)
        if f.name == "checkpoint":
            value = str(value)
        elif f.name == "session_cuts":
            value = [[t, p, k, o] for (t, p, k), o in sorted(value.items())]
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def to_json(cfg: JobConfig) -> str:
    """Every field of ``cfg`` with the file's format version."""
    return json.dumps({"format": FORMAT, "config": _plain(cfg)}, indent=1, sort_keys=True) + "\n"


def from_json(text: str, *, where: str = FILE) -> JobConfig:
    """The JobConfig a :func:`to_json` text holds; ConfigError naming the file otherwise."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            where, text[:80], f"not JSON ({exc}); move the file away to run from the command line's settings"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("config"), dict):
        raise ConfigError(
            where,
            (data or {}).get("format") if isinstance(data, dict) else data,
            f"not a job.json of format {FORMAT}; move the file away to run from the command line's settings",
        )
    values = dict(data["config"])
    known = {f.name for f in dataclasses.fields(JobConfig)}
    if unknown := sorted(set(values) - known):
        raise ConfigError(where, unknown, "fields this version does not know (written by a newer one?); run that version")
    values["checkpoint"] = Path(values["checkpoint"])
    values["session_cuts"] = {(t, int(p), k): int(o) for t, p, k, o in values.get("session_cuts", [])}
    return JobConfig(**values)


def load(checkpoint: Path) -> JobConfig | None:
    """The configuration saved beside ``checkpoint``, or None when there is none."""
    file = path(checkpoint)
    if not file.is_file():
        return None
    return from_json(file.read_text(encoding="utf-8"), where=str(file))


def save(cfg: JobConfig) -> Path:
    """Write ``cfg`` beside its checkpoint (atomically: a reader sees the old file or the new)."""
    file = path(cfg.checkpoint)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".json.tmp")
    tmp.write_text(to_json(cfg), encoding="utf-8")
    tmp.replace(file)
    return file


def _restart_fix(kept_cfg: JobConfig, field_name: str, asked: object) -> str:
    from job.spark.checkpoints import checkpoint_end_offsets

    flag = "--" + field_name.replace("_", "-")
    ends = checkpoint_end_offsets(kept_cfg.checkpoint / "sessions")
    offsets: dict[str, dict[str, int]] = {}
    for (topic, part), offset in sorted(ends.items()):
        offsets.setdefault(topic, {})[str(part)] = offset
    start = f" --starting-offsets '{json.dumps(offsets, sort_keys=True)}'" if offsets else ""
    return (
        f"Drop {flag} to run with the kept value, or start a new checkpoint and lake from where this one "
        f"stopped: python -m job run --checkpoint {kept_cfg.checkpoint}-new --output {kept_cfg.output.rstrip('/')}-new"
        f"{start} {flag} {asked} (its sessions start from their next snapshot)"
    )


def check_fixed(cfg: JobConfig) -> None:
    """Raise :class:`FixedSettingError` when ``cfg`` changes a setting its checkpoint keeps:
    one in :data:`FIXED` that differs from the saved file or, for a checkpoint from before the
    file, the state partitions its offsets log records (Spark would keep those silently)."""
    kept = load(cfg.checkpoint)
    if kept is not None:
        for name in FIXED:
            if getattr(kept, name) != getattr(cfg, name):
                raise FixedSettingError(
                    cfg.checkpoint, name, getattr(kept, name), getattr(cfg, name), _restart_fix(kept, name, getattr(cfg, name))
                )
        return
    from job.spark.checkpoints import kept_state_partitions

    query = cfg.checkpoint / "sessions"
    partitions = kept_state_partitions(query) if (query / "offsets").is_dir() else None
    if partitions is not None and partitions != cfg.state_partitions:
        raise FixedSettingError(
            cfg.checkpoint,
            "state_partitions",
            partitions,
            cfg.state_partitions,
            _restart_fix(cfg, "state_partitions", cfg.state_partitions),
        )


def resolve(
    settings, checkpoint: Path | None, given: Mapping[str, Any], *, say: Callable[[str], None], kept_in: Path | None = None
) -> JobConfig:
    """The configuration a tool runs: the one saved beside ``checkpoint`` (default: the
    sandbox's; ``kept_in`` reads it from another folder, e.g. a repair's backup), with ``given``
    (fields the user set on the command line) over it, each said once; without a saved file,
    ``given`` over the defaults, said when the checkpoint has batches (an older version wrote
    it). A saved file for another lake than a given ``output`` is not this run's and is left
    out, said so. Settings the checkpoint fixes are checked by :func:`check_fixed` when the job
    starts, not here."""
    base = job_config(settings, checkpoint=checkpoint)
    kept = load(kept_in or base.checkpoint)
    if kept is not None:
        kept = dataclasses.replace(kept, checkpoint=base.checkpoint)
    if kept is not None and given.get("output", kept.output).rstrip("/") != kept.output.rstrip("/"):
        say(
            f"[config] {path(base.checkpoint)} is the run of lake {kept.output}, not {given['output']}: "
            f"using the command line's settings and the defaults"
        )
        kept = None
    elif kept is None and (base.checkpoint / "sessions" / "commits").is_dir():
        say(
            f"[config] {path(base.checkpoint)} not found (a checkpoint from an older version): using the command line's settings and the defaults"
        )
    if kept is None:
        return dataclasses.replace(base, **given)
    changed = {
        k: v
        for k, v in given.items()
        if getattr(kept, k) != v and not (k == "output" and v.rstrip("/") == kept.output.rstrip("/"))
    }
    say(
        f"[config] the run's settings from {path(kept_in or base.checkpoint)}"
        + ("".join(f"; --{k.replace('_', '-')} {v} overrides the saved {getattr(kept, k)!r}" for k, v in changed.items()))
    )
    return dataclasses.replace(kept, **changed)


def from_args(args, settings, fields: tuple[str, ...] | None = None, *, kept_in: Path | None = None) -> JobConfig:
    """:func:`resolve` for a command line: ``args.checkpoint`` and, of ``fields`` (default: every
    field but the checkpoint), the ones the user set (a parser leaves the others out of
    ``args``: ``default=argparse.SUPPRESS``, as :mod:`job.cli`'s options do)."""
    import sys

    checkpoint = Path(args.checkpoint).resolve() if getattr(args, "checkpoint", None) else None
    names = fields or tuple(f.name for f in dataclasses.fields(JobConfig) if f.name != "checkpoint")
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return resolve(settings, checkpoint, given, say=lambda m: print(m, file=sys.stderr, flush=True), kept_in=kept_in)
