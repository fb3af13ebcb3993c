"""The workbook as a static site: the recorded chapters rendered to HTML, with an index.

`make book` (``python -m sandbox.book``) renders every ``notebooks/NN-*.ipynb`` as it was last
recorded by ``scripts/record-notebooks.sh`` -- nothing is executed -- into ``build/book/``:
one page per chapter (plots included, embedded in the page) and an ``index.html`` that lists the
chapters with the time each took in the recorded run and its verdict. Each chapter page opens
with the same banner. Open ``build/book/index.html`` in a browser; no server is needed.

A chapter's verdict is its closing line (``chapter complete: ...``), or, for a chapter without
one, the last line its last code cell printed. A chapter whose stored outputs hold an error is
shown as failed, with the error's name, so the book never reads greener than the record.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Chapter", "BookError", "build", "read_chapter"]

_CLOSING = re.compile(r"^(chapter|tour) complete: ")
_CHAPTER_FILE = re.compile(r"^\d\d-.+\.ipynb$")


class BookError(Exception):
    """The book cannot be built from these notebooks; the message names the file and the fix."""


@dataclass(frozen=True, kw_only=True)
class Chapter:
    """What the book shows of one recorded chapter."""

    path: Path
    title: str
    seconds: int | None  # the chapter's time in its recorded run; None if it was never recorded
    run: str | None  # the recording run's id
    verdict: str
    failed: bool
    images: int  # plots among its stored outputs

    @property
    def page(self) -> str:
        return self.path.with_suffix(".html").name


def _text(output: dict) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else text


def read_chapter(path: Path) -> Chapter:
    """Read a recorded chapter's title, run time, verdict and plot count from its stored outputs."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, ValueError, KeyError) as exc:
        raise BookError(
            f"{path}: not a readable notebook ({exc}); restore it with `git checkout -- {path}` "
            f"or re-record the workbook with scripts/record-notebooks.sh"
        ) from None
    title = path.stem
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            first = "".join(cell.get("source", "")).strip().splitlines()
            if first and first[0].startswith("#"):
                title = first[0].lstrip("#").strip()
                break
    closing: str | None = None
    last_printed: str | None = None
    error: str | None = None
    images = 0
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        printed: list[str] = []
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error" and error is None:
                error = f"{output.get('ename', 'error')}: {output.get('evalue', '')}".strip()
            elif kind == "stream" and output.get("name") == "stdout":
                printed += [line for line in _text(output).splitlines() if line.strip()]
            elif kind in ("display_data", "execute_result") and "image/png" in output.get("data", {}):
                images += 1
        closing = next((line for line in reversed(printed) if _CLOSING.match(line)), closing)
        if printed:
            last_printed = printed[-1]
    recording = nb.get("metadata", {}).get("osl_recording", {})
    if error is not None:
        verdict, failed = f"failed: {error}", True
    elif closing or last_printed:
        verdict, failed = (closing or last_printed or ""), False
    else:
        verdict, failed = "not recorded: no stored output (run scripts/record-notebooks.sh)", True
    return Chapter(
        path=path,
        title=title,
        seconds=recording.get("seconds"),
        run=recording.get("run"),
        verdict=verdict,
        failed=failed,
        images=images,
    )


_STYLE = """
.osl-banner { font-family: system-ui, sans-serif; margin: 0 0 1.5em; padding: .8em 1.2em;
  border-left: 6px solid #2e7d32; background: #f1f8e9; }
.osl-banner.failed { border-color: #c62828; background: #ffebee; }
.osl-banner a { margin-right: 1em; }
.osl-index { font-family: system-ui, sans-serif; max-width: 64em; margin: 2em auto; }
.osl-index table { border-collapse: collapse; width: 100%; }
.osl-index td, .osl-index th { text-align: left; padding: .4em .6em; border-bottom: 1px solid #ddd;
  vertical-align: top; }
.osl-index td.failed { color: #c62828; }
"""


