"""The skips CI accepts (``tests/allowed_skips.txt``): under ``CI`` any other skip fails the run
(the root conftest.py), so a condition that quietly holds on CI's machine cannot pass as a test."""

from __future__ import annotations

import re
from pathlib import Path

#: The skips CI accepts (see the file); any other skip under ``CI`` fails the run.
ALLOWED_SKIPS = Path(__file__).resolve().parent / "allowed_skips.txt"


def allowed_skip_rules(text: str) -> list[re.Pattern[str]]:
    """The rules of an allowed-skips file: one regular expression a line, before ``  #``."""
    rules = []
    for line in text.splitlines():
        rule = line.split("  #", 1)[0].strip()
        if rule and not line.lstrip().startswith("#"):
            rules.append(re.compile(rule))
    return rules


def skips_not_allowed(reports, rules) -> list[tuple[str, str]]:
    """(test, reason) of each skipped report whose reason no rule matches."""
    out = []
    for r in reports:
        reason = r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr)
        if not any(rule.search(reason) for rule in rules):
            out.append((r.nodeid, reason))
    return out
