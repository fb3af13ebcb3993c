"""`make book`: the recorded workbook as a static site, opened in a real (headless) browser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.book import read_chapter
from tests.browser import image_sizes

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def _notebook(tmp_path: Path, name: str, outputs: list[list[dict]], seconds: int | None = 7) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# 42 · A chapter\n", "prose"]}]
    cells += [
        {"cell_type": "code", "metadata": {}, "source": "x", "outputs": out, "execution_count": 1}
        for out in outputs
    ]
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
        "42 · A chapter", 7, "chapter complete: all good", False,
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
        [sys.executable, "-m", "sandbox.book", "--notebooks", str(tmp_path), "--out", str(tmp_path / "b")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert run.returncode == 2, run
    assert str(tmp_path) in run.stderr and "--notebooks" in run.stderr and "Traceback" not in run.stderr


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    """`python -m sandbox.book` (what `make book` runs) over the recorded workbook."""
    out = tmp_path_factory.mktemp("book")
    run = subprocess.run(
        [sys.executable, "-m", "sandbox.book", "--out", str(out)], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 0, f"make book failed:\n{run.stdout}\n{run.stderr}"
    return out


@pytest.mark.slow
def test_the_index_lists_every_recorded_chapter_with_its_time_and_verdict(book, browser):
    chapters = [read_chapter(p) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))]
    assert len(chapters) == 11, [c.path.name for c in chapters]
    page = browser.new_page()
    try:
        page.goto(book.joinpath("index.html").as_uri())
        rows = page.locator("#chapters tbody tr")
        assert rows.count() == len(chapters)
        for i, chapter in enumerate(chapters):
            cells = rows.nth(i).locator("td")
            assert cells.nth(0).inner_text() == chapter.title
            assert cells.nth(1).inner_text() == f"{chapter.seconds} s"
            assert cells.nth(2).inner_text() == chapter.verdict
            assert not chapter.failed, f"{chapter.path.name}: {chapter.verdict}"
    finally:
        page.close()


@pytest.mark.slow
def test_a_chapter_opened_from_the_index_shows_its_banner_and_renders_its_plots(book, browser, tmp_path):
    chapter = read_chapter(NOTEBOOKS / "06-data-integrity.ipynb")
    assert chapter.images >= 1  # the chapter this test opens has plots to render
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(book.joinpath("index.html").as_uri())
        page.get_by_role("link", name=chapter.title).click()
        page.wait_for_load_state("load")
        assert page.url.endswith(chapter.page), page.url
        assert page.locator("#osl-banner .osl-seconds").inner_text() == f"{chapter.seconds} s"
        assert page.locator("#osl-banner .osl-verdict").inner_text() == chapter.verdict
        widths = image_sizes(page)
        assert len(widths) == chapter.images and all(w > 0 for w in widths), (
            f"{chapter.page}: images' natural widths {widths}; 0 is one the browser could not render"
        )
        page.screenshot(path=str(tmp_path / "book-chapter-06.png"))
    finally:
        page.close()
