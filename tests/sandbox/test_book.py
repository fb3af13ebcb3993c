"""`make book`: the recorded workbook as a static site, opened in a real (headless) browser."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from book.site import read_chapter
from tests.browser import image_sizes

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def _notebook(tmp_path: Path, name: str, outputs: list[list[dict]], seconds: int | None = 7) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# 42 · A chapter\n", "prose"]}]
    cells += [{"cell_type": "code", "metadata": {}, "source": "x", "outputs": out, "execution_count": 1} for out in outputs]
    meta = {"osl_recording": {"run": "rec-test", "seconds": seconds}} if seconds is not None else {}
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _printed(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_a_chapter_s_verdict_is_its_closing_line_even_when_more_is_printed_after_it(tmp_path):
    path = _notebook(
        tmp_path,
        "42-a.ipynb",
        [[_printed("warming up\n")], [_printed("chapter complete: all good\n"), _printed("took 9 s\n")]],
    )
    chapter = read_chapter(path)
    assert (chapter.title, chapter.seconds, chapter.verdict, chapter.failed) == (
        "42 · A chapter",
        7,
        "chapter complete: all good",
        False,
    )


def test_a_chapter_without_a_closing_line_shows_the_last_line_its_last_cell_printed(tmp_path):
    path = _notebook(tmp_path, "42-a.ipynb", [[_printed("first\n")], [_printed("ledger agrees\n\n")], []])
    assert read_chapter(path).verdict == "ledger agrees"


def test_a_stored_error_makes_the_chapter_failed_whatever_it_printed_after(tmp_path):
    error = {"output_type": "error", "ename": "AssertionError", "evalue": "lost 3", "traceback": []}
    path = _notebook(tmp_path, "42-a.ipynb", [[error], [_printed("chapter complete: all good\n")]])
    chapter = read_chapter(path)
    assert chapter.failed and chapter.verdict == "failed: AssertionError: lost 3"


def test_an_unrecorded_chapter_is_failed_not_blank(tmp_path):
    chapter = read_chapter(_notebook(tmp_path, "42-a.ipynb", [[]], seconds=None))
    assert chapter.failed and chapter.seconds is None and "record-notebooks" in chapter.verdict


def test_the_book_refuses_a_folder_without_chapters_and_says_where_to_run_it(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "book", "--notebooks", str(tmp_path), "--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 2, run
    assert str(tmp_path) in run.stderr and "--notebooks" in run.stderr and "Traceback" not in run.stderr


def test_the_built_book_shows_each_chapter_s_title_time_and_verdict_as_written(tmp_path):
    # Two hand-made chapters: every expected string below is written from their content.
    nbs = tmp_path / "nb"
    nbs.mkdir()
    _notebook(nbs, "41-good.ipynb", [[_printed("chapter complete: all <good>\n")]], seconds=12)
    error = {"output_type": "error", "ename": "AssertionError", "evalue": "lost 3", "traceback": []}
    _notebook(nbs, "42-bad.ipynb", [[error]], seconds=None)
    (nbs / "notes.ipynb").write_text((nbs / "41-good.ipynb").read_text())  # not NN-*.ipynb: no chapter
    (tmp_path / "README.md").write_text("# The lab\n")
    out = tmp_path / "book"
    run = subprocess.run(
        [sys.executable, "-m", "book", "--root", str(tmp_path), "--notebooks", str(nbs), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 1, run  # a failed chapter fails the build
    assert run.stdout.splitlines()[:2] == [
        "  41-good.ipynb: 12 s, 0 plots, chapter complete: all <good>",
        "  42-bad.ipynb: not recorded, 0 plots, FAILED failed: AssertionError: lost 3",
    ]
    assert "; FAILED chapters: 42-bad.ipynb" in run.stdout
    assert sorted(p.name for p in out.iterdir()) == ["41-good.html", "42-bad.html", "README.html", "index.html"]
    index = out.joinpath("index.html").read_text()
    assert (
        '<tr><td><a href="41-good.html">42 · A chapter</a></td><td>12 s</td>'
        '<td class="ok">chapter complete: all &lt;good&gt;</td></tr>'
    ) in index
    assert (
        '<tr><td><a href="42-bad.html">42 · A chapter</a></td><td>not recorded</td>'
        '<td class="failed">failed: AssertionError: lost 3</td></tr>'
    ) in index
    assert "(rec-test; 12 s in all)" in index
    good = out.joinpath("41-good.html").read_text()
    assert '<div class="osl-banner" id="osl-banner">' in good
    assert '<a href="42-bad.html">42 · A chapter →</a>' in good  # the next chapter (the page re-serialises &rarr;)
    assert '<span class="osl-seconds">12 s</span>' in good
    assert '<span class="osl-verdict">chapter complete: all &lt;good&gt;</span>' in good
    bad = out.joinpath("42-bad.html").read_text()
    assert '<div class="osl-banner failed" id="osl-banner">' in bad
    assert "<b>Recorded run</b> none:" in bad and '<span class="osl-seconds">not recorded</span>' in bad


def _checkout(root: Path, files: dict[str, str]) -> Path:
    """A hand-made checkout: one chapter, and these files (README.md, docs/...) with this text."""
    (root / "notebooks").mkdir(parents=True)
    _notebook(root / "notebooks", "41-good.ipynb", [[_printed("chapter complete: all good\n")]], seconds=12)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _build(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "book", "--root", str(root), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_the_site_renders_the_readme_and_docs_beside_the_chapters_with_one_sidebar(tmp_path):
    root = _checkout(
        tmp_path / "checkout",
        {
            "README.md": "# The lab\n\nRead [the docs](docs/README.md) and [chapter 41](notebooks/41-good.ipynb#top).\n",
            "docs/README.md": "# Documentation\n\n[Ops](operations.md), then [the first decision]"
            "(decisions/0001-x.md#the-choice-1-ms-why); back to the [README](../README.md).\n",
            "docs/a-guide.md": "# A guide: not in the index\n",
            "docs/operations.md": "# Operations: running it\n\nThe setting is in [`job/config.py`](../job/config.py), "
            "read by [its loader](../job/config.py#L3).\n\n## Repair & replay\n",
            "docs/decisions/0001-x.md": "# 0001. X: one ms\n\n## The choice: 1 ms (why?)\n\n"
            "As [the ops guide](../operations.md#repair--replay) says.\n",
            "job/config.py": "X = 1\n",
        },
    )
    out = tmp_path / "book"
    run = _build(root, out)
    assert run.returncode == 0, run
    assert run.stdout.splitlines()[-1].startswith("book: 1 chapters and 5 docs pages in ")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html")) == [
        "41-good.html",
        "README.html",
        "docs/README.html",
        "docs/a-guide.html",
        "docs/decisions/0001-x.html",
        "docs/operations.html",
        "index.html",
    ]
    # the sidebar: the chapters, the README, the docs' index, the guides as the index lists them (then
    # the rest), the decisions folded; each link relative to the page, this page marked
    decision = out.joinpath("docs/decisions/0001-x.html").read_text()
    assert (
        """<nav class="osl-nav" id="osl-nav" aria-label="ordered-stream-lab">
