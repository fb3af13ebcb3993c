"""The project's site: the recorded chapters, the README and ``docs/`` as one static site.

`make book` (``python -m book``) renders every ``notebooks/NN-*.ipynb`` as it was last
recorded by ``scripts/record-notebooks.sh`` -- nothing is executed -- and the checkout's
``README.md`` and ``docs/**/*.md`` into ``build/book/``: one page per chapter (plots included,
embedded in the page), an ``index.html`` that lists the chapters with the time each took in the
recorded run and its verdict, and one page per Markdown file at its own path
(``docs/decisions/0002-batch-cap.md`` -> ``docs/decisions/0002-batch-cap.html``). Every page
carries the same sidebar: the workbook's chapters, then the docs (the README, the docs' index,
the guides, the decisions). Open ``build/book/index.html`` in a browser; no server is needed.

A chapter's verdict is its closing line (``chapter complete: ...``), or, for a chapter without
one, the last line its last code cell printed. A chapter whose stored outputs hold an error is
shown as failed, with the error's name, so the book never reads greener than the record.

A link between Markdown pages becomes a link between their pages (``.md`` -> ``.html``, the
``#anchor`` kept: headings carry GitHub's ids, so an anchor that works on GitHub works here); a
link to a chapter's notebook goes to the chapter's page; a link to any other file of the checkout
(source code) shows the file's path, unlinked, as the site does not hold it. A relative link to a
file or a heading that does not exist fails the build, naming the page that holds it.
"""

from __future__ import annotations

import argparse
import html
import json
import posixpath
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

import mistune  # nbconvert's Markdown renderer, so the site needs nothing nbconvert does not bring

__all__ = ["Chapter", "Doc", "BookError", "build", "read_chapter", "read_docs"]

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


_EXTERNAL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:|//)")  # http:, mailto:, //host: not the checkout's


@dataclass(frozen=True, kw_only=True)
class Doc:
    """One Markdown page of the checkout, rendered for the site."""

    source: PurePosixPath  # relative to the checkout: README.md, docs/decisions/0002-batch-cap.md
    title: str  # its first top-level heading
    body: str  # its HTML, links rewritten for the site
    ids: frozenset[str]  # its headings' ids
    links: tuple[PurePosixPath, ...]  # the pages it links to, in order (the docs' index orders the nav)
    images: tuple[PurePosixPath, ...]  # the checkout's files it shows, copied into the site

    @property
    def page(self) -> str:
        return self.source.with_suffix(".html").as_posix()

    @property
    def label(self) -> str:
        """Its name in the sidebar: its title up to a colon ("Operations", "0002. The batch cap")."""
        return "README" if self.source == PurePosixPath("README.md") else self.title.split(":")[0]