# JupyterLab's page, with the chapter's banner opening its main column, and without the
# require.js and MathJax scripts it would fetch from a CDN: the chapters use neither, and the
# book must open offline.
_TEMPLATE = "osl_book.html.j2"
_TEMPLATE_TEXT = f"""{{%- extends 'lab/index.html.j2' -%}}
{{%- block html_head_js -%}}{{%- endblock html_head_js -%}}
{{%- block html_head_js_mathjax -%}}{{%- endblock html_head_js_mathjax -%}}
{{%- block html_head_css -%}}{{{{ super() }}}}<style>{_STYLE}</style>{{%- endblock html_head_css -%}}
{{%- block body_header -%}}{{{{ super() }}}}{{{{ resources.osl_banner }}}}{{%- endblock body_header -%}}
"""


def _time(chapter: Chapter) -> str:
    return f"{chapter.seconds} s" if chapter.seconds is not None else "not recorded"


def _banner(chapter: Chapter, before: Chapter | None, after: Chapter | None) -> str:
    links = ['<a href="index.html">contents</a>']
    if before:
        links.append(f'<a href="{before.page}">&larr; {html.escape(before.title)}</a>')
    if after:
        links.append(f'<a href="{after.page}">{html.escape(after.title)} &rarr;</a>')
    state = " failed" if chapter.failed else ""
    return (
        f'<div class="osl-banner{state}" id="osl-banner"><div>{" ".join(links)}</div>'
        f'<p><b>Recorded run</b> {html.escape(chapter.run or "none")}: '
        f'<span class="osl-seconds">{_time(chapter)}</span>. '
        f'<b>Verdict</b>: <span class="osl-verdict">{html.escape(chapter.verdict)}</span></p></div>'
    )


def _index(chapters: list[Chapter]) -> str:
    rows = "\n".join(
        f'<tr><td><a href="{c.page}">{html.escape(c.title)}</a></td><td>{_time(c)}</td>'
        f'<td class="{"failed" if c.failed else "ok"}">{html.escape(c.verdict)}</td></tr>'
        for c in chapters
    )
    total = sum(c.seconds or 0 for c in chapters)
    runs = sorted({c.run for c in chapters if c.run})
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ordered-stream-lab: the workbook</title>
<style>{_STYLE}</style></head>
<body><main class="osl-index">
<h1>The workbook</h1>
<p>Ordered stateful stream processing with Kafka, PySpark Structured Streaming and object storage,
broken on purpose and put back together. Each chapter below is shown as it was last recorded on the
sandbox ({html.escape(", ".join(runs) or "never recorded")}; {total} s in all); run it yourself from
JupyterLab (<code>docker compose up</code>) or <code>make demo</code>'s sandbox.</p>
<table id="chapters"><thead><tr><th>chapter</th><th>recorded run time</th><th>verdict</th></tr></thead>
<tbody>
{rows}
</tbody></table></main></body></html>
"""


def build(notebooks: Path, out: Path) -> list[Chapter]:
    """Render every recorded chapter under ``notebooks`` and an index into ``out``; return them."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter  # heavy; only the book needs it

    paths = sorted(p for p in notebooks.glob("*.ipynb") if _CHAPTER_FILE.match(p.name))
    if not paths:
        raise BookError(
            f"{notebooks}: no chapters (NN-name.ipynb) to render; run from the checkout's root "
            f"or pass --notebooks <folder>"
        )
    chapters = [read_chapter(p) for p in paths]
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({_TEMPLATE: _TEMPLATE_TEXT})])
    exporter.template_file = _TEMPLATE
    for i, chapter in enumerate(chapters):
        before = chapters[i - 1] if i else None
        after = chapters[i + 1] if i + 1 < len(chapters) else None
        body, _ = exporter.from_filename(
            str(chapter.path), resources={"osl_banner": _banner(chapter, before, after)}
        )
        (out / chapter.page).write_text(body, encoding="utf-8")
    (out / "index.html").write_text(_index(chapters), encoding="utf-8")
    return chapters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.book", description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="the chapters' folder")
    parser.add_argument("--out", type=Path, default=Path("build/book"), help="where the site goes")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        chapters = build(args.notebooks, args.out)
    except BookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for c in chapters:
        flag = "FAILED " if c.failed else ""
        print(f"  {c.path.name}: {_time(c)}, {c.images} plots, {flag}{c.verdict}")
    failed = [c.path.name for c in chapters if c.failed]
    print(
        f"book: {len(chapters)} chapters in {time.monotonic() - started:.1f} s -> "
        f"{args.out / 'index.html'}" + (f"; FAILED chapters: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