<p class="osl-nav-head">Workbook</p>
<ul>
<li><a href="../../index.html">Contents</a></li>
<li><a href="../../41-good.html">42 · A chapter</a></li>
</ul>
<p class="osl-nav-head">Docs</p>
<ul>
<li><a href="../../README.html">README</a></li>
<li><a href="../README.html">Documentation</a></li>
<li><a href="../operations.html">Operations</a></li>
<li><a href="../a-guide.html">A guide</a></li>
</ul>
<details open><summary>Decisions</summary><ul>
<li><a href="0001-x.html" aria-current="page">0001. X</a></li>
</ul></details>
</nav>"""
        in decision
    )
    assert "<title>0001. X: one ms · ordered-stream-lab</title>" in decision
    assert '<h2 id="the-choice-1-ms-why">The choice: 1 ms (why?)</h2>' in decision  # GitHub's id
    assert '<a href="../operations.html#repair--replay">the ops guide</a>' in decision
    for page, link in [
        ("index.html", '<li><a href="docs/decisions/0001-x.html">0001. X</a></li>'),
        ("41-good.html", '<li><a href="docs/decisions/0001-x.html">0001. X</a></li>'),
        ("README.html", '<li><a href="README.html" aria-current="page">README</a></li>'),
    ]:
        assert link in out.joinpath(page).read_text(), page
    assert "<details><summary>Decisions</summary>" in out.joinpath("index.html").read_text()  # folded elsewhere
    assert '<a href="README.html">README</a>' in out.joinpath("index.html").read_text()  # the way in
    readme = out.joinpath("README.html").read_text()
    assert '<h1 id="the-lab">The lab</h1>' in readme
    assert '<a href="docs/README.html">the docs</a>' in readme  # .md -> .html
    assert '<a href="41-good.html#top">chapter 41</a>' in readme  # a notebook -> its chapter's page
    index = out.joinpath("docs/README.html").read_text()
    assert '<a href="decisions/0001-x.html#the-choice-1-ms-why">the first decision</a>' in index
    assert '<a href="../README.html">README</a>' in index
    operations = out.joinpath("docs/operations.html").read_text()
    # a source file is not in the site: its path, unlinked
    assert (
        'The setting is in <code class="osl-file">job/config.py</code>, read by its loader '
        '(<code class="osl-file">job/config.py</code>).' in operations
    )
    assert '<h2 id="repair--replay">Repair &amp; replay</h2>' in operations


def test_a_broken_docs_link_fails_the_build_naming_its_page_link_and_what_is_missing(tmp_path):
    root = _checkout(
        tmp_path / "checkout",
        {
            "README.md": "# The lab\n\nSee [gone](docs/gone.md).\n",
            "docs/guide.md": "# Guide\n\n[a heading](../README.md#nowhere), [the code](../job/missing.py), "
            "[here](#guide), [there](#elsewhere).\n",
        },
    )
    out = tmp_path / "book"
    run = _build(root, out)
    assert run.returncode == 2, run
    assert run.stderr.splitlines() == [
        "error: 4 broken link(s) in the docs; fix each link, or the page or heading it names:",
        "  README.md: [gone](docs/gone.md): docs/gone.md does not exist",
        "  docs/guide.md: [the code](../job/missing.py): job/missing.py does not exist",
        "  docs/guide.md: [a heading](../README.md#nowhere): README.md has no heading #nowhere",
        "  docs/guide.md: [there](#elsewhere): docs/guide.md has no heading #elsewhere",
    ]
    assert not out.exists()  # found before any chapter is rendered


# The recorded workbook as its chapters are written: each title (its first heading) and the
# verdict its closing cell prints (chapter 10 prints what its run measured, so a pattern).
WORKBOOK = {
    "00-tour.ipynb": ("00 · A tour of the sandbox", "tour complete: Kafka, MinIO and the Spark cluster all did real work"),
    "01-snapshot-update-producers.ipynb": (
        "1 · Snapshot/update producers",
        "ledger and Kafka agree: every ok row is one record at its offset, and nothing else of this run is there",
    ),
    "02-the-stateful-job.ipynb": (
        "02 · The ordered stateful job",
        "chapter complete: the lake matches the ledger within what the faults allow",
    ),
    "03-checkpoints-and-delivery.ipynb": (
        "03 · Checkpoints and delivery semantics",
        "chapter complete: a driver killed between the logs lost nothing and duplicated nothing the sink let through",
    ),
    "04-environmental-failures.ipynb": (
        "04 · Environmental failures",
        "chapter complete: five environmental faults, output flowing again after "
        "each, the alerts a human needs, and a lake that matches the ledger",
    ),
    "05-backlog-and-memory.ipynb": (
        "05 · Backlog and memory",
        "chapter complete: a capped catch-up that the arithmetic accounts for, a state store "
        "that expires idle sessions, and a lake that matches the ledger",
    ),
    "06-data-integrity.ipynb": (
        "06 · Data integrity under each policy",
        "chapter complete: every fault under every policy verified; resync's loss bounded by the snapshot interval",
    ),
    "07-kafka-data-loss.ipynb": (
        "07 · Kafka data loss",
        "chapter complete: Kafka's loss was detected, named, bounded by the next snapshot, and verified",
    ),
    "08-the-metadata-trap.ipynb": (
        "08 · The metadata trap, and the way back",
        "chapter complete: the repaired lake matches the ledger",
    ),
    "09-backfill-from-the-lake.ipynb": (
        "09 · Backfill from the lake",
        "chapter complete: the lake rebuilt the output the broker could no longer give",
    ),
    "10-recovery-benchmark.ipynb": (
        "10 · The recovery benchmark",
        re.compile(
            r"chapter complete: nothing lost; every failure recovered before the next; "
            r"with its process killed, ((the job|the baseline) was back to normal "
            r"throughput sooner|both were back to normal throughput in the same time) "
            r"\(the job in \d+ s, the baseline in \d+ s\)"
        ),
    ),
}


def _recorded_seconds(name: str) -> int:
    """The chapter's time as the recording stored it in the notebook's metadata."""
    seconds = json.loads((NOTEBOOKS / name).read_text())["metadata"]["osl_recording"]["seconds"]
    assert isinstance(seconds, int) and seconds > 0, (name, seconds)
    return seconds


def _verdict_matches(shown: str, expected: str | re.Pattern[str]) -> bool:
    return bool(expected.fullmatch(shown)) if isinstance(expected, re.Pattern) else shown == expected


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    """`python -m book` (what `make book` runs) over the recorded workbook."""
    out = tmp_path_factory.mktemp("book")
    run = subprocess.run([sys.executable, "-m", "book", "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, f"make book failed:\n{run.stdout}\n{run.stderr}"
    return out


@pytest.mark.slow
def test_the_index_lists_every_recorded_chapter_with_its_time_and_verdict(book, browser):
    assert sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")) == sorted(WORKBOOK)
    page = browser.new_page()
    try:
        page.goto(book.joinpath("index.html").as_uri())
        rows = page.locator("#chapters tbody tr")
        assert rows.count() == len(WORKBOOK)
        for i, (name, (title, verdict)) in enumerate(sorted(WORKBOOK.items())):
            cells = rows.nth(i).locator("td")
            assert cells.nth(0).inner_text() == title
            assert cells.nth(0).locator("a").get_attribute("href") == name.replace(".ipynb", ".html")
            assert cells.nth(1).inner_text() == f"{_recorded_seconds(name)} s"
            shown = cells.nth(2).inner_text()
            assert _verdict_matches(shown, verdict), f"{name}: the book shows {shown!r}, the chapter prints {verdict!r}"
            assert cells.nth(2).get_attribute("class") == "ok", f"{name}: {shown}"
    finally:
        page.close()


@pytest.mark.slow
def test_a_chapter_opened_from_the_index_shows_its_banner_and_renders_its_plots(book, browser, tmp_path):
    name = "06-data-integrity.ipynb"
    title, verdict = WORKBOOK[name]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(book.joinpath("index.html").as_uri())
        page.locator("#chapters").get_by_role("link", name=title).click()
        page.wait_for_load_state("load")
        assert page.url.endswith("/06-data-integrity.html"), page.url
        assert page.locator("#osl-banner .osl-seconds").inner_text() == f"{_recorded_seconds(name)} s"
        assert page.locator("#osl-banner .osl-verdict").inner_text() == verdict
        assert page.locator("#osl-banner").get_attribute("class") == "osl-banner"  # not "failed"
        widths = image_sizes(page)
        # chapter 06 draws two figures: each fault under each policy, and what resync loses per snapshot interval
        assert len(widths) == 2 and all(w > 0 for w in widths), (
            f"{name}: images' natural widths {widths}; 0 is one the browser could not render"
        )
        page.screenshot(path=str(tmp_path / "book-chapter-06.png"))
    finally:
        page.close()


@pytest.mark.slow
def test_a_decision_opened_from_the_index_s_sidebar_shows_its_page_in_the_same_sidebar(book, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(book.joinpath("index.html").as_uri())
        nav = page.locator("#osl-nav")
        nav.locator("summary", has_text="Decisions").click()  # the decisions are folded but for their own pages
        nav.get_by_role("link", name="0002. The batch cap", exact=True).click()
        page.wait_for_load_state("load")
        assert page.url.endswith("/docs/decisions/0002-batch-cap.html"), page.url
        assert page.title() == "0002. The batch cap: 100,000 records a micro-batch · ordered-stream-lab"
        assert page.locator("main h1").inner_text() == "0002. The batch cap: 100,000 records a micro-batch"
        current = page.locator("#osl-nav a[aria-current=page]")
        assert (current.count(), current.inner_text()) == (1, "0002. The batch cap")
        # and back to the workbook from the docs, by the same sidebar
        page.locator("#osl-nav").get_by_role("link", name="06 · Data integrity under each policy").click()
        page.wait_for_load_state("load")
        assert page.url.endswith("/06-data-integrity.html"), page.url
    finally:
        page.close()