def _plain(rendered: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip()


def _slug(text: str) -> str:
    """GitHub's id for a heading: lowercased, punctuation dropped, each space a '-'."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


class _Renderer(mistune.HTMLRenderer):
    """Markdown to HTML for one page: GitHub's heading ids, links rewritten for the site."""

    def __init__(self, root: Path, source: PurePosixPath, pages: set[PurePosixPath], chapters: dict[Path, str]):
        super().__init__(escape=False)  # the checkout's own pages: their inline HTML stays HTML
        self.root, self.source, self.pages, self.chapters = root, source, pages, chapters
        self.title: str | None = None
        self.ids: list[str] = []
        self.links: list[PurePosixPath] = []
        self.images: list[PurePosixPath] = []
        self.anchors: list[tuple[str, str, PurePosixPath, str]] = []  # (text, url, page, id) to check
        self.broken: list[str] = []

    def heading(self, text: str, level: int, **attrs) -> str:
        plain = _plain(text)
        if level == 1 and self.title is None:
            self.title = plain
        slug = base = _slug(plain)
        n = 0
        while slug in self.ids:  # GitHub numbers a repeated heading's id: setup, setup-1, ...
            n += 1
            slug = f"{base}-{n}"
        self.ids.append(slug)
        return f'<h{level} id="{html.escape(slug)}">{text}</h{level}>\n'

    def _relative(self, page: str) -> str:
        return posixpath.relpath(page, self.source.parent.as_posix())

    def _target(self, text: str, url: str) -> PurePosixPath | None:
        """The checkout's file a relative link names; None (and the link noted as broken) if none."""
        path = unquote(url.partition("#")[0])
        joined = PurePosixPath(path.lstrip("/")) if path.startswith("/") else self.source.parent / path
        target = PurePosixPath(posixpath.normpath(joined.as_posix()))
        if target.parts[:1] == ("..",):
            problem = "it leads out of the checkout"
        elif (self.root / target).is_dir() and target / "README.md" in self.pages:
            return target / "README.md"  # a folder shows its README, as on GitHub
        elif (self.root / target).exists():
            return target
        else:
            problem = f"{target} does not exist"
        self.broken.append(f"{self.source}: [{_plain(text)}]({unquote(url)}): {problem}")
        return None

    def link(self, text: str, url: str, title: str | None = None) -> str:
        if _EXTERNAL.match(url):
            return super().link(text, url, title)
        path, hashed, fragment = url.partition("#")
        anchor = f"#{fragment}" if hashed else ""
        if not path:  # a heading of this page
            if fragment:
                self.anchors.append((text, url, self.source, unquote(fragment)))
            return super().link(text, url, title)
        target = self._target(text, url)
        if target is None:
            return text
        if target in self.pages:
            self.links.append(target)
            if fragment:
                self.anchors.append((text, url, target, unquote(fragment)))
            return super().link(text, self._relative(target.with_suffix(".html").as_posix()) + anchor, title)
        chapter = self.chapters.get((self.root / target).resolve())
        if chapter is not None:
            return super().link(text, self._relative(chapter) + anchor, title)
        # A file the site does not hold (source code, a config): its path, not a link that leads nowhere.
        code = f'<code class="osl-file">{html.escape(target.as_posix())}</code>'
        return code if _plain(text) in (target.as_posix(), target.name, path) else f"{text} ({code})"

    def image(self, text: str, url: str, title: str | None = None) -> str:
        if not _EXTERNAL.match(url) and (target := self._target(text, url)) is not None:
            self.images.append(target)
        return super().image(text, url, title)


def read_docs(root: Path, chapters: list[Chapter]) -> list[Doc]:
    """Render ``root``'s README.md and docs/**/*.md for the site; a broken relative link is a BookError."""
    readme = root / "README.md"
    if not readme.is_file():
        raise BookError(f"{readme}: no README to open the site with; run from the checkout's root or pass --root")
    sources = [PurePosixPath("README.md")]
    sources += sorted(PurePosixPath(p.relative_to(root).as_posix()) for p in (root / "docs").rglob("*.md"))
    pages = set(sources)
    chapter_pages = {c.path.resolve(): c.page for c in chapters}
    rendered: list[tuple[_Renderer, str]] = []
    for source in sources:
        renderer = _Renderer(root, source, pages, chapter_pages)
        markdown = mistune.create_markdown(renderer=renderer, plugins=["table", "strikethrough", "url"])
        rendered.append((renderer, markdown((root / source).read_text(encoding="utf-8"))))
    ids = {r.source: set(r.ids) for r, _ in rendered}
    broken = [line for r, _ in rendered for line in r.broken]
    for r, _ in rendered:
        for text, url, page, fragment in r.anchors:
            if fragment not in ids[page]:
                broken.append(f"{r.source}: [{_plain(text)}]({unquote(url)}): {page} has no heading #{fragment}")
    if broken:
        raise BookError(
            f"{len(broken)} broken link(s) in the docs; fix each link, or the page or heading it names:\n  " + "\n  ".join(broken)
        )
    return [
        Doc(
            source=r.source,
            title=r.title or r.source.stem,
            body=body,
            ids=frozenset(r.ids),
            links=tuple(r.links),
            images=tuple(r.images),
        )
        for r, body in rendered
    ]


_STYLE = """
body { margin-left: 17rem !important; }
.osl-nav { position: fixed; top: 0; bottom: 0; left: 0; width: 17rem; box-sizing: border-box;
  overflow-y: auto; padding: .8rem .7rem; background: #f6f8fa; border-right: 1px solid #d0d7de;
  font: 14px/1.35 system-ui, sans-serif; z-index: 10; }
.osl-nav .osl-nav-head, .osl-nav summary { margin: .9rem 0 .3rem; font-size: 12px; font-weight: 700;
  letter-spacing: .04em; text-transform: uppercase; color: #57606a; cursor: pointer; }
.osl-nav ul { list-style: none; margin: 0; padding: 0; }
.osl-nav a { display: block; padding: .15rem .4rem; border-radius: 4px; color: #0b57d0; text-decoration: none; }
.osl-nav a:hover { background: #eaeef2; }
.osl-nav a[aria-current="page"] { background: #dbe7fb; color: #1f2328; font-weight: 600; }
@media (max-width: 60rem) {
  body { margin-left: 0 !important; }
  .osl-nav { position: static; width: auto; border-right: 0; border-bottom: 1px solid #d0d7de; }
}
.osl-banner { font-family: system-ui, sans-serif; margin: 0 0 1.5em; padding: .8em 1.2em;
  border-left: 6px solid #2e7d32; background: #f1f8e9; }
.osl-banner.failed { border-color: #c62828; background: #ffebee; }
.osl-banner a { margin-right: 1em; }
.osl-index { font-family: system-ui, sans-serif; max-width: 64em; margin: 2em auto; padding: 0 2em; }
.osl-index table { border-collapse: collapse; width: 100%; }
.osl-index td, .osl-index th { text-align: left; padding: .4em .6em; border-bottom: 1px solid #ddd;
  vertical-align: top; }
.osl-index td.failed { color: #c62828; }
.osl-doc { font: 16px/1.55 system-ui, sans-serif; color: #1f2328; max-width: 54rem; margin: 2rem auto;
  padding: 0 2rem; }
.osl-doc h1, .osl-doc h2 { border-bottom: 1px solid #d8dee4; padding-bottom: .3rem; }
.osl-doc table { display: block; overflow-x: auto; border-collapse: collapse; margin: 1rem 0; }
.osl-doc th, .osl-doc td { border: 1px solid #d0d7de; padding: .3rem .6rem; text-align: left; vertical-align: top; }
.osl-doc code { font: 90% ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.osl-doc :not(pre) > code { background: #eff1f3; padding: .1em .3em; border-radius: 4px; }
.osl-doc pre { background: #f6f8fa; padding: .8rem 1rem; overflow-x: auto; border-radius: 6px; line-height: 1.4; }
.osl-doc blockquote { margin: 0; padding-left: 1rem; border-left: 4px solid #d0d7de; color: #59636e; }
.osl-doc img { max-width: 100%; }
"""


# JupyterLab's page, with the site's sidebar and the chapter's banner opening its main column, and
# without the require.js and MathJax scripts it would fetch from a CDN: the chapters use neither,
# and the book must open offline.
_TEMPLATE = "osl_book.html.j2"
_TEMPLATE_TEXT = f"""{{%- extends 'lab/index.html.j2' -%}}
{{%- block html_head_js -%}}{{%- endblock html_head_js -%}}
{{%- block html_head_js_mathjax -%}}{{%- endblock html_head_js_mathjax -%}}
{{%- block html_head_css -%}}{{{{ super() }}}}<style>{_STYLE}</style>{{%- endblock html_head_css -%}}
{{%- block body_header -%}}{{{{ super() }}}}{{{{ resources.osl_banner }}}}{{%- endblock body_header -%}}
{{%- block body_footer -%}}</main>
{{{{ resources.osl_nav }}}}
</body>{{%- endblock body_footer -%}}
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
        f"<p><b>Recorded run</b> {html.escape(chapter.run or 'none')}: "
        f'<span class="osl-seconds">{_time(chapter)}</span>. '
        f'<b>Verdict</b>: <span class="osl-verdict">{html.escape(chapter.verdict)}</span></p></div>'
    )


_CURRENT = ' aria-current="page"'


def _nav(chapters: list[Chapter], docs: list[Doc], current: str) -> str:
    """The sidebar every page carries: the workbook's chapters, then the docs; ``current`` is this page."""
    here = posixpath.dirname(current) or "."

    def items(entries: list[tuple[str, str]]) -> str:
        return "\n".join(
            f'<li><a href="{posixpath.relpath(page, here)}"{_CURRENT if page == current else ""}>{html.escape(label)}</a></li>'
            for page, label in entries
        )

    # The README, the docs' index, the guides in the order the index lists them, then each folder of
    # docs/ (the decisions) folded under its name, open on its own pages.
    index = next((d for d in docs if d.source == PurePosixPath("docs/README.md")), None)
    listed = list(dict.fromkeys(index.links)) if index else []
    top = [d for d in docs if len(d.source.parts) <= 2]
    top.sort(
        key=lambda d: (
            d.source != PurePosixPath("README.md"),
            d is not index,
            listed.index(d.source) if d.source in listed else len(listed),
            d.source,
        )
    )
    folders: dict[str, list[Doc]] = {}
    for d in docs:
        if len(d.source.parts) > 2:
            folders.setdefault(d.source.parts[1], []).append(d)
    parts = [
        '<nav class="osl-nav" id="osl-nav" aria-label="ordered-stream-lab">',
        '<p class="osl-nav-head">Workbook</p>',
        f"<ul>\n{items([('index.html', 'Contents')] + [(c.page, c.title) for c in chapters])}\n</ul>",
        '<p class="osl-nav-head">Docs</p>',
        f"<ul>\n{items([(d.page, d.label) for d in top])}\n</ul>",
    ]
    for folder, group in folders.items():
        opened = " open" if any(d.page == current for d in group) else ""
        parts.append(
            f"<details{opened}><summary>{html.escape(folder.replace('-', ' ').capitalize())}</summary>"
            f"<ul>\n{items([(d.page, d.label) for d in group])}\n</ul></details>"
        )
    parts.append("</nav>")
    return "\n".join(parts)


def _doc_page(doc: Doc, nav: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(doc.title)} · ordered-stream-lab</title>
<style>{_STYLE}</style></head>
<body>
<main class="osl-doc">
{doc.body}</main>
{nav}
</body></html>
"""


def _index(chapters: list[Chapter], docs: list[Doc], nav: str) -> str:
    rows = "\n".join(
        f'<tr><td><a href="{c.page}">{html.escape(c.title)}</a></td><td>{_time(c)}</td>'
        f'<td class="{"failed" if c.failed else "ok"}">{html.escape(c.verdict)}</td></tr>'
        for c in chapters
    )
    total = sum(c.seconds or 0 for c in chapters)
    runs = sorted({c.run for c in chapters if c.run})
    pages = {d.page for d in docs}
    docs_line = (
        ' The <a href="docs/README.html">docs</a> hold the guides (operations, performance, the lake\'s '
        "layout, ...) and the decisions, each with the measurement that chose it."
        if "docs/README.html" in pages
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>ordered-stream-lab: the workbook</title>
<style>{_STYLE}</style></head>
<body><main class="osl-index">
<h1>The workbook</h1>
<p>Ordered stateful stream processing with Kafka, PySpark Structured Streaming and object storage,
broken on purpose and put back together. Each chapter below is shown as it was last recorded on the
sandbox ({html.escape(", ".join(runs) or "never recorded")}; {total} s in all); run it yourself from
JupyterLab (<code>docker compose up</code>) or <code>make demo</code>'s sandbox.</p>
<p>New here? Start with the <a href="README.html">README</a>.{docs_line}</p>
<table id="chapters"><thead><tr><th>chapter</th><th>recorded run time</th><th>verdict</th></tr></thead>
<tbody>
{rows}
</tbody></table></main>
{nav}
</body></html>
"""


def build(notebooks: Path, out: Path, root: Path = Path(".")) -> tuple[list[Chapter], list[Doc]]:
    """Render the chapters under ``notebooks`` and ``root``'s README and docs/ into the site at ``out``."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter  # heavy; only the book needs it

    paths = sorted(p for p in notebooks.glob("*.ipynb") if _CHAPTER_FILE.match(p.name))
    if not paths:
        raise BookError(
            f"{notebooks}: no chapters (NN-name.ipynb) to render; run from the checkout's root or pass --notebooks <folder>"
        )
    chapters = [read_chapter(p) for p in paths]
    docs = read_docs(root, chapters)  # before the chapters' slow rendering: a broken link fails fast
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({_TEMPLATE: _TEMPLATE_TEXT})])
    exporter.template_file = _TEMPLATE
    for i, chapter in enumerate(chapters):
        before = chapters[i - 1] if i else None
        after = chapters[i + 1] if i + 1 < len(chapters) else None
        resources = {"osl_banner": _banner(chapter, before, after), "osl_nav": _nav(chapters, docs, chapter.page)}
        body, _ = exporter.from_filename(str(chapter.path), resources=resources)
        (out / chapter.page).write_text(body, encoding="utf-8")
    for doc in docs:
        page = out / doc.page
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(_doc_page(doc, _nav(chapters, docs, doc.page)), encoding="utf-8")
        for image in doc.images:
            (out / image).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / image, out / image)
    (out / "index.html").write_text(_index(chapters, docs, _nav(chapters, docs, "index.html")), encoding="utf-8")
    return chapters, docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout: its README.md and docs/")
    parser.add_argument("--notebooks", type=Path, help="the chapters' folder (default: <root>/notebooks)")
    parser.add_argument("--out", type=Path, default=Path("build/book"), help="where the site goes")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        chapters, docs = build(args.notebooks or args.root / "notebooks", args.out, args.root)
    except BookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for c in chapters:
        flag = "FAILED " if c.failed else ""
        print(f"  {c.path.name}: {_time(c)}, {c.images} plots, {flag}{c.verdict}")
    failed = [c.path.name for c in chapters if c.failed]
    print(
        f"book: {len(chapters)} chapters and {len(docs)} docs pages in {time.monotonic() - started:.1f} s -> "
        f"{args.out / 'index.html'}" + (f"; FAILED chapters: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
