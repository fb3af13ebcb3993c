"""The documentation's shape: the README stays a front door, every link lands, every page is
indexed, every decision page has its four sections, and measurements stay out of the code.

The README is the way in (at most :data:`README_MAX_LINES` lines); the measurements behind each
default live in ``docs/decisions/NNNN-<setting>.md``, and a code comment names that page instead
of quoting run ids. No services, no network: part of ``make test-quick``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 300
#: The sections every decision page has, in this order (``## <name>``).
DECISION_SECTIONS = ("Context", "Options measured", "Choice", "Re-measure")
#: Where code lives whose comments must name a decision page rather than quote a run.
CODE_DIRS = ("job", "sandbox", "producers", "bench", "book", "demo.py")
#: A bench run's id (``r`` + six hex digits, as ``producers.runner.new_run_id`` makes them and
#: ``make bench-job`` prints) standing alone, and a recording's stamp. A run id inside a
#: session id (``fleet-2-r1a2b3c-s0001``, the wire contract's example) is not a measurement.
RUN_ID = re.compile(r"(?<![\w-])r[0-9a-f]{6}(?![\w-])|\brec-\d{8}T\d{6}Z")
#: Paths to docs pages named in code comments (``docs/decisions/0003-fetch-wait.md``).
DOCS_PATH = re.compile(r"\bdocs/[\w./-]*\w\.md\b")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\[]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """``text`` without fenced blocks and code spans, where brackets are code, not links (a
    fenced block leaves its line breaks, so line numbers still match the file)."""
    return _CODE_SPAN.sub("", _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text))


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of the links in ``path`` that point inside the checkout (no scheme);
    a link's text may wrap over lines."""
    text = prose(path.read_text())
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(1))
        for m in _LINK.finditer(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", m.group(1), re.I)
    ]


def code_files() -> list[Path]:
    files = [ROOT / d for d in CODE_DIRS if (ROOT / d).is_file()]
    dirs = [ROOT / d for d in CODE_DIRS if (ROOT / d).is_dir()]
    return sorted(files + [p for d in dirs for p in d.rglob("*.py") if "__pycache__" not in p.parts])


def test_the_readme_is_a_front_door_of_at_most_300_lines():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move detail to a page under docs/ "
        "(measurements to docs/decisions/, guides beside docs/operations.md) and link it"
    )


def test_the_readme_s_first_screen_says_what_this_is_and_the_two_commands():
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    for needed in ("make demo", "make test", "Who it is for"):
        assert needed in first_screen, f"README.md's first 40 lines do not mention {needed!r}"


def test_every_relative_link_reaches_a_file_and_heading_that_exist():
    # one link checker: the book's, which renders these pages and refuses a broken link or anchor
    from book.site import BookError, read_docs

    try:
        read_docs(ROOT, [])
    except BookError as exc:
        pytest.fail(str(exc))


def test_the_docs_index_lists_every_page_under_docs():
    index = DOCS / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in relative_links(index) if t.partition("#")[0]}
    missing = [str(p.relative_to(ROOT)) for p in sorted(DOCS.rglob("*.md")) if p != index and p.resolve() not in linked]
    assert not missing, f"docs/README.md does not link {', '.join(missing)}: add each page to the index"


def test_every_decision_page_is_numbered_and_has_its_four_sections_in_order():
    pages = sorted((DOCS / "decisions").glob("*.md"))
    assert pages, "no decision pages under docs/decisions/"
    numbers: dict[str, str] = {}
    problems = []
    for page in pages:
        name = page.relative_to(ROOT)
        match = re.fullmatch(r"(\d{4})-[a-z0-9]+(?:-[a-z0-9]+)*\.md", page.name)
        if match is None:
            problems.append(f"{name}: name it NNNN-<setting>.md (four digits, lower-case words and hyphens)")
            continue
        if match.group(1) in numbers:
            problems.append(f"{name}: number {match.group(1)} is also {numbers[match.group(1)]}")
        numbers[match.group(1)] = page.name
        headings = re.findall(r"^## (.+?)\s*$", _FENCE.sub("", page.read_text()), re.M)
        present = [h for h in headings if h in DECISION_SECTIONS]
        if present != list(DECISION_SECTIONS):
            absent = [s for s in DECISION_SECTIONS if s not in headings]
            problems.append(
                f"{name}: needs the sections {' / '.join(DECISION_SECTIONS)} in that order as '## ' headings "
                + (f"(missing: {', '.join(absent)})" if absent else f"(found in the order {' / '.join(present)})")
            )
    assert not problems, "\n".join(problems)


def test_no_run_id_in_the_code_its_comment_names_a_decision_page_instead():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}: {line.strip()[:100]}"
        for path in code_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in RUN_ID.finditer(line)
    ]
    assert not found, (
        "run ids in code (the evidence belongs in docs/decisions/<page>.md; the comment keeps one line "
        "of why and names the page):\n" + "\n".join(found)
    )


def test_every_docs_page_a_code_comment_names_exists():
    missing = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
        for path in [*code_files(), *sorted((ROOT / "bench").glob("*.py"))]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in DOCS_PATH.finditer(line)
        if not (ROOT / m.group(0)).exists()
    ]
    assert not missing, "code names docs pages that do not exist:\n" + "\n".join(missing)
